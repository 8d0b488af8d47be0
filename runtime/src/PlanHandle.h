// Internal: what a dsrt_plan handle holds, shared by the C API's source files (CApi.cpp,
// TokenizerApi.cpp).
#ifndef DSRT_SRC_PLANHANDLE_H
#define DSRT_SRC_PLANHANDLE_H

#include "dsrt/dsrt.h"
#include "plan/PlanFile.h"

#include <cstdint>
#include <memory>
#include <vector>

struct dsrt_plan {
  std::shared_ptr<dsrt::PlanFile> file;
  std::vector<std::vector<int64_t>> shapes;  // per tensor: sizes, -1 where dynamic
};

#endif

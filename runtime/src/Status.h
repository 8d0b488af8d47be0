// Internal: how runtime code reports an error through the C API.
#ifndef DSRT_SRC_STATUS_H
#define DSRT_SRC_STATUS_H

#include "dsrt/dsrt.h"

#include <string>

namespace dsrt {
// Records `message` as this thread's last error and returns `status`.
dsrt_status fail(dsrt_status status, std::string message);
} // namespace dsrt

#endif

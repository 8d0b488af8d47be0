// Internal: what the C API's session, generation and group handles hold, shared by its
// source files (CApi.cpp, GroupApi.cpp).
#ifndef DSRT_SRC_SESSIONHANDLE_H
#define DSRT_SRC_SESSIONHANDLE_H

#include "dsrt/dsrt.h"
#include "session/Session.h"
#include "ops/Ops.h"
#include "generate/Generator.h"

#include <memory>
#include <vector>

struct dsrt_session {
  // MPI ranks: the session keeps a pointer to it, so it is declared (and outlives it) first.
  std::unique_ptr<dsrt::ops::Collectives> collectives;
  std::unique_ptr<dsrt::Session> session;
  std::vector<int64_t> outputShape;  // backs dsrt_tensor::shape of the last get_output
  dsrt_device requested = DSRT_DEVICE_CPU;  // what the caller asked for
  int rank = 0;                             // dsrt_session_rank
};

struct dsrt_generation {
  std::vector<dsrt::GeneratedSequence> sequences;
};

namespace dsrt {
// The C options as the generator's; an error status names a bad field.
dsrt_status toGenerateOptions(const dsrt_generate_options *options, GenerateOptions &out);
// The prompts as vectors.
inline DeviceKind deviceKind(dsrt_device device) {
  return device == DSRT_DEVICE_CUDA             ? DeviceKind::Cuda
         : device == DSRT_DEVICE_CPU_REFERENCE ? DeviceKind::CpuReference
                                               : DeviceKind::Cpu;
}
inline bool knownDevice(dsrt_device device) {
  return device == DSRT_DEVICE_CPU || device == DSRT_DEVICE_CUDA ||
         device == DSRT_DEVICE_CPU_REFERENCE;
}
// The C options as the generator's; an error status names a bad field.
dsrt_status toPrompts(size_t count, const int64_t *const *prompts, const size_t *lengths,
                      std::vector<std::vector<int64_t>> &out);
} // namespace dsrt

#endif

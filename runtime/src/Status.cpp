#include "dsrt/dsrt.h"

#include "Status.h"

#include <string>

namespace dsrt {
namespace {
thread_local std::string lastError;
} // namespace

dsrt_status fail(dsrt_status status, std::string message) {
  lastError = std::move(message);
  return status;
}
} // namespace dsrt

extern "C" {

const char *dsrt_version(void) { return DSRT_VERSION; }

unsigned dsrt_plan_format_version(void) { return 1; }

const char *dsrt_status_name(dsrt_status status) {
  switch (status) {
  case DSRT_OK: return "DSRT_OK";
  case DSRT_INVALID_ARGUMENT: return "DSRT_INVALID_ARGUMENT";
  case DSRT_CORRUPT_PLAN: return "DSRT_CORRUPT_PLAN";
  case DSRT_UNSUPPORTED: return "DSRT_UNSUPPORTED";
  case DSRT_OUT_OF_MEMORY: return "DSRT_OUT_OF_MEMORY";
  case DSRT_DEVICE_ERROR: return "DSRT_DEVICE_ERROR";
  case DSRT_INTERNAL: return "DSRT_INTERNAL";
  case DSRT_LEADER_FINISHED: return "DSRT_LEADER_FINISHED";
  }
  return "DSRT_UNKNOWN_STATUS";
}

const char *dsrt_last_error(void) { return dsrt::lastError.c_str(); }
}

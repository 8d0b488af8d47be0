/* libdsrt: the runtime of dsc plans. C API.
 *
 * Every function returns a dsrt_status; on failure the message of the last error on the
 * calling thread is available from dsrt_last_error(). The runtime links none of LLVM, MLIR,
 * ONNX or protobuf. Plans, sessions and generation arrive with the plan-file work
 * (DESIGN.md §4-5); this header holds what they will share. */
#ifndef DSRT_DSRT_H
#define DSRT_DSRT_H

/* Set by the library's own build to export the API; empty for its users. */
#ifndef DSRT_API
#define DSRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsrt_status {
  DSRT_OK = 0,
  DSRT_INVALID_ARGUMENT = 1, /* a null pointer, an unknown name, a shape that does not fit */
  DSRT_CORRUPT_PLAN = 2,     /* the plan file fails verification */
  DSRT_UNSUPPORTED = 3,      /* a plan feature or device this build cannot run */
  DSRT_OUT_OF_MEMORY = 4,
  DSRT_DEVICE_ERROR = 5,
  DSRT_INTERNAL = 6
} dsrt_status;

/* "major.minor.patch" of this library. */
DSRT_API const char *dsrt_version(void);

/* The plan-file format version this library reads. */
DSRT_API unsigned dsrt_plan_format_version(void);

/* A short name of a status ("DSRT_CORRUPT_PLAN"), for logs. */
DSRT_API const char *dsrt_status_name(dsrt_status status);

/* The message of the last failed call on this thread, or "" if none failed. */
DSRT_API const char *dsrt_last_error(void);

#ifdef __cplusplus
}
#endif

#endif

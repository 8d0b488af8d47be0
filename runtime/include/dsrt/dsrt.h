/* libdsrt: the runtime of dsc plans. C API.
 *
 * Every function that can fail returns a dsrt_status; on failure the message of the last
 * error on the calling thread is available from dsrt_last_error(). A failed call leaves
 * its objects usable. The runtime links none of LLVM, MLIR, ONNX or protobuf.
 *
 *   dsrt_plan *plan;      dsrt_plan_open("model.dsp", &plan);
 *   dsrt_session *s;      dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &s);
 *   dsrt_session_set_input(s, "forward", 0, DSRT_I64, shape, 2, ids);
 *   dsrt_session_run(s, "forward");
 *   dsrt_tensor logits;   dsrt_session_get_output(s, "forward", 0, &logits);
 */
#ifndef DSRT_DSRT_H
#define DSRT_DSRT_H

#include <stddef.h>
#include <stdint.h>

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

/* The plan file's element types (schemas/plan.fbs). */
typedef enum dsrt_dtype {
  DSRT_UNDEFINED = 0, DSRT_F32 = 1, DSRT_F16 = 2, DSRT_BF16 = 3, DSRT_F64 = 4, DSRT_I64 = 5,
  DSRT_I32 = 6, DSRT_I16 = 7, DSRT_I8 = 8, DSRT_U8 = 9, DSRT_BOOL = 10, DSRT_U16 = 11,
  DSRT_U32 = 12, DSRT_U64 = 13
} dsrt_dtype;

typedef enum dsrt_device { DSRT_DEVICE_CPU = 0, DSRT_DEVICE_CUDA = 1 } dsrt_device;

/* A tensor the runtime owns (outputs); valid until the next run of the session. */
typedef struct dsrt_tensor {
  const char *name;
  dsrt_dtype dtype;
  size_t rank;
  const int64_t *shape;
  const void *data;
} dsrt_tensor;

typedef struct dsrt_plan dsrt_plan;
typedef struct dsrt_session dsrt_session;

/* "major.minor.patch" of this library. */
DSRT_API const char *dsrt_version(void);
/* The plan-file format version this library reads. */
DSRT_API unsigned dsrt_plan_format_version(void);
/* A short name of a status ("DSRT_CORRUPT_PLAN"), for logs. */
DSRT_API const char *dsrt_status_name(dsrt_status status);
/* The message of the last failed call on this thread, or "" if none failed. */
DSRT_API const char *dsrt_last_error(void);

/* Opens and verifies a plan (the header completely; a rank's weights when a session maps
 * them). */
DSRT_API dsrt_status dsrt_plan_open(const char *path, dsrt_plan **out);
DSRT_API void dsrt_plan_close(dsrt_plan *plan);
/* Tensor-parallel ranks the plan was compiled for. */
DSRT_API int dsrt_plan_rank_count(const dsrt_plan *plan);
/* Inputs and outputs of a program: count, then name/dtype/rank of each. Dynamic dimensions
 * of an input have shape -1 in `*shape_out`, which stays valid as long as the plan. */
DSRT_API dsrt_status dsrt_plan_io_count(const dsrt_plan *plan, const char *program,
                                        int is_output, size_t *count);
DSRT_API dsrt_status dsrt_plan_io_info(const dsrt_plan *plan, const char *program,
                                       int is_output, size_t index, dsrt_tensor *info);

/* A session runs the plan for one rank on one device. */
DSRT_API dsrt_status dsrt_session_create(dsrt_plan *plan, int rank, dsrt_device device,
                                         dsrt_session **out);
DSRT_API void dsrt_session_destroy(dsrt_session *session);
/* Copies `data` in as input `index` of `program`. */
DSRT_API dsrt_status dsrt_session_set_input(dsrt_session *session, const char *program,
                                            size_t index, dsrt_dtype dtype,
                                            const int64_t *shape, size_t rank,
                                            const void *data);
DSRT_API dsrt_status dsrt_session_run(dsrt_session *session, const char *program);
DSRT_API dsrt_status dsrt_session_get_output(dsrt_session *session, const char *program,
                                             size_t index, dsrt_tensor *out);

#ifdef __cplusplus
}
#endif

#endif

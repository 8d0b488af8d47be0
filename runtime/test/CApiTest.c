/* The C API, compiled as C: without a plan it answers its constant questions; with a plan
 * (argv[1], a GPT-2 fixture compiled by ctest) it runs it and refuses bad calls by name. */
#include "dsrt/dsrt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int passed = 0, failures = 0;
#define EXPECT(cond)                                                                        \
  do {                                                                                      \
    if (cond) {                                                                             \
      ++passed;                                                                             \
    } else {                                                                                \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                   \
      ++failures;                                                                           \
    }                                                                                       \
  } while (0)
#define EXPECT_ERROR(call, code, text)                                                      \
  do {                                                                                      \
    dsrt_status status_ = (call);                                                           \
    EXPECT(status_ == (code));                                                              \
    EXPECT(strstr(dsrt_last_error(), (text)) != NULL);                                      \
    if (!strstr(dsrt_last_error(), (text)))                                                 \
      fprintf(stderr, "  message: %s\n", dsrt_last_error());                                \
  } while (0)

static void withoutPlan(void) {
  EXPECT(strlen(dsrt_version()) >= 5);
  EXPECT(dsrt_plan_format_version() >= 1);
  EXPECT(strcmp(dsrt_status_name(DSRT_CORRUPT_PLAN), "DSRT_CORRUPT_PLAN") == 0);
  EXPECT(strcmp(dsrt_status_name((dsrt_status)99), "DSRT_UNKNOWN_STATUS") == 0);
  EXPECT(strcmp(dsrt_last_error(), "") == 0);
  dsrt_plan *plan = NULL;
  EXPECT_ERROR(dsrt_plan_open("/nonexistent/model.dsp", &plan), DSRT_CORRUPT_PLAN,
               "/nonexistent/model.dsp");
  EXPECT(plan == NULL);
  EXPECT_ERROR(dsrt_plan_open(NULL, &plan), DSRT_INVALID_ARGUMENT, "path is null");
  /* No GPU is not an error: the count is 0 and CUDA sessions fall back to the CPU. */
  if (dsrt_cuda_device_count() == 0)
    EXPECT(strlen(dsrt_last_error()) > 0); /* the reason there is none */
  else
    EXPECT(dsrt_cuda_device_count() > 0);
  dsrt_memory memory;
  double bandwidth = 0;
  EXPECT_ERROR(dsrt_session_memory(NULL, &memory), DSRT_INVALID_ARGUMENT, "session is null");
  EXPECT_ERROR(dsrt_session_copy_bandwidth(NULL, 1024, &bandwidth), DSRT_INVALID_ARGUMENT,
               "session is null");
  EXPECT(dsrt_session_device_name(NULL) == NULL);
  /* The CPU kernels' threads: set, read back, refused out of range (unchanged), and 0 back
   * to the default (at least 1). */
  const int initial = dsrt_cpu_threads();
  EXPECT(initial >= 1);
  EXPECT(dsrt_set_cpu_threads(3) == DSRT_OK);
  EXPECT(dsrt_cpu_threads() == 3);
  EXPECT_ERROR(dsrt_set_cpu_threads(-1), DSRT_INVALID_ARGUMENT, "not -1");
  EXPECT_ERROR(dsrt_set_cpu_threads(4097), DSRT_INVALID_ARGUMENT, "0 (the CPUs");
  EXPECT(dsrt_cpu_threads() == 3);
  EXPECT(dsrt_set_cpu_threads(0) == DSRT_OK);
  EXPECT(dsrt_cpu_threads() == initial);
}

static void withPlan(const char *path) {
  dsrt_plan *plan = NULL;
  EXPECT(dsrt_plan_open(path, &plan) == DSRT_OK);
  if (!plan)
    return;
  EXPECT(dsrt_plan_rank_count(plan) == 1);
  size_t inputs = 0, outputs = 0;
  EXPECT(dsrt_plan_io_count(plan, "forward", 0, &inputs) == DSRT_OK && inputs == 3);
  EXPECT(dsrt_plan_io_count(plan, "forward", 1, &outputs) == DSRT_OK && outputs == 1);
  EXPECT_ERROR(dsrt_plan_io_count(plan, "backward", 0, &inputs), DSRT_INVALID_ARGUMENT,
               "no program 'backward'");
  /* The exact count is checked against dsp-dump by tools/dsbench/check_dsbench.py. */
  uint64_t weightBytes = 0;
  EXPECT(dsrt_plan_program_weight_bytes(plan, 0, "forward", &weightBytes) == DSRT_OK &&
         weightBytes > 0);
  EXPECT_ERROR(dsrt_plan_program_weight_bytes(plan, 0, "backward", &weightBytes),
               DSRT_INVALID_ARGUMENT, "no program 'backward'");
  EXPECT_ERROR(dsrt_plan_program_weight_bytes(plan, 3, "forward", &weightBytes),
               DSRT_INVALID_ARGUMENT, "no weight section for rank 3");
  EXPECT_ERROR(dsrt_plan_program_weight_bytes(plan, 0, "forward", NULL), DSRT_INVALID_ARGUMENT,
               "bytes is null");
  dsrt_tensor info;
  EXPECT(dsrt_plan_io_info(plan, "forward", 0, 0, &info) == DSRT_OK);
  EXPECT(strcmp(info.name, "input_ids") == 0 && info.dtype == DSRT_I64 && info.rank == 2 &&
         info.shape[0] == -1 && info.shape[1] == -1);
  /* What a grammar's token masks need: the vocabulary (the logits' width), the EOS tokens
   * (GPT-2's 50256, inside it) and the tokenizer.json dsc embedded. */
  dsrt_tensor logitsInfo;
  int64_t vocab = 0;
  const int64_t *eos = NULL;
  size_t eosCount = 0;
  EXPECT(dsrt_plan_io_info(plan, "forward", 1, 0, &logitsInfo) == DSRT_OK);
  EXPECT(dsrt_plan_vocabulary(plan, &vocab, &eos, &eosCount) == DSRT_OK);
  EXPECT(logitsInfo.rank == 3 && vocab == logitsInfo.shape[2]);
  EXPECT(eosCount >= 1 && eos && eos[0] >= 0 && eos[0] < vocab);
  EXPECT_ERROR(dsrt_plan_vocabulary(plan, NULL, &eos, &eosCount), DSRT_INVALID_ARGUMENT,
               "vocab_size is null");
  const char *json = NULL;
  size_t jsonSize = 0;
  EXPECT(dsrt_plan_tokenizer_json(plan, &json, &jsonSize) == DSRT_OK);
  EXPECT(json && jsonSize > 2 && json[0] == '{' && memchr(json, '}', jsonSize) != NULL);

  dsrt_session *session = NULL;
  EXPECT_ERROR(dsrt_session_create(plan, 1, DSRT_DEVICE_CPU, &session), DSRT_INVALID_ARGUMENT,
               "rank 1 does not exist");
  EXPECT(dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session) == DSRT_OK);
  if (!session) {
    dsrt_plan_close(plan);
    return;
  }
  /* A CPU session holds the rank's weight section and an arena; the copy bandwidth of any
   * machine this runs on is far above 1 MB/s and below 10 TB/s. */
  EXPECT(strcmp(dsrt_session_device_name(session), "cpu") == 0);
  dsrt_memory memory;
  EXPECT(dsrt_session_memory(session, &memory) == DSRT_OK);
  EXPECT(memory.weights > 0 && memory.arena > 0);
  EXPECT_ERROR(dsrt_session_memory(session, NULL), DSRT_INVALID_ARGUMENT, "out is null");
  /* The CPU has no device work to count and nothing to fall back from: zeros, and strict
   * mode is accepted and changes nothing (the run below is strict). */
  dsrt_stats stats;
  memset(&stats, 0xff, sizeof stats);
  EXPECT(dsrt_session_stats(session, &stats) == DSRT_OK);
  EXPECT(stats.kernel_launches == 0 && stats.fallback_steps == 0 && stats.graph_captures == 0 &&
         stats.graph_replays == 0 && stats.bytes_uploaded == 0 && stats.bytes_downloaded == 0);
  EXPECT_ERROR(dsrt_session_stats(session, NULL), DSRT_INVALID_ARGUMENT, "out is null");
  EXPECT_ERROR(dsrt_session_stats(NULL, &stats), DSRT_INVALID_ARGUMENT, "session is null");
  EXPECT_ERROR(dsrt_session_set_strict(NULL, 1), DSRT_INVALID_ARGUMENT, "session is null");
  EXPECT(dsrt_session_set_strict(session, 1) == DSRT_OK);
  double bandwidth = 0;
  EXPECT(dsrt_session_copy_bandwidth(session, 1 << 20, &bandwidth) == DSRT_OK);
  EXPECT(bandwidth > 1e6 && bandwidth < 1e13);
  EXPECT_ERROR(dsrt_session_copy_bandwidth(session, 0, &bandwidth), DSRT_INVALID_ARGUMENT,
               "bytes > 0");
  EXPECT_ERROR(dsrt_session_copy_bandwidth(session, 1024, NULL), DSRT_INVALID_ARGUMENT,
               "bytes_per_second is null");
  /* A CUDA session is on the GPU where there is one, else on the CPU fallback. */
  dsrt_session *cuda = NULL;
  EXPECT(dsrt_session_create(plan, 0, DSRT_DEVICE_CUDA, &cuda) == DSRT_OK);
  if (cuda) {
    const char *name = dsrt_session_device_name(cuda);
    EXPECT(dsrt_cuda_device_count() == 0 ? strcmp(name, "cpu") == 0
                                         : strncmp(name, "cuda:", 5) == 0);
    /* Strict mode refuses a CUDA session that fell back to the CPU. */
    if (dsrt_cuda_device_count() == 0)
      EXPECT_ERROR(dsrt_session_set_strict(cuda, 1), DSRT_UNSUPPORTED, "runs on the CPU");
    else
      EXPECT(dsrt_session_set_strict(cuda, 1) == DSRT_OK);
    EXPECT(dsrt_session_set_strict(cuda, 0) == DSRT_OK);
    dsrt_session_destroy(cuda);
  }
  int64_t ids[4] = {5, 17, 42, 7}, mask[4] = {1, 1, 1, 1}, positions[4] = {0, 1, 2, 3};
  int64_t shape[2] = {1, 4};
  float wrong[4] = {0};
  EXPECT_ERROR(dsrt_session_run(session, "forward"), DSRT_INVALID_ARGUMENT,
               "input 'input_ids' of program 'forward' is not set");
  EXPECT_ERROR(dsrt_session_set_input(session, "forward", 0, DSRT_F32, shape, 2, wrong),
               DSRT_INVALID_ARGUMENT, "input 'input_ids' must be i64, not f32");
  EXPECT_ERROR(dsrt_session_set_input(session, "forward", 0, DSRT_I64, shape, 1, ids),
               DSRT_INVALID_ARGUMENT, "input 'input_ids' must have rank 2, not 1");
  EXPECT_ERROR(dsrt_session_set_input(session, "forward", 3, DSRT_I64, shape, 2, ids),
               DSRT_INVALID_ARGUMENT, "has 3 inputs; there is no input 3");
  EXPECT(dsrt_session_set_input(session, "forward", 0, DSRT_I64, shape, 2, ids) == DSRT_OK);
  EXPECT(dsrt_session_set_input(session, "forward", 1, DSRT_I64, shape, 2, mask) == DSRT_OK);
  EXPECT(dsrt_session_set_input(session, "forward", 2, DSRT_I64, shape, 2, positions) == DSRT_OK);
  EXPECT(dsrt_session_run(session, "forward") == DSRT_OK);
  dsrt_tensor logits;
  EXPECT(dsrt_session_get_output(session, "forward", 0, &logits) == DSRT_OK);
  EXPECT(strcmp(logits.name, "logits") == 0 && logits.dtype == DSRT_F32 && logits.rank == 3);
  EXPECT(logits.shape[0] == 1 && logits.shape[1] == 4 && logits.shape[2] == 300);
  int finite = 1;
  for (int64_t i = 0; i < 4 * 300; ++i)
    finite &= isfinite(((const float *)logits.data)[i]);
  EXPECT(finite);
  /* A failed call leaves the session usable: run again after a refused input. */
  EXPECT(dsrt_session_set_input(session, "forward", 0, DSRT_F32, shape, 2, wrong) != DSRT_OK);
  EXPECT(dsrt_session_run(session, "forward") == DSRT_OK);
  EXPECT(dsrt_session_stats(session, &stats) == DSRT_OK && stats.fallback_steps == 0 &&
         stats.bytes_uploaded == 0);
  dsrt_session_destroy(session);
  dsrt_plan_close(plan);
}

int main(int argc, char **argv) {
  withoutPlan();
  if (argc > 1)
    withPlan(argv[1]);
  printf("%d passed, %d failed\n", passed, failures);
  return failures != 0;
}

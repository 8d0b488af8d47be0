// libFuzzer harness of the plan loader and of session creation (issue 19): any file either
// opens, or fails with DSRT_CORRUPT_PLAN (or another status) and a message. A plan that opens
// gets a session on rank 0 (and an in-process group when it has several ranks), and each of
// its programs runs once on inputs of its declared shapes: a plan that passes verification
// must not make the kernels read outside their buffers. Seeds: the sample plan and small
// compiled plans (fuzz/run.sh).
//
// Three inputs in four are sealed first: the prelude's file size and header checksum are
// made to match the mutated bytes, as a forger would, so that the mutations reach the
// FlatBuffer verifier and the plan checks behind the checksum instead of stopping at it.
#include "fuzz/FuzzSupport.h"
#include "schemas/PlanFormat.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace {

using dsc::fuzz::requireMessage;

// Every input at its declared shape, dynamic dimensions 1, all zeros (token id 0 and position
// 0 are valid in every model), then one run. Errors are fine; a signal is not.
// `Runner` is a session or an in-process group, with its C API's set_input and run.
template <typename Runner>
void runOnce(const dsrt_plan *plan, const char *program, Runner *runner,
             dsrt_status (*setInput)(Runner *, const char *, size_t, dsrt_dtype,
                                     const int64_t *, size_t, const void *),
             dsrt_status (*run)(Runner *, const char *)) {
  size_t inputs = 0;
  if (dsrt_plan_io_count(plan, program, 0, &inputs) != DSRT_OK)
    return;
  for (size_t i = 0; i < inputs; ++i) {
    dsrt_tensor info;
    dsrt_status status = dsrt_plan_io_info(plan, program, 0, i, &info);
    requireMessage(status, "dsrt_plan_io_info");
    if (status != DSRT_OK || info.rank > 8)
      return;
    std::vector<int64_t> shape(info.shape, info.shape + info.rank);
    size_t elements = 1;
    for (int64_t &dimension : shape) {
      if (dimension < 0)
        dimension = 1;
      if (dimension > 4096)
        return;  // too large to allocate here; the session checks it against its limits
      elements *= static_cast<size_t>(dimension);
    }
    if (elements > (1u << 20))
      return;
    std::vector<uint8_t> zeros(elements * dsc::fuzz::elementBytes(info.dtype));
    status = setInput(runner, program, i, info.dtype, shape.data(), shape.size(), zeros.data());
    requireMessage(status, "set_input");
    if (status != DSRT_OK)
      return;
  }
  requireMessage(run(runner, program), "run");
}

const char *const kPrograms[] = {"forward", "prefill", "decode"};

template <typename Runner, typename SetInput, typename Run>
void runPrograms(const dsrt_plan *plan, Runner *runner, SetInput setInput, Run run) {
  for (const char *program : kPrograms)
    runOnce(plan, program, runner, setInput, run);
}

void seal(std::vector<uint8_t> &file) {
  using namespace dsp::format;
  if (file.size() < kPreludeSize || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0)
    return;
  uint8_t bytes[kPreludeSize];
  std::memcpy(bytes, file.data(), kPreludeSize);
  Prelude prelude = decodePrelude(bytes);
  prelude.fileSize = file.size();
  if (prelude.headerOffset == kHeaderOffset &&
      prelude.headerSize <= file.size() - kHeaderOffset)
    prelude.headerChecksum = XXH3_64bits(file.data() + kHeaderOffset, prelude.headerSize);
  encodePrelude(prelude, bytes);
  std::memcpy(file.data(), bytes, kPreludeSize);
}

} // namespace

// The runtime allocates plan-sized buffers with new (std::nothrow) and refuses what it cannot
// get; ASan would abort on a forged size instead of returning null.
extern "C" const char *__asan_default_options() { return "allocator_may_return_null=1"; }

// A forged arena size below the machine's memory is a plan the runtime would run (it refuses
// only what the machine cannot hold), and libFuzzer reports any allocation past its
// -malloc_limit_mb as running out of memory (17 GB, found by fuzz/run.sh 240): sessions here
// refuse more than 1 GiB, as the generate harness's do.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("DSRT_MAX_ARENA_BYTES", "1073741824", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (XXH3_64bits(data, size) % 4 != 0)
    seal(bytes);
  dsc::fuzz::MemoryFile file(bytes.data(), bytes.size());
  dsrt_plan *plan = nullptr;
  dsrt_status status = dsrt_plan_open(file.path(), &plan);
  requireMessage(status, "dsrt_plan_open");
  if (status == DSRT_OK) {
    dsrt_tokenizer *tokenizer = nullptr;
    if (dsrt_tokenizer_from_plan(plan, &tokenizer) == DSRT_OK) {
      int64_t *ids = nullptr;
      size_t count = 0;
      if (dsrt_tokenizer_encode(tokenizer, "Hello, world", 12, 1, &ids, &count) == DSRT_OK)
        dsrt_free(ids);
      dsrt_tokenizer_free(tokenizer);
    }
    const int ranks = dsrt_plan_rank_count(plan);
    for (const char *program : kPrograms) {
      uint64_t bytes = 0;
      for (int rank = 0; rank < ranks && rank < 4; ++rank)
        requireMessage(dsrt_plan_program_weight_bytes(plan, rank, program, &bytes),
                       "dsrt_plan_program_weight_bytes");
    }
    if (ranks == 1) {
      dsrt_session *session = nullptr;
      status = dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session);
      requireMessage(status, "dsrt_session_create");
      if (status == DSRT_OK) {
        runPrograms(plan, session, dsrt_session_set_input, dsrt_session_run);
        dsrt_session_destroy(session);
      }
    } else if (ranks > 1 && ranks <= 4) {
      dsrt_group *group = nullptr;
      status = dsrt_group_create(plan, DSRT_DEVICE_CPU, &group);
      requireMessage(status, "dsrt_group_create");
      if (status == DSRT_OK) {
        runPrograms(plan, group, dsrt_group_set_input, dsrt_group_run);
        dsrt_group_destroy(group);
      }
    }
    dsrt_plan_close(plan);
  }
  return 0;
}

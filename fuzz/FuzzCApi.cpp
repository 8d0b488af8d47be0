// libFuzzer harness of the C API's shapes, dtypes and generation options (issue 19): a
// session on one plan ($DSRT_FUZZ_PLAN, a small single-rank plan) is driven by a sequence of
// calls the input spells: set an input of any program, index, dtype and shape; run; read an
// output; generate with any prompts and options. Every call either works or fails with a
// message, and a failed call leaves the session usable: the same session serves every input,
// and after each input one valid generation must still succeed.
#include "fuzz/FuzzSupport.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using dsc::fuzz::Choices;
using dsc::fuzz::requireMessage;

dsrt_plan *plan = nullptr;
dsrt_session *session = nullptr;

const char *program(Choices &choices) {
  return choices.pick<const char *>(
      {"forward", "prefill", "decode", "prefill_greedy", "decode_greedy", "", "nonexistent",
       nullptr});
}

void setInput(Choices &choices) {
  const char *name = program(choices);
  const size_t index = choices.byte() % 5;
  const auto dtype = static_cast<dsrt_dtype>(choices.byte() % 16);
  const size_t rank = choices.byte() % 6;
  std::vector<int64_t> shape(rank);
  // Elements the shape claims, saturating: the buffer holds that many 8-byte values (as wide
  // as any dtype) up to 2^20; a larger claim exceeds every limit of the fuzzed plan and must
  // be refused before the data is read.
  const size_t cap = 1u << 20;
  size_t elements = 1;
  for (int64_t &dimension : shape) {
    dimension = choices.integer();
    const size_t extent = dimension > 0 ? static_cast<size_t>(dimension) : 0;
    elements = extent && elements > cap / extent ? cap : elements * extent;
  }
  std::vector<int64_t> values(std::min(elements, cap));
  for (size_t i = 0; i < values.size() && !choices.empty(); ++i)
    values[i] = choices.byte() % 8 == 0 ? choices.integer() : choices.byte();
  const bool nullData = choices.byte() % 16 == 0;
  const bool nullShape = rank > 0 && choices.byte() % 16 == 0;
  requireMessage(dsrt_session_set_input(session, name, index, dtype,
                                        nullShape ? nullptr : shape.data(), rank,
                                        nullData ? nullptr : values.data()),
                 "dsrt_session_set_input");
}

void readOutput(Choices &choices) {
  const char *name = program(choices);
  dsrt_tensor tensor;
  dsrt_status status = dsrt_session_get_output(session, name, choices.byte() % 4, &tensor);
  requireMessage(status, "dsrt_session_get_output");
  if (status != DSRT_OK || !tensor.data)
    return;
  // Touch the first and last element so that a buffer smaller than its shape is caught.
  size_t bytes = dsc::fuzz::elementBytes(tensor.dtype);
  for (size_t i = 0; i < tensor.rank; ++i)
    bytes *= static_cast<size_t>(tensor.shape[i]);
  if (bytes) {
    volatile uint8_t first = static_cast<const uint8_t *>(tensor.data)[0];
    volatile uint8_t last = static_cast<const uint8_t *>(tensor.data)[bytes - 1];
    (void)first;
    (void)last;
  }
}

int stopAfter(void *userData, size_t, int64_t) {
  return --*static_cast<int *>(userData) <= 0;
}

dsrt_status generate(Choices &choices, bool valid) {
  const size_t count = valid ? 1 : choices.byte() % 4;
  std::vector<std::vector<int64_t>> prompts(count);
  std::vector<const int64_t *> pointers(count);
  std::vector<size_t> lengths(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t length = valid ? 3 : choices.byte() % 7;
    for (size_t j = 0; j < length; ++j)
      prompts[i].push_back(valid ? static_cast<int64_t>(j + 1)
                                 : choices.byte() % 4 ? choices.byte() : choices.integer());
    pointers[i] = prompts[i].data();
    lengths[i] = length;
  }
  dsrt_generate_options options;
  dsrt_generate_options_init(&options);
  int remaining = 2;
  std::vector<int64_t> stops;
  if (!valid) {
    options.max_new_tokens = static_cast<int32_t>(choices.pick<int64_t>({-1, 0, 1, 2, 3, 100000}));
    options.temperature = choices.real();
    options.top_k = static_cast<int32_t>(choices.integer());
    options.top_p = choices.real();
    options.seed = static_cast<uint64_t>(choices.integer());
    for (size_t i = choices.byte() % 3; i > 0; --i)
      stops.push_back(choices.integer());
    options.stop_tokens = stops.empty() ? nullptr : stops.data();
    options.stop_token_count = stops.size();
    options.ignore_eos = choices.byte() % 2;
    if (choices.byte() % 2) {
      options.on_token = stopAfter;
      options.user_data = &remaining;
    }
    options.num_beams = static_cast<int32_t>(choices.pick<int64_t>({-1, 0, 1, 1, 2, 3, 300}));
    options.length_penalty = choices.real();
    options.early_stopping = static_cast<int32_t>(choices.pick<int64_t>({-1, 0, 1, 2, 3}));
    options.repetition_penalty = choices.real();
    options.no_repeat_ngram_size = static_cast<int32_t>(choices.pick<int64_t>({-1, 0, 1, 2, 40}));
    options.min_new_tokens = static_cast<int32_t>(choices.pick<int64_t>({-1, 0, 1, 3}));
    options.forced_bos_token_id = choices.pick<int64_t>({-2, -1, 0, 5, 1 << 20});
    options.forced_eos_token_id = choices.pick<int64_t>({-2, -1, 0, 5, 1 << 20});
    if (choices.byte() % 16 == 0)
      options.struct_size = choices.byte();
  } else {
    options.max_new_tokens = 2;
    // Beam search over the rows the prompts leave (greedy, as it must be).
    options.num_beams = static_cast<int32_t>(choices.pick<int64_t>({1, 1, 2}));
    options.no_repeat_ngram_size = static_cast<int32_t>(choices.pick<int64_t>({0, 2}));
    options.repetition_penalty = choices.pick<int64_t>({0, 1}) ? 1.3f : 1.0f;
  }
  dsrt_generation *generation = nullptr;
  dsrt_status status = dsrt_generate(session, count, count ? pointers.data() : nullptr,
                                     count ? lengths.data() : nullptr, &options, &generation);
  requireMessage(status, "dsrt_generate");
  if (status != DSRT_OK)
    return status;
  for (size_t i = 0; i < dsrt_generation_count(generation); ++i) {
    const int64_t *tokens = nullptr;
    size_t tokenCount = 0;
    dsrt_finish_reason reason;
    requireMessage(dsrt_generation_tokens(generation, i, &tokens, &tokenCount, &reason),
                   "dsrt_generation_tokens");
  }
  dsrt_generation_free(generation);
  return status;
}

} // namespace

// The runtime allocates plan-sized buffers with new (std::nothrow) and refuses what it cannot
// get; ASan would abort on a forged size instead of returning null.
extern "C" const char *__asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  plan = dsc::fuzz::openFuzzPlan();
  if (dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session) != DSRT_OK) {
    std::fprintf(stderr, "fuzz: a session: %s\n", dsrt_last_error());
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Choices choices(data, size);
  for (int call = 0; call < 12 && !choices.empty(); ++call) {
    switch (choices.byte() % 5) {
    case 0:
    case 1: setInput(choices); break;
    case 2: requireMessage(dsrt_session_run(session, program(choices)), "dsrt_session_run"); break;
    case 3: readOutput(choices); break;
    default: generate(choices, false); break;
    }
  }
  // Whatever failed above, the session still generates.
  Choices none(nullptr, 0);
  if (generate(none, true) != DSRT_OK) {
    std::fprintf(stderr, "fuzz: the session no longer generates: %s\n", dsrt_last_error());
    std::abort();
  }
  return 0;
}

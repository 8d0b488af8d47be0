#include "fuzz/RunCompiledPlan.h"
#include "fuzz/FuzzSupport.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsc::fuzz {
namespace {

// A session, or an in-process group of every rank of a TP plan, behind one interface.
struct Runner {
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;
  bool ready() const { return session || group; }
  dsrt_status generate(size_t count, const int64_t *const *prompts, const size_t *lengths,
                       const dsrt_generate_options *options, dsrt_generation **out) {
    return group ? dsrt_group_generate(group, count, prompts, lengths, options, out)
                 : dsrt_generate(session, count, prompts, lengths, options, out);
  }
  dsrt_status setInput(const char *program, size_t index, dsrt_dtype dtype,
                       const int64_t *shape, size_t rank, const void *data) {
    return group ? dsrt_group_set_input(group, program, index, dtype, shape, rank, data)
                 : dsrt_session_set_input(session, program, index, dtype, shape, rank, data);
  }
  dsrt_status run(const char *program) {
    return group ? dsrt_group_run(group, program) : dsrt_session_run(session, program);
  }
  ~Runner() {
    dsrt_group_destroy(group);
    dsrt_session_destroy(session);
  }
};

// One run of `program` with every input zero (ids 0, an all-masked mask, position 0) at
// its static shape, dynamic dimensions 1: what `dsrun PLAN` with no inputs would need.
void runWithDefaultInputs(const dsrt_plan *plan, const char *program, Runner &runner) {
  size_t inputs = 0;
  if (dsrt_plan_io_count(plan, program, 0, &inputs) != DSRT_OK)
    return;  // the plan has no such program
  for (size_t i = 0; i < inputs; ++i) {
    dsrt_tensor info;
    requireMessage(dsrt_plan_io_info(plan, program, 0, i, &info), "dsrt_plan_io_info");
    std::vector<int64_t> shape(info.shape, info.shape + info.rank);
    // The data must hold what the shape says (the C API cannot check a buffer's size): an
    // input of a static shape over 2^24 elements, which a mutated model may declare and
    // the plan then takes as it is, is not run.
    const size_t cap = size_t(1) << 24;
    size_t elements = 1;
    for (int64_t &dim : shape) {
      dim = dim < 0 ? 1 : dim;
      const size_t extent = static_cast<size_t>(dim);
      elements = extent != 0 && elements > cap / extent ? cap + 1 : elements * extent;
    }
    if (elements > cap)
      return;
    std::vector<uint8_t> zeros(elements * elementBytes(info.dtype) + 8, 0);
    requireMessage(runner.setInput(program, i, info.dtype, shape.data(), shape.size(),
                                   zeros.data()),
                   "set_input (default)");
  }
  requireMessage(runner.run(program), "run (default inputs)");
}

} // namespace

void runCompiledPlan(const char *path, size_t choice) {
  dsrt_plan *plan = nullptr;
  requireMessage(dsrt_plan_open(path, &plan), "dsrt_plan_open");
  if (!plan)
    return;
  const dsrt_device device = choice % 4 == 0 ? DSRT_DEVICE_CPU_REFERENCE : DSRT_DEVICE_CPU;
  // A padded batch of two prompts of ids that any vocabulary the fixtures have holds, and
  // one the plan's vocabulary check may refuse.
  const std::vector<int64_t> first = {1, 2, 3}, second = {static_cast<int64_t>(choice % 97)};
  const int64_t *prompts[] = {first.data(), second.data()};
  const size_t lengths[] = {first.size(), second.size()};
  dsrt_generate_options options;
  dsrt_generate_options_init(&options);
  options.max_new_tokens = 1 + static_cast<int32_t>(choice % 3);
  if (choice % 5 == 0) {
    options.temperature = 0.8f;
    options.top_k = 5;
    options.seed = choice;
  }
  const size_t batch = 1 + choice % 2;
  {
    Runner runner;
    if (dsrt_plan_rank_count(plan) == 1)
      requireMessage(dsrt_session_create(plan, 0, device, &runner.session),
                     "dsrt_session_create");
    else
      requireMessage(dsrt_group_create(plan, device, &runner.group), "dsrt_group_create");
    if (runner.ready()) {
      dsrt_generation *generation = nullptr;
      requireMessage(runner.generate(batch, prompts, lengths, &options, &generation),
                     "generate");
      dsrt_generation_free(generation);
      for (const char *program : {"forward", "prefill", "decode", "encode"})
        runWithDefaultInputs(plan, program, runner);
    }
  }
  dsrt_plan_close(plan);
}

} // namespace dsc::fuzz

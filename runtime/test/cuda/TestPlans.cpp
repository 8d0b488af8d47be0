#include "TestPlans.h"

#include "FakeDriver.h"
#include "io/TensorProto.h"
#include "session/PlanChecks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>

namespace dsrt::cuda::test {

namespace {

bool openPlan(const char *variable, const char *fallback, std::shared_ptr<PlanFile> &out) {
  out = openPlanFile(variable, fallback);
  return out != nullptr;
}

} // namespace

std::shared_ptr<PlanFile> openPlanFile(const char *variable, const char *fallback) {
  const char *path = std::getenv(variable);
  std::unique_ptr<PlanFile> plan;
  Status status = PlanFile::open(path && *path ? path : fallback, plan);
  EXPECT_TRUE(status.isOk()) << status.message();
  return std::shared_ptr<PlanFile>(std::move(plan));
}

std::vector<std::string> launchedKernels(const PlanFile &plan) {
  std::map<const void *, std::string> names;
  const auto &functions = fake::state().functions;
  for (size_t i = 0; i < functions.size(); ++i)
    names[functions[i]] = plan.plan().kernels()->Get(static_cast<uint32_t>(i))->name()->str();
  std::vector<std::string> launched;
  for (const fake::Launch &launch : fake::state().launches)
    launched.push_back(names.count(launch.function) ? names[launch.function] : "?");
  return launched;
}

bool openServingPlan(std::shared_ptr<PlanFile> &out) {
  return openPlan("DSRT_TEST_SERVING_PLAN", DSRT_TEST_SERVING_PLAN_DEFAULT, out);
}

uint64_t pagedBytesPerBlock(const PlanFile &plan, int64_t blockSize, int rank) {
  std::vector<KvLayerShape> layers;
  EXPECT_TRUE(kvCacheLayout(plan, rank, layers).isOk());
  uint64_t bytes = 0;
  for (const KvLayerShape &layer : layers)
    bytes += 2 * static_cast<uint64_t>(layer.kvHeads * blockSize * layer.headDim) *
             dtypeSize(layer.dtype);
  return bytes;
}

bool openLlamaLongPlan(std::shared_ptr<PlanFile> &out) {
  return openPlan("DSRT_TEST_LLAMA_LONG_PLAN", DSRT_TEST_LLAMA_LONG_PLAN_DEFAULT, out);
}

bool openGpt2Plan(std::shared_ptr<PlanFile> &out, bool cpuOnly) {
  return cpuOnly ? openPlan("DSRT_TEST_GPT2_CPU_PLAN", DSRT_TEST_GPT2_CPU_PLAN_DEFAULT, out)
                 : openPlan("DSRT_TEST_GPT2_PLAN", DSRT_TEST_GPT2_PLAN_DEFAULT, out);
}

bool bindForward(Session &session) {
  std::string data = std::string(DSRT_SOURCE_DIR) + "/test/models/gpt2-op14/test_data_set_0/";
  const dsp::Program *forward = session.program("forward");
  if (!forward || !forward->inputs()) {
    ADD_FAILURE() << "the plan has no forward program";
    return false;
  }
  const auto *tensors = session.plan().plan().tensors();
  std::vector<io::NamedTensor> inputs(forward->inputs()->size());
  int64_t rows = INT64_MAX;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Status status = io::readTensorProto(data + "input_" + std::to_string(i) + ".pb", inputs[i]);
    if (!status.isOk()) {
      ADD_FAILURE() << status.message();
      return false;
    }
    size_t index = 0;
    while (index < inputs.size() &&
           tensors->Get(forward->inputs()->Get(index))->name()->str() != inputs[i].name)
      ++index;
    if (index == inputs.size()) {
      ADD_FAILURE() << "forward has no input '" << inputs[i].name << "'";
      return false;
    }
    // The fixture plan may allow fewer rows than the test data has: each row is computed
    // independently, so the leading rows and their reference logits are a valid test.
    TensorRef value = inputs[i].tensor.ref();
    const dsp::Tensor &tensor = *tensors->Get(forward->inputs()->Get(index));
    if (tensor.max_shape() && !value.shape.empty() && value.shape[0] > tensor.max_shape()->Get(0))
      rows = std::min<int64_t>(rows, tensor.max_shape()->Get(0));
    if (rows < value.shape[0])
      value.shape[0] = rows;
    status = session.setInput("forward", index, value);
    if (!status.isOk()) {
      ADD_FAILURE() << status.message();
      return false;
    }
  }
  return true;
}

bool runForward(Session &session, std::vector<float> &logits, std::vector<float> &reference) {
  std::string data = std::string(DSRT_SOURCE_DIR) + "/test/models/gpt2-op14/test_data_set_0/";
  if (!bindForward(session))
    return false;
  Status status = session.run("forward");
  if (!status.isOk()) {
    ADD_FAILURE() << status.message();
    return false;
  }
  TensorRef out;
  status = session.output("forward", 0, out);
  if (!status.isOk() || out.dtype != DType::F32) {
    ADD_FAILURE() << status.message();
    return false;
  }
  logits.assign(out.as<float>(), out.as<float>() + out.elements());
  io::NamedTensor expected;
  status = io::readTensorProto(data + "output_0.pb", expected);
  if (!status.isOk()) {
    ADD_FAILURE() << status.message();
    return false;
  }
  const float *values = reinterpret_cast<const float *>(expected.tensor.storage.data());
  int64_t count = elementCount(expected.tensor.shape);
  int64_t rows = out.shape.empty() ? INT64_MAX : out.shape[0];  // the rows bindForward bound
  if (!expected.tensor.shape.empty() && expected.tensor.shape[0] > rows)
    count = count / expected.tensor.shape[0] * rows;
  reference.assign(values, values + count);
  return true;
}

void expectClose(const std::vector<float> &actual, const std::vector<float> &expected,
                 float tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i)
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance * std::max(1.0f, std::fabs(expected[i]))))
      if (++bad <= 5)
        ADD_FAILURE() << "element " << i << ": " << actual[i] << " vs " << expected[i];
  EXPECT_EQ(bad, 0u);
}

Status runTokens(Session &session, const char *program, int64_t total, int64_t tokens,
                 std::vector<float> *logits) {
  int64_t past = total - tokens;
  std::vector<int64_t> ids(tokens), mask(total, 1), positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    ids[t] = (53 * (past + t) + 5) % 300;
    positions[t] = past + t;
  }
  const dsp::Program *found = session.program(program);
  if (!found)
    return Status::error(std::string("no program ") + program);
  for (size_t i = 0; i < found->inputs()->size(); ++i) {
    std::string name =
        session.plan().plan().tensors()->Get(found->inputs()->Get(i))->name()->str();
    TensorRef value{DType::I64, {1, tokens},
                    name == "position_ids" ? positions.data() : ids.data()};
    if (name == "attention_mask")
      value = {DType::I64, {1, total}, mask.data()};
    DSRT_RETURN_IF_ERROR(session.setInput(program, i, value));
  }
  DSRT_RETURN_IF_ERROR(session.run(program));
  TensorRef out;
  DSRT_RETURN_IF_ERROR(session.output(program, 0, out));
  if (logits)
    logits->assign(out.as<float>(), out.as<float>() + out.elements());
  return Status::ok();
}

} // namespace dsrt::cuda::test

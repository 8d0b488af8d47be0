// Beam search on the CUDA session (CudaSession::reorderKvRows) against the fake driver: the
// device cache's rows follow the beams as the CPU session's do. Every step falls back to
// the CPU's reference kernels over the device cache (downloaded and uploaded per attention
// step), so the CPU reference session computes the same sums and the tokens must be equal;
// only the rows' moves are the CUDA session's own. The real GPU's run is
// test/gpu/beam-search.test.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "cpu/Session.h"
#include "cuda/CudaSession.h"
#include "generate/Generator.h"

#include <gtest/gtest.h>

namespace dsrt::cuda {
namespace {

GpuOpFn noLaunchers(std::string_view) { return nullptr; }

struct Sessions {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> cuda;
  std::unique_ptr<CpuSession> cpu;
};

void createSessions(Sessions &out) {
  fake::reset();
  ASSERT_TRUE(test::openGpt2Plan(out.plan));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = noLaunchers;
  Status status = CudaSession::create(out.plan, 0, options, out.cuda);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_TRUE(CpuSession::create(out.plan, 0, out.cpu, nullptr, {/*reference=*/true}).isOk());
  ASSERT_TRUE(out.cuda->hasKvCache()) << "the plan has no session KV cache to reorder";
}

std::vector<GeneratedSequence> generateOn(Session &session,
                                          const std::vector<std::vector<int64_t>> &prompts,
                                          const GenerateOptions &options) {
  std::vector<GeneratedSequence> out;
  Status status = generate(session, prompts, options, out);
  EXPECT_TRUE(status.isOk()) << session.deviceName() << ": " << status.message();
  return out;
}

void expectSameTokens(const std::vector<GeneratedSequence> &cuda,
                      const std::vector<GeneratedSequence> &cpu) {
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    EXPECT_FALSE(cpu[i].tokens.empty());
    EXPECT_EQ(cuda[i].tokens, cpu[i].tokens);
    EXPECT_EQ(cuda[i].reason, cpu[i].reason);
  }
}

TEST(CudaBeamSearch, TheDeviceCachesRowsFollowTheBeams) {
  Sessions s;
  ASSERT_NO_FATAL_FAILURE(createSessions(s));
  const int64_t maxBatch = s.plan->plan().limits()->max_batch();
  const int64_t maxSeq = s.plan->plan().limits()->max_seq_len();
  const std::vector<std::vector<int64_t>> prompts = {{37, 122, 254, 228}, {5, 6, 7}};
  for (int64_t beams : {2, 3, 4}) {
    for (float lengthPenalty : {1.0f, -1.0f}) {
      SCOPED_TRACE(std::to_string(beams) + " beams, length penalty " +
                   std::to_string(lengthPenalty));
      GenerateOptions options;
      options.numBeams = beams;
      options.lengthPenalty = lengthPenalty;
      options.earlyStopping = GenerateOptions::EarlyStopping::Never;
      options.ignoreEos = true;
      options.maxNewTokens = maxSeq - 4;
      // Alone, and as one batch where the plan's rows hold every prompt's beams.
      for (size_t p = 0; p < prompts.size(); ++p)
        expectSameTokens(generateOn(*s.cuda, {prompts[p]}, options),
                         generateOn(*s.cpu, {prompts[p]}, options));
      if (beams * static_cast<int64_t>(prompts.size()) <= maxBatch)
        expectSameTokens(generateOn(*s.cuda, prompts, options),
                         generateOn(*s.cpu, prompts, options));
    }
  }
}

// Binds a batch of rows of `tokens` new tokens each after `past` cached ones (ids, an
// all-ones mask, positions); false when the program takes another input.
struct BatchInputs {
  std::vector<int64_t> ids, mask, positions;
};
bool bindRows(Session &session, const char *program, const std::vector<std::vector<int64_t>> &rows,
              int64_t past, BatchInputs &storage) {
  const auto batch = static_cast<int64_t>(rows.size());
  const auto tokens = static_cast<int64_t>(rows[0].size());
  storage = {};
  for (const std::vector<int64_t> &row : rows) {
    storage.ids.insert(storage.ids.end(), row.begin(), row.end());
    for (int64_t t = 0; t < tokens; ++t)
      storage.positions.push_back(past + t);
  }
  storage.mask.assign(static_cast<size_t>(batch * (past + tokens)), 1);
  const dsp::Program *found = session.program(program);
  const auto *tensors = session.plan().plan().tensors();
  for (size_t i = 0; found && i < found->inputs()->size(); ++i) {
    std::string name = tensors->Get(found->inputs()->Get(i))->name()->str();
    TensorRef value{DType::I64, {batch, tokens}, storage.ids.data()};
    if (name == "attention_mask")
      value = {DType::I64, {batch, past + tokens}, storage.mask.data()};
    else if (name == "position_ids")
      value = {DType::I64, {batch, tokens}, storage.positions.data()};
    else if (name != "input_ids")
      return false;
    Status status = session.setInput(program, i, value);
    if (!status.isOk()) {
      ADD_FAILURE() << status.message();
      return false;
    }
  }
  return found != nullptr;
}

// Each row's last logits after `program` ran.
std::vector<std::vector<float>> rowLogits(Session &session, const char *program) {
  TensorRef out;
  Status status = session.output(program, 0, out);
  EXPECT_TRUE(status.isOk()) << status.message();
  if (!status.isOk() || out.dtype != DType::F32 || out.shape.size() != 3)
    return {};
  std::vector<std::vector<float>> rows;
  const int64_t vocab = out.shape[2], positions = out.shape[1];
  for (int64_t b = 0; b < out.shape[0]; ++b) {
    const float *last = out.as<float>() + (b * positions + positions - 1) * vocab;
    rows.emplace_back(last, last + vocab);
  }
  return rows;
}

TEST(CudaBeamSearch, ReorderingMovesEveryLayersRowsOnTheDevice) {
  Sessions s;
  ASSERT_NO_FATAL_FAILURE(createSessions(s));
  const int64_t maxBatch = s.plan->plan().limits()->max_batch();
  ASSERT_GE(maxBatch, 3) << "the plan's rows cannot hold three prompts";
  // Three different prompts are prefilled, then the rows moved as (2, 0, 0), then one token
  // decoded: row 0 continues prompt 2, rows 1 and 2 prompt 0. A move that did not happen,
  // or took the wrong positions or heads, gives other logits than the CPU session's.
  const std::vector<std::vector<int64_t>> prompts = {{37, 122, 254}, {5, 6, 7}, {90, 91, 92}};
  const std::vector<std::vector<int64_t>> next = {{11}, {12}, {12}};
  std::vector<std::vector<std::vector<float>>> decoded;
  for (Session *session : {static_cast<Session *>(s.cuda.get()),
                           static_cast<Session *>(s.cpu.get())}) {
    SCOPED_TRACE(session->deviceName());
    BatchInputs inputs;
    ASSERT_TRUE(bindRows(*session, "prefill", prompts, 0, inputs));
    ASSERT_TRUE(session->run("prefill").isOk());
    Status status = session->reorderKvRows({2, 0, 0}, 3);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_TRUE(bindRows(*session, "decode", next, 3, inputs));
    status = session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
    decoded.push_back(rowLogits(*session, "decode"));
    ASSERT_EQ(decoded.back().size(), 3u);
    // Rows 1 and 2 now hold the same prompt and token: the same logits.
    test::expectClose(decoded.back()[1], decoded.back()[2], 0.0f);
    // Bad sources are refused by name, and leave the cache as it was.
    status = session->reorderKvRows({0, 3, 1}, 3);
    EXPECT_NE(status.message().find("KV row 3 is not among the 3 rows reordered"),
              std::string::npos)
        << status.message();
    status = session->reorderKvRows(std::vector<int64_t>(maxBatch + 1, 0), 3);
    EXPECT_NE(status.message().find("KV rows of a cache of"), std::string::npos)
        << status.message();
  }
  for (size_t b = 0; b < 3; ++b)
    test::expectClose(decoded[0][b], decoded[1][b], 1e-6f);
}

} // namespace
} // namespace dsrt::cuda

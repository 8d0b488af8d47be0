// The writer and the loader together: every field of a written plan reads back, weights
// come back byte for byte from the mapped sections at their alignments, weights are
// produced one at a time straight into the file, and a failed write leaves nothing behind.
#include "PlanTestSupport.h"
#include "SamplePlan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include <sys/stat.h>

namespace {

using plantest::ScratchDir;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

template <typename T> std::vector<T> vec(const flatbuffers::Vector<T> *v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

TEST(PlanRoundTrip, EveryFieldReadsBack) {
  ScratchDir dir;
  std::string path = dir.file("sample.dsp");
  dsc::PlanWriter writer(sample::kRanks);
  ASSERT_TRUE(sample::fill(writer).isOk());
  dsp::PlanT expected(writer.plan());  // before write() adds sections
  dsrt::Status written = writer.write(path);
  ASSERT_TRUE(written.isOk()) << written.message();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"sample.dsp"});

  std::unique_ptr<dsrt::PlanFile> file;
  dsrt::Status opened = dsrt::PlanFile::open(path, file);
  ASSERT_TRUE(opened.isOk()) << opened.message();
  const dsp::Plan &plan = file->plan();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(file->fileSize(), static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(file->prelude().formatVersion, 1u);
  EXPECT_EQ(plan.format_version(), 1u);
  EXPECT_EQ(str(plan.producer()), "dsc test");
  EXPECT_EQ(str(plan.model_name()), "tiny-sample");
  ASSERT_TRUE(plan.options());
  EXPECT_EQ(str(plan.options()->dtype()), "fp16");
  EXPECT_EQ(plan.options()->tp(), 2);
  EXPECT_EQ(str(plan.options()->command_line()), expected.options->command_line);
  ASSERT_TRUE(plan.limits());
  EXPECT_EQ(plan.limits()->max_batch(), 4);
  EXPECT_EQ(plan.limits()->max_seq_len(), 128);
  ASSERT_EQ(plan.symbols()->size(), 2u);
  EXPECT_EQ(str(plan.symbols()->Get(1)->symbol()), "sequence");
  EXPECT_EQ(plan.symbols()->Get(1)->max(), 128);
  EXPECT_EQ(plan.arena_bytes(), expected.arena_bytes);
  EXPECT_EQ(plan.arena_alignment(), 64u);
  EXPECT_EQ(vec(plan.tokenizer_json()), expected.tokenizer_json);

  ASSERT_EQ(plan.tensors()->size(), expected.tensors.size());
  for (uint32_t i = 0; i < plan.tensors()->size(); ++i) {
    const dsp::Tensor &t = *plan.tensors()->Get(i);
    const dsp::TensorT &e = *expected.tensors[i];
    SCOPED_TRACE(e.name);
    EXPECT_EQ(str(t.name()), e.name);
    EXPECT_EQ(t.dtype(), e.dtype);
    EXPECT_EQ(t.kind(), e.kind);
    ASSERT_EQ(t.shape() ? t.shape()->size() : 0u, e.shape.size());
    for (uint32_t d = 0; d < e.shape.size(); ++d) {
      EXPECT_EQ(t.shape()->Get(d)->size(), e.shape[d]->size);
      EXPECT_EQ(str(t.shape()->Get(d)->symbol()), e.shape[d]->symbol);
    }
    EXPECT_EQ(vec(t.max_shape()), e.max_shape);
    EXPECT_EQ(t.arena_offset(), e.arena_offset);
    EXPECT_EQ(t.arena_bytes(), e.arena_bytes);
    EXPECT_EQ(t.weight_index(), e.weight_index);
    EXPECT_EQ(vec(t.constant_data()), e.constant_data);
  }

  ASSERT_EQ(plan.programs()->size(), expected.programs.size());
  for (uint32_t p = 0; p < plan.programs()->size(); ++p) {
    const dsp::Program &program = *plan.programs()->Get(p);
    const dsp::ProgramT &e = *expected.programs[p];
    EXPECT_EQ(str(program.name()), e.name);
    EXPECT_EQ(vec(program.inputs()), e.inputs);
    EXPECT_EQ(vec(program.outputs()), e.outputs);
    EXPECT_EQ(vec(program.branch_outputs()), e.branch_outputs);
    ASSERT_EQ(program.steps()->size(), e.steps.size());
    for (uint32_t s = 0; s < e.steps.size(); ++s) {
      const dsp::Step &step = *program.steps()->Get(s);
      const dsp::StepT &es = *e.steps[s];
      SCOPED_TRACE(es.op);
      EXPECT_EQ(str(step.op()), es.op);
      EXPECT_EQ(vec(step.inputs()), es.inputs);
      EXPECT_EQ(vec(step.outputs()), es.outputs);
      EXPECT_EQ(vec(step.branches()), es.branches);
      EXPECT_EQ(str(step.location()), es.location);
      ASSERT_EQ(step.attrs() ? step.attrs()->size() : 0u, es.attrs.size());
      for (uint32_t a = 0; a < es.attrs.size(); ++a) {
        const dsp::Attr &attr = *step.attrs()->Get(a);
        const dsp::AttrT &ea = *es.attrs[a];
        EXPECT_EQ(str(attr.name()), ea.name);
        EXPECT_EQ(attr.kind(), ea.kind);
        EXPECT_EQ(attr.i(), ea.i);
        EXPECT_EQ(attr.f(), ea.f);
        EXPECT_EQ(str(attr.s()), ea.s);
        EXPECT_EQ(vec(attr.ints()), ea.ints);
        EXPECT_EQ(vec(attr.floats()), ea.floats);
        EXPECT_EQ(attr.tensor_dtype(), ea.tensor_dtype);
        EXPECT_EQ(vec(attr.tensor_shape()), ea.tensor_shape);
        EXPECT_EQ(vec(attr.tensor_data()), ea.tensor_data);
        EXPECT_EQ(attr.type(), ea.type);
      }
    }
  }
  // The sample has every attribute kind, -1 for an absent input and an If.
  EXPECT_EQ(plan.programs()->Get(0)->steps()->Get(2)->inputs()->Get(2), -1);
  EXPECT_EQ(vec(plan.programs()->Get(0)->steps()->Get(4)->branches()), (std::vector<int32_t>{1, 2}));

  ASSERT_EQ(plan.kernels()->size(), 1u);
  const dsp::Kernel &kernel = *plan.kernels()->Get(0);
  EXPECT_EQ(str(kernel.name()), "fused_gemm_bias");
  EXPECT_EQ(str(kernel.entry()), "fused_gemm_bias_kernel");
  EXPECT_EQ(vec(kernel.ptx()), expected.kernels[0]->ptx);
  EXPECT_EQ(str(kernel.kind()), "fused_gemm_bias");
  ASSERT_EQ(kernel.binaries()->size(), 2u);
  EXPECT_EQ(str(kernel.binaries()->Get(1)->arch()), "sm_90");
  EXPECT_EQ(vec(kernel.binaries()->Get(1)->cubin()), expected.kernels[0]->binaries[1]->cubin);

  // Sections: one per rank, page aligned, after the header, in order; weights 64-aligned
  // and identical to what the callbacks produced, in the mapping and in the file itself.
  std::vector<uint8_t> bytes = plantest::readFile(path);
  ASSERT_EQ(file->rankCount(), sample::kRanks);
  uint64_t previousEnd = 64 + file->headerSize();
  for (int rank = 0; rank < sample::kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const dsrt::PlanSection *section = nullptr;
    dsrt::Status status = file->section(rank, section);
    ASSERT_TRUE(status.isOk()) << status.message();
    EXPECT_EQ(section->rank(), rank);
    const dsp::WeightSection &table = section->table();
    EXPECT_EQ(table.file_offset() % 4096, 0u);
    EXPECT_GE(table.file_offset(), previousEnd);
    previousEnd = table.file_offset() + table.size();
    EXPECT_EQ(section->size(), table.size());
    ASSERT_EQ(section->weightCount(), sample::weights().size());
    for (size_t w = 0; w < sample::weights().size(); ++w) {
      const sample::WeightSpec &spec = sample::weights()[w];
      const dsp::WeightEntry &entry = section->entry(w);
      SCOPED_TRACE(spec.name);
      EXPECT_EQ(str(entry.name()), spec.name);
      EXPECT_EQ(dsrt::planDType(entry.dtype()), spec.dtype);
      EXPECT_EQ(vec(entry.shape()), spec.shape[rank]);
      EXPECT_EQ(entry.offset() % 64, 0u);
      std::vector<uint8_t> want = sample::weightBytes(rank, w);
      ASSERT_EQ(entry.bytes(), want.size());
      const uint8_t *data = section->weightData(w);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
      EXPECT_EQ(std::vector<uint8_t>(data, data + want.size()), want);
      uint64_t at = table.file_offset() + entry.offset();
      ASSERT_LE(at + want.size(), bytes.size());
      EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + at, bytes.begin() + at + want.size()), want);
      dsrt::TensorRef ref = section->weight(w);
      EXPECT_EQ(ref.dtype, spec.dtype);
      EXPECT_EQ(ref.shape, spec.shape[rank]);
      EXPECT_EQ(ref.data, data);
      EXPECT_EQ(ref.bytes(), want.size());
    }
    // The same view again, without a second verification or mapping.
    const dsrt::PlanSection *again = nullptr;
    ASSERT_TRUE(file->section(rank, again).isOk());
    EXPECT_EQ(again, section);
  }
  EXPECT_EQ(previousEnd, file->fileSize());
  const dsrt::PlanSection *none = nullptr;
  dsrt::Status outOfRange = file->section(2, none);
  EXPECT_NE(outOfRange.message().find("rank 2 is out of range (the plan has 2 ranks)"),
            std::string::npos)
      << outOfRange.message();
  EXPECT_TRUE(file->verifyAllSections().isOk());
  EXPECT_TRUE(plantest::openAndWalk(path).isOk());
}

TEST(PlanRoundTrip, WritesAreDeterministic) {
  ScratchDir dir;
  ASSERT_TRUE(sample::write(dir.file("a.dsp")).isOk());
  ASSERT_TRUE(sample::write(dir.file("b.dsp")).isOk());
  EXPECT_EQ(plantest::readFile(dir.file("a.dsp")), plantest::readFile(dir.file("b.dsp")));
}

TEST(PlanRoundTrip, OneRankWithoutWeights) {
  ScratchDir dir;
  dsc::PlanWriter writer(1);
  writer.plan().producer = "empty";
  dsrt::Status status = writer.write(dir.file("empty.dsp"));
  ASSERT_TRUE(status.isOk()) << status.message();
  std::unique_ptr<dsrt::PlanFile> file;
  ASSERT_TRUE(dsrt::PlanFile::open(dir.file("empty.dsp"), file).isOk());
  const dsrt::PlanSection *section = nullptr;
  ASSERT_TRUE(file->section(0, section).isOk());
  EXPECT_EQ(section->size(), 0u);
  EXPECT_EQ(section->weightCount(), 0u);
  EXPECT_EQ(file->fileSize(), section->table().file_offset());
}

// Weights are produced one at a time, in section order, each once, and each goes to the
// (temporary) file before the next is asked for; the plan appears only at the end.
TEST(PlanWriter, StreamsWeightsOneAtATime) {
  ScratchDir dir;
  std::string path = dir.file("stream.dsp");
  int inFlight = 0;
  std::vector<std::pair<int, size_t>> calls;
  std::vector<uint64_t> tempSizes;
  dsc::PlanWriter writer(sample::kRanks);
  ASSERT_TRUE(sample::fill(writer, [&](int rank, size_t index) {
                EXPECT_EQ(++inFlight, 1);
                calls.push_back({rank, index});
                std::vector<std::string> entries = dir.entries();
                EXPECT_EQ(entries.size(), 1u);
                if (entries.size() == 1) {
                  EXPECT_EQ(entries[0].rfind("stream.dsp.tmp.", 0), 0u) << entries[0];
                  struct stat st;
                  EXPECT_EQ(::stat(dir.file(entries[0]).c_str(), &st), 0);
                  tempSizes.push_back(static_cast<uint64_t>(st.st_size));
                }
                --inFlight;
                return dsrt::Status::ok();
              }).isOk());
  dsrt::Status status = writer.write(path);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::vector<std::pair<int, size_t>> order;
  for (int rank = 0; rank < sample::kRanks; ++rank)
    for (size_t w = 0; w < sample::weights().size(); ++w)
      order.push_back({rank, w});
  EXPECT_EQ(calls, order);
  // The temporary file grows as weights arrive: nothing is held back until the end.
  ASSERT_EQ(tempSizes.size(), order.size());
  EXPECT_EQ(tempSizes.front(), 0u);
  for (size_t i = 1; i < tempSizes.size(); ++i) {
    size_t previous = i - 1;
    bool previousHadBytes = !sample::weightBytes(order[previous].first, order[previous].second).empty();
    if (previousHadBytes) {
      EXPECT_GT(tempSizes[i], tempSizes[previous]) << "call " << i;
    }
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"stream.dsp"});
  // Callbacks run once: a second write is refused rather than producing empty weights.
  EXPECT_FALSE(writer.write(dir.file("again.dsp")).isOk());
}

TEST(PlanWriter, FailingWeightLeavesNoFile) {
  ScratchDir dir;
  std::string path = dir.file("fail.dsp");
  dsc::PlanWriter writer(sample::kRanks);
  ASSERT_TRUE(sample::fill(writer, [](int rank, size_t index) {
                if (rank == 1 && index == 2)
                  return dsrt::Status::error("source tensor is unreadable");
                return dsrt::Status::ok();
              }).isOk());
  dsrt::Status status = writer.write(path);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(),
            path + ": weight 'h.0.attn.bias' (rank 1): source tensor is unreadable");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(PlanWriter, FailedRewriteKeepsTheOldPlan) {
  ScratchDir dir;
  std::string path = dir.file("plan.dsp");
  ASSERT_TRUE(sample::write(path).isOk());
  std::vector<uint8_t> before = plantest::readFile(path);
  dsc::PlanWriter writer(sample::kRanks);
  ASSERT_TRUE(sample::fill(writer, [](int rank, size_t index) {
                return rank == 0 && index == 3 ? dsrt::Status::error("disk on fire")
                                               : dsrt::Status::ok();
              }).isOk());
  writer.plan().model_name = "other";
  EXPECT_FALSE(writer.write(path).isOk());
  EXPECT_EQ(plantest::readFile(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plan.dsp"});
}

TEST(PlanWriter, ExceptionInCallbackLeavesNoFile) {
  ScratchDir dir;
  dsc::PlanWriter writer(1);
  int32_t index;
  ASSERT_TRUE(writer.addWeight("w", {{dsrt::DType::F32, {4}, [](uint8_t *) -> dsrt::Status {
                                        throw std::runtime_error("boom");
                                      }}},
                               index)
                  .isOk());
  EXPECT_THROW((void)writer.write(dir.file("throw.dsp")), std::runtime_error);
  EXPECT_TRUE(dir.entries().empty());
}

// The header is checked as the runtime will check it, before any weight is produced.
TEST(PlanWriter, RejectsABadHeaderBeforeProducingWeights) {
  ScratchDir dir;
  std::string path = dir.file("bad.dsp");
  int calls = 0;
  dsc::PlanWriter writer(sample::kRanks);
  ASSERT_TRUE(sample::fill(writer, [&](int, size_t) {
                ++calls;
                return dsrt::Status::ok();
              }).isOk());
  writer.plan().tensors[3]->weight_index = 40;
  dsrt::Status status = writer.write(path);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), path + ": tensor 3 ('h.0.attn.weight'): weight_index 40 is out "
                                     "of range (section 0 has 6 weights)");
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(PlanWriter, RejectsBadWeights) {
  dsc::PlanWriter writer(2);
  auto fill = [](uint8_t *) { return dsrt::Status::ok(); };
  int32_t index = -1;
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}}, index).message(),
            "weight 'a': 1 shards for 2 ranks");
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}, {dsrt::DType::F16, {2}, fill}},
                             index)
                .message(),
            "weight 'a' (rank 1): dtype f16 differs from rank 0's f32");
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}, {dsrt::DType::F32, {-2}, fill}},
                             index)
                .message(),
            "weight 'a' (rank 1): invalid shape [-2]");
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::Undefined, {2}, fill}, {dsrt::DType::F32, {2}, fill}},
                             index)
                .message(),
            "weight 'a' (rank 0): no dtype");
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}, {dsrt::DType::F32, {2}, nullptr}},
                             index)
                .message(),
            "weight 'a' (rank 1): no fill callback");
  EXPECT_EQ(index, -1);
  ASSERT_TRUE(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}, {dsrt::DType::F32, {3}, fill}},
                               index)
                  .isOk());
  EXPECT_EQ(index, 0);
  EXPECT_EQ(writer.addWeight("a", {{dsrt::DType::F32, {2}, fill}, {dsrt::DType::F32, {2}, fill}},
                             index)
                .message(),
            "weight 'a' is added twice");
  writer.plan().options = std::make_unique<dsp::CompileOptionsT>();
  writer.plan().options->tp = 4;
  EXPECT_EQ(writer.write("/nonexistent/x.dsp").message(),
            "/nonexistent/x.dsp: options.tp is 4 but the writer has 2 ranks");
  writer.plan().options->tp = 2;
  dsrt::Status noFolder = writer.write("/nonexistent/x.dsp");
  EXPECT_NE(noFolder.message().find("/nonexistent/x.dsp: cannot create a temporary file"),
            std::string::npos)
      << noFolder.message();
}

} // namespace

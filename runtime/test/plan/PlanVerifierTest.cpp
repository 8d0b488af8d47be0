// The loader's checks one by one: a valid sample plan whose header is rewritten with one
// inconsistency (checksums re-stamped, so only the semantic check can catch it) must fail
// to open with a message that names the entry and the problem.
#include "PlanTestSupport.h"
#include "SamplePlan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace {

using Mutation = std::function<void(dsp::PlanT &)>;

class PlanVerifier : public ::testing::Test {
protected:
  void SetUp() override {
    path_ = dir_.file("plan.dsp");
    dsrt::Status status = sample::write(path_);
    ASSERT_TRUE(status.isOk()) << status.message();
    original_ = plantest::readFile(path_);
  }

  // The message of opening the plan after `mutate`, with the path prefix removed; "" if it
  // opened.
  std::string openError(const Mutation &mutate) {
    plantest::writeFile(path_, plantest::rewriteHeader(original_, mutate));
    std::unique_ptr<dsrt::PlanFile> file;
    dsrt::Status status = dsrt::PlanFile::open(path_, file);
    if (status.isOk())
      return "";
    EXPECT_EQ(status.message().rfind(path_ + ": ", 0), 0u) << status.message();
    return status.message().substr(path_.size() + 2);
  }

  std::unique_ptr<dsp::PlanT> original() const {
    dsp::format::Prelude prelude = preludeOfOriginal();
    std::vector<uint64_t> aligned((prelude.headerSize + 7) / 8);
    std::memcpy(aligned.data(), original_.data() + 64, prelude.headerSize);
    return std::unique_ptr<dsp::PlanT>(dsp::GetPlan(aligned.data())->UnPack());
  }
  dsp::format::Prelude preludeOfOriginal() const {
    uint8_t bytes[64];
    std::memcpy(bytes, original_.data(), 64);
    return dsp::format::decodePrelude(bytes);
  }
  uint64_t headerEnd() const { return 64 + preludeOfOriginal().headerSize; }

  plantest::ScratchDir dir_;
  std::string path_;
  std::vector<uint8_t> original_;
};

TEST_F(PlanVerifier, AnUnchangedRewriteOpens) {
  EXPECT_EQ(openError([](dsp::PlanT &) {}), "");
  EXPECT_TRUE(plantest::openAndWalk(path_).isOk());
}

// The generator's sampling kernel is an index into Plan.kernels, or -1 for none.
TEST_F(PlanVerifier, SamplingKernelIndex) {
  size_t kernels = original()->kernels.size();
  auto withSamplingKernel = [](int32_t index) {
    return [index](dsp::PlanT &p) {
      if (!p.model)
        p.model = std::make_unique<dsp::ModelInfoT>();
      p.model->sampling_kernel = index;
    };
  };
  EXPECT_EQ(openError(withSamplingKernel(-1)), "");
  EXPECT_EQ(openError(withSamplingKernel(static_cast<int32_t>(kernels))),
            "model.sampling_kernel is " + std::to_string(kernels) +
                ", out of range (the plan has " + std::to_string(kernels) + " kernels)");
  EXPECT_EQ(openError(withSamplingKernel(-2)),
            "model.sampling_kernel is -2, out of range (the plan has " +
                std::to_string(kernels) + " kernels)");
  if (kernels > 0) {
    EXPECT_EQ(openError(withSamplingKernel(0)), "");
  }
}

// What the generator writes into a decoder's programs must be something it can write
// (issue 46): token ids in an integer dtype that holds the vocabulary, a mask in any dtype
// that holds 0 and 1, each [batch, tokens]. A bf16 mask once made it write int64 into a
// buffer sized for bf16.
TEST_F(PlanVerifier, RoleInputsHaveDtypesTheGeneratorWrites) {
  auto decoder = [](dsp::DType ids, int64_t vocab) {
    return [ids, vocab](dsp::PlanT &p) {
      p.model = std::make_unique<dsp::ModelInfoT>();
      p.model->kind = "decoder";
      p.model->input_ids = "input_ids";
      p.model->vocab_size = vocab;
      p.tensors[p.programs[0]->inputs[0]]->dtype = ids;
    };
  };
  EXPECT_EQ(openError(decoder(dsp::DType::i64, 16)), "");
  EXPECT_EQ(openError(decoder(dsp::DType::i32, 50257)), "");
  EXPECT_EQ(openError(decoder(dsp::DType::i8, 16)), "");
  EXPECT_EQ(openError(decoder(dsp::DType::bf16, 16)),
            "program 'forward' input 'input_ids' (the token ids) is declared bf16; token ids "
            "need an integer dtype that holds the vocabulary's 16 ids (int64 or int32)");
  EXPECT_EQ(openError(decoder(dsp::DType::i8, 300)),
            "program 'forward' input 'input_ids' (the token ids) is declared i8; token ids "
            "need an integer dtype that holds the vocabulary's 300 ids (int64 or int32)");
  // An encoder's inputs are the caller's to write: not checked.
  EXPECT_EQ(openError([&](dsp::PlanT &p) {
              decoder(dsp::DType::bf16, 16)(p);
              p.model->kind = "encoder";
            }),
            "");
  // The program's second input as the mask: a bool scalar is not [batch, length]; a bf16
  // [batch, sequence] mask is written as bf16 ones and zeros.
  auto mask = [&](dsp::DType dtype, bool twoDims) {
    return [=](dsp::PlanT &p) {
      decoder(dsp::DType::i64, 16)(p);
      p.model->attention_mask = "use_cache";
      dsp::TensorT &t = *p.tensors[p.programs[0]->inputs[1]];
      t.dtype = dtype;
      if (twoDims) {
        t.shape.clear();
        for (const char *symbol : {"batch", "sequence"}) {
          auto d = std::make_unique<dsp::DimT>();
          d->size = -1;
          d->symbol = symbol;
          t.shape.push_back(std::move(d));
        }
        t.max_shape = {4, 128};
      }
    };
  };
  EXPECT_EQ(openError(mask(dsp::DType::bool_, false)),
            "program 'forward' input 'use_cache' (a padding mask) has rank 0; the runtime "
            "writes [batch, length]");
  EXPECT_EQ(openError(mask(dsp::DType::bf16, true)), "");
}

TEST_F(PlanVerifier, TensorIndices) {
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[1]->inputs[1] = 12; }),
            "program 0 ('forward'), step 1 (Gemm): input 1 is tensor 12, out of range (the "
            "plan has 12 tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[0]->outputs[0] = -1; }),
            "program 0 ('forward'), step 0 (Gather): output 0 is tensor -1, out of range (the "
            "plan has 12 tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[2]->inputs[2] = -2; }),
            "program 0 ('forward'), step 2 (LayerNormalization): input 2 is tensor -2, out of "
            "range (the plan has 12 tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->inputs[0] = -1; }),
            "program 0 ('forward'): input 0 is tensor -1, out of range (the plan has 12 tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->outputs[0] = 1000000; }),
            "program 0 ('forward'): output 0 is tensor 1000000, out of range (the plan has 12 "
            "tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[2]->branch_outputs[0] = 99; }),
            "program 2 (''): branch output 0 is tensor 99, out of range (the plan has 12 "
            "tensors)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[1]->steps[0]->op.clear(); }),
            "program 1 (''), step 0 (): no op name");
}

TEST_F(PlanVerifier, Branches) {
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[4]->branches[1] = 3; }),
            "program 0 ('forward'), step 4 (If): branch 1 is program 3, out of range (the plan "
            "has 3 programs)");
  EXPECT_EQ(openError([](dsp::PlanT &p) {
              p.programs[0]->steps[4]->branches[0] = 0;
              p.programs[0]->branch_outputs = {11};
            }),
            "program 0 ('forward') reaches itself through If branches");
  // 1 -> 2 -> 1, reached from 0.
  EXPECT_EQ(openError([](dsp::PlanT &p) {
              p.programs[1]->steps[0]->branches = {2};
              p.programs[2]->steps[0]->branches = {1};
            }),
            "program 1 ('') reaches itself through If branches");
  // A branch used twice is fine.
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[4]->branches = {2, 2}; }), "");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[4]->branches = {1, 2, 1}; }),
            "program 0 ('forward'), step 4 (If): an If has 2 branches, not 3");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[0]->steps[4]->inputs = {-1}; }),
            "program 0 ('forward'), step 4 (If): an If needs its condition as input 0");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.programs[2]->branch_outputs.push_back(9); }),
            "program 0 ('forward'), step 4 (If): branch program 2 yields 2 values for 1 outputs");
}

TEST_F(PlanVerifier, Tensors) {
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[3]->weight_index = 40; }),
            "tensor 3 ('h.0.attn.weight'): weight_index 40 is out of range (section 0 has 6 "
            "weights)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[3]->weight_index = -1; }),
            "tensor 3 ('h.0.attn.weight'): weight_index -1 is out of range (section 0 has 6 "
            "weights)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[3]->dtype = dsp::DType::i32; }),
            "tensor 3 ('h.0.attn.weight'): dtype i32 cannot be made from its weight's f16 (only "
            "floating-point weights convert)");
  // fp16 storage of an f32 tensor (dsc --dtype fp16): the runtime converts at load.
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[3]->dtype = dsp::DType::f32; }), "");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->arena_offset = 32; }),
            "tensor 9 ('embed'): arena_offset 32 is not 64-byte aligned");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[11]->arena_offset += 64; }),
            "tensor 11 ('out'): arena slot [28736, +16384) is outside the arena (45056 bytes)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[11]->arena_bytes = UINT64_MAX; }),
            "tensor 11 ('out'): arena slot [28672, +18446744073709551615) is outside the arena "
            "(45056 bytes)");
  // Found by fuzz-plan: a session pads the arena by its alignment, so an arena near 2^64
  // wrapped to a few bytes that slots within "arena_bytes" overran.
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.arena_bytes = UINT64_MAX - 8; }),
            "the arena of 18446744073709551607 bytes exceeds the 281474976710656 bytes (256 TiB) "
            "any plan may ask for");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->arena_bytes -= 4; }),
            "tensor 9 ('embed'): arena slot of 16380 bytes is smaller than the 16384 bytes its "
            "max shape needs");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->max_shape = {4, 128}; }),
            "tensor 9 ('embed'): max_shape has rank 2, the shape has rank 3");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->max_shape[2] = 9; }),
            "tensor 9 ('embed'): max_shape [4, 128, 9] does not bound the shape [-1, -1, 8]");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->max_shape[0] = -4; }),
            "tensor 9 ('embed'): max_shape [-4, 128, 8] does not bound the shape [-1, -1, 8]");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->max_shape.clear(); }),
            "tensor 9 ('embed'): an activation with dynamic dims needs a max_shape");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[9]->max_shape = {INT64_MAX, 2, 8}; }),
            "tensor 9 ('embed'): the size of shape [9223372036854775807, 2, 8] overflows");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[8]->constant_data.pop_back(); }),
            "tensor 8 ('axes'): constant_data holds 7 bytes, i64[1] needs 8");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[8]->shape[0]->size = -1; }),
            "tensor 8 ('axes'): a constant needs a static shape, not [-1]");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[0]->shape[0]->size = -7; }),
            "tensor 0 ('input_ids'): dim 0 is -7");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[0]->dtype = static_cast<dsp::DType>(14); }),
            "tensor 0 ('input_ids'): invalid dtype 14");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[0]->dtype = dsp::DType::undefined; }),
            "tensor 0 ('input_ids'): invalid dtype 0");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[0]->kind = static_cast<dsp::TensorKind>(5); }),
            "tensor 0 ('input_ids'): invalid kind 5");
  // A dynamic tensor is sized when it runs, so a bound or an arena slot contradicts it.
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.tensors[0]->kind = dsp::TensorKind::dynamic; }),
            "tensor 0 ('input_ids'): a dynamic tensor has no max_shape and no arena slot");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.arena_alignment = 48; }),
            "arena_alignment 48 is not a power of two");
}

TEST_F(PlanVerifier, Attributes) {
  auto attr = [](dsp::PlanT &p, size_t step, size_t index) -> dsp::AttrT & {
    return *p.programs[0]->steps[step]->attrs[index];
  };
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 3, 1).tensor_data.push_back(0); }),
            "program 0 ('forward'), step 3 (Cast), attribute 'value': tensor_data holds 9 "
            "bytes, i32[2] needs 8");
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 3, 1).tensor_shape = {-2}; }),
            "program 0 ('forward'), step 3 (Cast), attribute 'value': invalid tensor shape [-2]");
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 3, 1).tensor_dtype = dsp::DType::undefined; }),
            "program 0 ('forward'), step 3 (Cast), attribute 'value': invalid tensor dtype 0");
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 3, 0).type = static_cast<dsp::DType>(77); }),
            "program 0 ('forward'), step 3 (Cast), attribute 'to': invalid dtype 77");
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 1, 0).kind = static_cast<dsp::AttrKind>(9); }),
            "program 0 ('forward'), step 1 (Gemm), attribute 'transB': invalid kind 9");
  EXPECT_EQ(openError([&](dsp::PlanT &p) { attr(p, 1, 0).name.clear(); }),
            "program 0 ('forward'), step 1 (Gemm): an attribute has no name");
}

TEST_F(PlanVerifier, Sections) {
  std::unique_ptr<dsp::PlanT> plan = original();
  const dsp::WeightSectionT &s0 = *plan->sections[0], &s1 = *plan->sections[1];
  auto n = [](uint64_t v) { return std::to_string(v); };
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->file_offset += 8; }),
            "section 1: file offset " + n(s1.file_offset + 8) + " is not 4096-byte aligned");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->file_offset = 0; }),
            "section 0: file offset 0 overlaps the header (which ends at " + n(headerEnd()) + ")");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->file_offset = p.sections[0]->file_offset; }),
            "section 1: file offset " + n(s0.file_offset) + " overlaps section 0 (which ends at " +
                n(s0.file_offset + s0.size) + ")");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->size += 1; }),
            "section 1 (offset " + n(s1.file_offset) + ", " + n(s1.size + 1) +
                " bytes) ends past the end of the file (" + n(original_.size()) + " bytes)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->size = UINT64_MAX; }),
            "section 1 (offset " + n(s1.file_offset) +
                ", 18446744073709551615 bytes) ends past the end of the file (" +
                n(original_.size()) + " bytes)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { std::swap(p.sections[0], p.sections[1]); }),
            "section 0 is for rank 1: sections must be stored in rank order");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.options->tp = 3; }),
            "options.tp is 3 but the plan has 2 weight sections");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections.clear(); }),
            "the plan has no weight sections (one per tensor-parallel rank)");
}

TEST_F(PlanVerifier, Weights) {
  std::unique_ptr<dsp::PlanT> plan = original();
  const dsp::WeightSectionT &s0 = *plan->sections[0];
  auto n = [](uint64_t v) { return std::to_string(v); };
  uint64_t attnOffset = s0.weights[1]->offset;
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->weights.pop_back(); }),
            "section 1 has 5 weights, section 0 has 6: every rank has the same weights");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->weights[2]->name = "x"; }),
            "section 1, weight 2 ('x') differs in name or dtype from section 0's weight 2 "
            "('h.0.attn.bias')");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[1]->weights[2]->dtype = dsp::DType::f32; }),
            "section 1, weight 2 ('h.0.attn.bias') differs in name or dtype from section 0's "
            "weight 2 ('h.0.attn.bias')");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->weights[1]->offset += 4; }),
            "section 0, weight 1 ('h.0.attn.weight'): offset " + n(attnOffset + 4) +
                " is not 64-byte aligned");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->weights[1]->offset -= 64; }),
            "section 0, weight 1 ('h.0.attn.weight'): offset " + n(attnOffset - 64) +
                " overlaps the previous weight (which ends at 512)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->weights[5]->offset += 64; }),
            "section 0, weight 5 ('odd') (offset " + n(s0.weights[5]->offset + 64) +
                ", 3 bytes) ends past the end of its section (" + n(s0.size) + " bytes)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->weights[0]->bytes = 511; }),
            "section 0, weight 0 ('wte'): 511 bytes, but f32[16, 8] needs 512");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.sections[0]->weights[0]->shape = {-1, 8}; }),
            "section 0, weight 0 ('wte'): invalid shape [-1, 8]");
  EXPECT_EQ(openError([](dsp::PlanT &p) {
              p.sections[0]->weights[0]->shape = {INT64_MAX / 2, 4};
            }),
            "section 0, weight 0 ('wte'): invalid shape [4611686018427387903, 4]");
  EXPECT_EQ(openError([](dsp::PlanT &p) {
              p.sections[0]->weights[0]->dtype = static_cast<dsp::DType>(99);
            }),
            "section 0, weight 0 ('wte'): invalid dtype 99");
}

TEST_F(PlanVerifier, SectionChecksumIsCheckedWhenTheSectionIsUsed) {
  plantest::writeFile(path_, plantest::rewriteHeader(original_, [](dsp::PlanT &p) {
                        p.sections[1]->checksum ^= 1;
                      }));
  std::unique_ptr<dsrt::PlanFile> file;
  ASSERT_TRUE(dsrt::PlanFile::open(path_, file).isOk());
  const dsrt::PlanSection *section = nullptr;
  EXPECT_TRUE(file->section(0, section).isOk());
  dsrt::Status status = file->section(1, section);
  EXPECT_EQ(status.message(), path_ + ": section 1: checksum mismatch: the file is corrupt");
  EXPECT_EQ(section, nullptr);
  // Remembered, not re-computed into a different answer.
  EXPECT_EQ(file->section(1, section).message(), status.message());
  EXPECT_EQ(file->verifyAllSections().message(), status.message());
}

TEST_F(PlanVerifier, Globals) {
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.format_version = 2; }),
            "the header's format_version is 2, the prelude's is 1");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.symbols[0]->max = -1; }),
            "symbol 0 ('batch'): max -1 is negative");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.symbols[1]->symbol.clear(); }),
            "symbol 1 has no name");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.limits->max_seq_len = -5; }),
            "limits are negative (max_batch 4, max_seq_len -5, max_tokens_per_step 0)");
  EXPECT_EQ(openError([](dsp::PlanT &p) { p.limits->max_tokens_per_step = -1; }),
            "limits are negative (max_batch 4, max_seq_len 128, max_tokens_per_step -1)");
}

// The prelude and the raw file, edited byte-wise.
TEST_F(PlanVerifier, Prelude) {
  auto errorOf = [&](const std::vector<uint8_t> &bytes) {
    plantest::writeFile(path_, bytes);
    std::unique_ptr<dsrt::PlanFile> file;
    dsrt::Status status = dsrt::PlanFile::open(path_, file);
    return status.isOk() ? std::string() : status.message().substr(path_.size() + 2);
  };
  auto n = [](uint64_t v) { return std::to_string(v); };
  uint64_t size = original_.size();
  auto edit = [&](size_t offset, uint8_t value) {
    std::vector<uint8_t> bytes = original_;
    bytes[offset] = value;
    return bytes;
  };

  EXPECT_EQ(errorOf(std::vector<uint8_t>(original_.begin(), original_.end() - 1)),
            "truncated: the prelude says " + n(size) + " bytes, the file has " + n(size - 1));
  std::vector<uint8_t> longer = original_;
  longer.push_back(0);
  EXPECT_EQ(errorOf(longer), "the prelude says " + n(size) + " bytes, the file has " +
                                 n(size + 1) + ": the file is corrupt");
  EXPECT_EQ(errorOf({}), "not a plan file (0 bytes, no DSPLAN prelude)");
  EXPECT_EQ(errorOf(std::vector<uint8_t>(original_.begin(), original_.begin() + 10)),
            "truncated: the file has 10 bytes, fewer than the 64-byte prelude");
  EXPECT_EQ(errorOf(edit(0, 'X')), "not a plan file (the DSPLAN magic is missing)");
  EXPECT_EQ(errorOf(edit(8, 2)), "plan format version 2 is not supported (this runtime reads "
                                 "version 1)");
  EXPECT_EQ(errorOf(edit(12, 1)), "the prelude's reserved bytes are not zero: the file is corrupt");
  EXPECT_EQ(errorOf(edit(63, 1)), "the prelude's reserved bytes are not zero: the file is corrupt");
  EXPECT_EQ(errorOf(edit(16, 72)), "the header offset is 72, not 64: the file is corrupt");
  EXPECT_EQ(errorOf(edit(30, 1)), "the header size " + n(original_[24] | (original_[25] << 8) |
                                                         (uint64_t(1) << 48)) +
                                      " does not fit the file (" + n(size) +
                                      " bytes): the file is corrupt");
  EXPECT_EQ(errorOf(edit(32, original_[32] ^ 1)), "header checksum mismatch: the file is corrupt");
  EXPECT_EQ(errorOf(edit(100, original_[100] ^ 1)),
            "header checksum mismatch: the file is corrupt");
  // The FlatBuffer's file identifier sits at bytes 4..7 of the header.
  std::vector<uint8_t> otherIdentifier = edit(64 + 7, '2');
  plantest::restampHeaderChecksum(otherIdentifier);
  EXPECT_EQ(errorOf(otherIdentifier), "the header is not a plan (its file identifier is not DSP1)");
  // A root offset pointing past the header: FlatBuffers' verifier rejects it.
  std::vector<uint8_t> badRoot = edit(64 + 3, 0x7f);
  plantest::restampHeaderChecksum(badRoot);
  EXPECT_EQ(errorOf(badRoot), "the header fails FlatBuffers verification: the file is corrupt");

  std::unique_ptr<dsrt::PlanFile> file;
  EXPECT_EQ(dsrt::PlanFile::open(dir_.file("missing.dsp"), file).message(),
            dir_.file("missing.dsp") + ": cannot open: No such file or directory");
  EXPECT_EQ(dsrt::PlanFile::open(dir_.path(), file).message(), dir_.path() + ": not a regular file");
}

} // namespace

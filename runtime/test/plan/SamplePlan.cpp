#include "SamplePlan.h"

#include <cstring>
#include <memory>

namespace sample {
namespace {

std::unique_ptr<dsp::DimT> dim(int64_t size, std::string symbol = "") {
  auto d = std::make_unique<dsp::DimT>();
  d->size = size;
  d->symbol = std::move(symbol);
  return d;
}

// Tensors, in index order (the tests refer to these indices).
enum : int32_t {
  tInputIds, tCond, tWte, tAttnWeight, tAttnBias, tLnGamma, tEmpty, tOdd, tAxes, tEmbed,
  tProj, tOut, tCount
};

std::unique_ptr<dsp::TensorT> tensor(std::string name, dsp::DType dtype, dsp::TensorKind kind) {
  auto t = std::make_unique<dsp::TensorT>();
  t->name = std::move(name);
  t->dtype = dtype;
  t->kind = kind;
  return t;
}

std::unique_ptr<dsp::TensorT> weightTensor(std::string name, dsp::DType dtype,
                                           std::vector<int64_t> dims, int32_t index) {
  auto t = tensor(std::move(name), dtype, dsp::TensorKind::weight);
  for (int64_t d : dims)
    t->shape.push_back(dim(d));
  t->weight_index = index;
  return t;
}

std::unique_ptr<dsp::TensorT> activation(std::string name, dsp::DType dtype,
                                         std::vector<int64_t> maxDims, uint64_t offset,
                                         uint64_t bytes) {
  auto t = tensor(std::move(name), dtype, dsp::TensorKind::activation);
  t->shape.push_back(dim(-1, "batch"));
  t->shape.push_back(dim(-1, "sequence"));
  for (size_t i = 2; i < maxDims.size(); ++i)
    t->shape.push_back(dim(maxDims[i]));
  t->max_shape = std::move(maxDims);
  t->arena_offset = offset;
  t->arena_bytes = bytes;
  return t;
}

std::unique_ptr<dsp::StepT> step(std::string op, std::vector<int32_t> inputs,
                                 std::vector<int32_t> outputs) {
  auto s = std::make_unique<dsp::StepT>();
  s->op = std::move(op);
  s->inputs = std::move(inputs);
  s->outputs = std::move(outputs);
  s->location = "node_" + s->op;
  return s;
}

std::unique_ptr<dsp::AttrT> attr(std::string name, dsp::AttrKind kind) {
  auto a = std::make_unique<dsp::AttrT>();
  a->name = std::move(name);
  a->kind = kind;
  return a;
}

void fillHeader(dsp::PlanT &plan) {
  plan.producer = "dsc test";
  plan.model_name = "tiny-sample";
  plan.options = std::make_unique<dsp::CompileOptionsT>();
  plan.options->dtype = "fp16";
  plan.options->tp = kRanks;
  plan.options->command_line = "dsc compile tiny.onnx --tp 2";
  plan.limits = std::make_unique<dsp::LimitsT>();
  plan.limits->max_batch = 4;
  plan.limits->max_seq_len = 128;
  for (auto [name, max] : {std::pair<const char *, int64_t>{"batch", 4}, {"sequence", 128}}) {
    auto s = std::make_unique<dsp::SymbolBoundT>();
    s->symbol = name;
    s->max = max;
    plan.symbols.push_back(std::move(s));
  }

  auto &t = plan.tensors;
  t.resize(tCount);
  t[tInputIds] = tensor("input_ids", dsp::DType::i64, dsp::TensorKind::input);
  t[tInputIds]->shape.push_back(dim(-1, "batch"));
  t[tInputIds]->shape.push_back(dim(-1, "sequence"));
  t[tInputIds]->max_shape = {4, 128};
  t[tCond] = tensor("use_cache", dsp::DType::bool_, dsp::TensorKind::input);
  t[tWte] = weightTensor("wte", dsp::DType::f32, {16, 8}, 0);
  t[tAttnWeight] = weightTensor("h.0.attn.weight", dsp::DType::f16, {8, 12}, 1);
  t[tAttnBias] = weightTensor("h.0.attn.bias", dsp::DType::f16, {12}, 2);
  t[tLnGamma] = weightTensor("ln_f.weight", dsp::DType::f32, {8}, 3);
  t[tEmpty] = weightTensor("empty", dsp::DType::i8, {0}, 4);
  t[tOdd] = weightTensor("odd", dsp::DType::u8, {3}, 5);
  t[tAxes] = tensor("axes", dsp::DType::i64, dsp::TensorKind::constant);
  t[tAxes]->shape.push_back(dim(1));
  int64_t minusOne = -1;
  t[tAxes]->constant_data.resize(8);
  std::memcpy(t[tAxes]->constant_data.data(), &minusOne, 8);
  t[tEmbed] = activation("embed", dsp::DType::f32, {4, 128, 8}, 0, 4 * 128 * 8 * 4);
  t[tProj] = activation("proj", dsp::DType::f16, {4, 128, 12}, 16384, 4 * 128 * 12 * 2);
  t[tOut] = activation("out", dsp::DType::f32, {4, 128, 8}, 16384 + 12288, 4 * 128 * 8 * 4);
  plan.arena_bytes = 16384 + 12288 + 16384;

  auto forward = std::make_unique<dsp::ProgramT>();
  forward->name = "forward";
  forward->inputs = {tInputIds, tCond};
  forward->outputs = {tOut};
  forward->steps.push_back(step("Gather", {tWte, tInputIds}, {tEmbed}));
  auto gemm = step("Gemm", {tEmbed, tAttnWeight, tAttnBias}, {tProj});
  gemm->attrs.push_back(attr("transB", dsp::AttrKind::int_));
  gemm->attrs.back()->i = 1;
  gemm->attrs.push_back(attr("alpha", dsp::AttrKind::float_));
  gemm->attrs.back()->f = 0.5f;
  forward->steps.push_back(std::move(gemm));
  auto norm = step("LayerNormalization", {tEmbed, tLnGamma, -1}, {tEmbed});
  norm->attrs.push_back(attr("axes", dsp::AttrKind::ints));
  norm->attrs.back()->ints = {-1, 2};
  norm->attrs.push_back(attr("scales", dsp::AttrKind::floats));
  norm->attrs.back()->floats = {1.5f, -2.0f};
  norm->attrs.push_back(attr("mode", dsp::AttrKind::string_));
  norm->attrs.back()->s = "constant";
  forward->steps.push_back(std::move(norm));
  auto cast = step("Cast", {tEmbed}, {tOut});
  cast->attrs.push_back(attr("to", dsp::AttrKind::type));
  cast->attrs.back()->type = dsp::DType::f32;
  auto value = attr("value", dsp::AttrKind::tensor);
  value->tensor_dtype = dsp::DType::i32;
  value->tensor_shape = {2};
  value->tensor_data = {1, 0, 0, 0, 2, 0, 0, 0};
  cast->attrs.push_back(std::move(value));
  forward->steps.push_back(std::move(cast));
  auto branch = step("If", {tCond}, {tOut});
  branch->branches = {1, 2};
  forward->steps.push_back(std::move(branch));
  plan.programs.push_back(std::move(forward));
  for (const char *op : {"Identity", "Neg"}) {
    auto p = std::make_unique<dsp::ProgramT>();
    p->steps.push_back(step(op, {tEmbed}, {tOut}));
    p->branch_outputs = {tOut};
    plan.programs.push_back(std::move(p));
  }

  auto kernel = std::make_unique<dsp::KernelT>();
  kernel->name = "fused_gemm_bias";
  kernel->entry = "fused_gemm_bias_kernel";
  std::string ptx = ".version 9.0\n.target sm_80\n";
  kernel->ptx.assign(ptx.begin(), ptx.end());
  kernel->kind = "fused_gemm_bias";
  kernel->ptx_arch = "compute_80";
  for (const char *arch : {"sm_80", "sm_90"}) {
    auto binary = std::make_unique<dsp::KernelBinaryT>();
    binary->arch = arch;
    binary->cubin.assign(100, 0xcb);
    kernel->binaries.push_back(std::move(binary));
  }
  plan.kernels.push_back(std::move(kernel));
  std::string tokenizer = "{\"model\":{}}";
  plan.tokenizer_json.assign(tokenizer.begin(), tokenizer.end());
}

} // namespace

const std::vector<WeightSpec> &weights() {
  using dsrt::DType;
  static const std::vector<WeightSpec> specs = {
      {"wte", DType::F32, {{16, 8}, {16, 8}}},               // replicated
      {"h.0.attn.weight", DType::F16, {{8, 12}, {8, 4}}},    // uneven column split
      {"h.0.attn.bias", DType::F16, {{12}, {4}}},
      {"ln_f.weight", DType::F32, {{8}, {8}}},
      {"empty", DType::I8, {{0}, {0}}},
      {"odd", DType::U8, {{3}, {5}}},                        // leaves the section unaligned
  };
  return specs;
}

std::vector<uint8_t> weightBytes(int rank, size_t index) {
  const WeightSpec &spec = weights()[index];
  size_t bytes = static_cast<size_t>(dsrt::elementCount(spec.shape[rank])) *
                 dsrt::dtypeSize(spec.dtype);
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<uint8_t>(i * 7 + index * 31 + rank * 101 + 1);
  return data;
}

dsrt::Status fill(dsc::PlanWriter &writer,
                  const std::function<dsrt::Status(int, size_t)> &onFill) {
  fillHeader(writer.plan());
  for (size_t index = 0; index < weights().size(); ++index) {
    const WeightSpec &spec = weights()[index];
    std::vector<dsc::WeightShard> shards;
    for (int rank = 0; rank < kRanks; ++rank) {
      shards.push_back({spec.dtype, spec.shape[rank], [rank, index, onFill](uint8_t *out) {
                          if (onFill)
                            DSRT_RETURN_IF_ERROR(onFill(rank, index));
                          std::vector<uint8_t> bytes = weightBytes(rank, index);
                          if (!bytes.empty())
                            std::memcpy(out, bytes.data(), bytes.size());
                          return dsrt::Status::ok();
                        }});
    }
    int32_t weightIndex = -1;
    DSRT_RETURN_IF_ERROR(writer.addWeight(spec.name, std::move(shards), weightIndex));
    if (weightIndex != static_cast<int32_t>(index))
      return dsrt::Status::error("unexpected weight index");
  }
  return dsrt::Status::ok();
}

dsrt::Status write(const std::string &path) {
  dsc::PlanWriter writer(kRanks);
  DSRT_RETURN_IF_ERROR(fill(writer));
  return writer.write(path);
}

} // namespace sample

// dsp-dump: prints what a plan file (.dsp) holds. A thin main over dsrt_plan: the file is
// opened and verified exactly as the runtime does, so what is printed is what the runtime
// would run; --verify-sections also checksums every rank's weights. Each section's
// "weight bytes" line sums its weights by stored dtype (docs/int8.md compares plans by it).
#include "common/CommandLine.h"
#include "plan/PlanArena.h"
#include "plan/PlanFile.h"
#include "plan/PlanViews.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using dsrt::PlanFile;

const char *str(const flatbuffers::String *s) { return s ? s->c_str() : ""; }

template <typename T> uint32_t length(const flatbuffers::Vector<T> *v) { return v ? v->size() : 0; }

const char *dtype(dsp::DType d) { return dsrt::dtypeName(dsrt::planDType(d)); }

std::string longs(const flatbuffers::Vector<int64_t> *v) {
  std::string s = "[";
  for (uint32_t i = 0; i < length(v); ++i)
    s += (i ? ", " : "") + std::to_string(v->Get(i));
  return s + "]";
}

std::string shape(const dsp::Tensor &t) {
  std::string s = "[";
  for (uint32_t i = 0; i < length(t.shape()); ++i) {
    const dsp::Dim *d = t.shape()->Get(i);
    s += i ? ", " : "";
    if (d->size() >= 0)
      s += std::to_string(d->size());
    else
      s += d->symbol() && d->symbol()->size() ? d->symbol()->str() : std::string("?");
  }
  return s + "]";
}

std::string tensorName(const dsp::Plan &plan, int32_t index) {
  if (index < 0)
    return "<none>";
  const char *name = str(plan.tensors()->Get(index)->name());
  return *name ? name : "%" + std::to_string(index);
}

std::string tensorList(const dsp::Plan &plan, const flatbuffers::Vector<int32_t> *v) {
  std::string s;
  for (uint32_t i = 0; i < length(v); ++i)
    s += (i ? ", " : "") + tensorName(plan, v->Get(i));
  return s;
}

std::string floatString(float f) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", static_cast<double>(f));
  return buffer;
}

std::string attrString(const dsp::Attr &a) {
  std::string s = str(a.name()) + std::string(" = ");
  switch (a.kind()) {
  case dsp::AttrKind::int_: return s + std::to_string(a.i());
  case dsp::AttrKind::float_: return s + floatString(a.f());
  case dsp::AttrKind::string_: return s + "\"" + str(a.s()) + "\"";
  case dsp::AttrKind::ints: return s + longs(a.ints());
  case dsp::AttrKind::floats: {
    s += "[";
    for (uint32_t i = 0; i < length(a.floats()); ++i)
      s += (i ? ", " : "") + floatString(a.floats()->Get(i));
    return s + "]";
  }
  case dsp::AttrKind::tensor:
    return s + "tensor " + dtype(a.tensor_dtype()) + longs(a.tensor_shape()) + " (" +
           std::to_string(length(a.tensor_data())) + " bytes)";
  case dsp::AttrKind::type: return s + dtype(a.type());
  }
  return s + "?";
}

void printHeader(const PlanFile &file) {
  const dsp::Plan &plan = file.plan();
  std::printf("%s: %" PRIu64 " bytes, plan format version %u\n", file.path().c_str(),
              file.fileSize(), file.prelude().formatVersion);
  std::printf("header: at %" PRIu64 ", %" PRIu64 " bytes, checksum %016" PRIx64 "\n",
              file.prelude().headerOffset, file.headerSize(), file.prelude().headerChecksum);
  std::printf("producer: %s\nmodel: %s\n", str(plan.producer()), str(plan.model_name()));
  if (auto *o = plan.options()) {
    std::printf("options: dtype %s, tp %d, command line \"%s\"\n", str(o->dtype()), o->tp(),
                str(o->command_line()));
    // Only int8 and int4 plans record a compute dtype; the others store every float weight as
    // `dtype`.
    const char *compute = o->compute_dtype() && o->compute_dtype()->size()
                              ? str(o->compute_dtype())
                              : "(not recorded)";
    if (std::strcmp(str(o->dtype()), "int8") == 0 || std::strcmp(str(o->dtype()), "int4") == 0)
      std::printf("quantization: %s, compute dtype %s, group size %d%s, int8 mlp extra "
                  "grouping %s\n",
                  str(o->dtype()), compute, o->int8_group_size(),
                  o->int8_group_size() == 0 ? " (per output channel)" : "",
                  o->int8_mlp_extra_grouping() ? "on" : "off");
    else
      std::printf("quantization: none, compute dtype %s\n", compute);
  }
  if (auto *l = plan.limits()) {
    std::printf("limits: max_batch %" PRId64 ", max_seq_len %" PRId64, l->max_batch(),
                l->max_seq_len());
    if (l->max_tokens_per_step() > 0)
      std::printf(", max_tokens_per_step %" PRId64, l->max_tokens_per_step());
    std::printf("\n");
  }
  std::printf("symbols:");
  for (uint32_t i = 0; i < length(plan.symbols()); ++i)
    std::printf("%s %s <= %" PRId64, i ? "," : "", str(plan.symbols()->Get(i)->symbol()),
                plan.symbols()->Get(i)->max());
  std::printf("\narena: %" PRIu64 " bytes, alignment %u\n", plan.arena_bytes(),
              plan.arena_alignment());
  std::printf("tokenizer: %u bytes of JSON\n", length(plan.tokenizer_json()));
  if (const dsp::ModelInfo *m = plan.model()) {
    std::printf("model info: %s, vocab %" PRId64 ", inputs '%s' '%s' '%s', logits '%s', bos %" PRId64
                ", eos",
                str(m->kind()), m->vocab_size(), str(m->input_ids()), str(m->attention_mask()),
                str(m->position_ids()), str(m->logits()), m->bos_token_id());
    for (uint32_t i = 0; i < length(m->eos_token_ids()); ++i)
      std::printf(" %" PRId64, m->eos_token_ids()->Get(i));
    std::printf(", pad %" PRId64 ", %u past/present pairs\n", m->pad_token_id(),
                length(m->kv_pairs()));
    if (str(m->kind()) == std::string("encoder-decoder"))
      std::printf("encoder: encode(ids '%s', mask '%s') -> '%s'; decoder reads it as '%s', "
                  "the mask as '%s'; decoder start token %" PRId64 "\n",
                  str(m->encode_input_ids()), str(m->encode_attention_mask()),
                  str(m->encode_output()), str(m->cross_states()), str(m->cross_mask()),
                  m->decoder_start_token_id());
    if (m->sampling_kernel() >= 0)
      std::printf("sampling kernel: %d\n", m->sampling_kernel());
    if (m->local_logits() && m->local_logits()->size()) {
      std::printf("distributed greedy: local logits '%s', vocabulary per rank",
                  str(m->local_logits()));
      for (uint32_t r = 0; r < length(m->rank_vocab_offsets()); ++r)
        std::printf(" [%" PRId64 ", +%" PRId64 ")", m->rank_vocab_offsets()->Get(r),
                    r < length(m->rank_vocab_sizes()) ? m->rank_vocab_sizes()->Get(r) : -1);
      std::printf("\n");
    }
  }
}

void printTensors(const dsp::Plan &plan) {
  std::printf("\ntensors (%u):\n", length(plan.tensors()));
  for (uint32_t i = 0; i < length(plan.tensors()); ++i) {
    const dsp::Tensor &t = *plan.tensors()->Get(i);
    std::printf("  %%%u %s: %s %s%s", i, str(t.name()), dsp::EnumNameTensorKind(t.kind()),
                dtype(t.dtype()), shape(t).c_str());
    if (length(t.max_shape()))
      std::printf(" max %s", longs(t.max_shape()).c_str());
    switch (t.kind()) {
    case dsp::TensorKind::activation:
      std::printf(" arena [%" PRIu64 ", +%" PRIu64 ")", t.arena_offset(), t.arena_bytes());
      break;
    case dsp::TensorKind::weight: std::printf(" weight %d", t.weight_index()); break;
    case dsp::TensorKind::constant:
      std::printf(" (%u bytes inline)", length(t.constant_data()));
      break;
    case dsp::TensorKind::input: break;
    case dsp::TensorKind::dynamic: std::printf(" (allocated when it runs)"); break;
    }
    std::printf("\n");
  }
}

void printPrograms(const dsp::Plan &plan) {
  std::printf("\nprograms (%u):\n", length(plan.programs()));
  for (uint32_t p = 0; p < length(plan.programs()); ++p) {
    const dsp::Program &program = *plan.programs()->Get(p);
    std::printf("  program %u \"%s\": inputs (%s), outputs (%s)", p, str(program.name()),
                tensorList(plan, program.inputs()).c_str(),
                tensorList(plan, program.outputs()).c_str());
    if (length(program.branch_outputs()))
      std::printf(", branch outputs (%s)", tensorList(plan, program.branch_outputs()).c_str());
    std::printf("\n");
    uint32_t views = 0, shared = 0;
    for (uint32_t s = 0; s < length(program.steps()); ++s) {
      const dsp::Step &step = *program.steps()->Get(s);
      // A view that copies nothing (dsc-plan-memory gave it its input's slot), or one that
      // still copies.
      bool view = dsrt::isViewOfArenaTensor(plan, step);
      bool sharing = view && dsrt::sharesInputSlot(plan, step);
      views += view;
      shared += sharing;
      std::printf("    %u: %s(%s) -> (%s)", s, str(step.op()),
                  tensorList(plan, step.inputs()).c_str(),
                  tensorList(plan, step.outputs()).c_str());
      for (uint32_t a = 0; a < length(step.attrs()); ++a)
        std::printf("%s%s", a ? ", " : " {", attrString(*step.attrs()->Get(a)).c_str());
      if (length(step.attrs()))
        std::printf("}");
      if (length(step.branches())) {
        std::printf(" branches");
        for (uint32_t b = 0; b < length(step.branches()); ++b)
          std::printf(" %d", step.branches()->Get(b));
      }
      if (length(step.kernels())) {
        std::printf(" kernels");
        for (uint32_t k = 0; k < length(step.kernels()); ++k)
          std::printf(" %d", step.kernels()->Get(k));
      }
      if (view)
        std::printf(sharing ? " view" : " view (copy)");
      if (step.location() && step.location()->size())
        std::printf("  # %s", str(step.location()));
      std::printf("\n");
    }
    if (views)
      std::printf("    views of arena tensors: %u, sharing their input's slot: %u\n", views,
                  shared);
    std::printf("    arena used: %" PRIu64 " of %" PRIu64 " bytes\n", dsrt::programArenaUse(plan, p),
                plan.arena_bytes());
  }
}

void printKernels(const dsp::Plan &plan) {
  std::printf("\nkernels (%u):\n", length(plan.kernels()));
  for (uint32_t k = 0; k < length(plan.kernels()); ++k) {
    const dsp::Kernel &kernel = *plan.kernels()->Get(k);
    std::printf("  %u %s: kind %s, entry %s, ptx %u bytes (%s)", k, str(kernel.name()),
                str(kernel.kind()), str(kernel.entry()), length(kernel.ptx()),
                str(kernel.ptx_arch()));
    for (uint32_t b = 0; b < length(kernel.binaries()); ++b) {
      const dsp::KernelBinary &binary = *kernel.binaries()->Get(b);
      std::printf(", cubin %s %u bytes", str(binary.arch()), length(binary.cubin()));
    }
    std::printf("\n");
  }
}

// The weights that `op` steps (tfm.linear, tfm.lm_head) read as their weight (input 1) or
// int8 scales (input 3): what --dtype int8 quantizes, so the size summary can set them apart.
std::set<int32_t> layerWeights(const dsp::Plan &plan, const char *op) {
  std::set<int32_t> weights;
  for (uint32_t p = 0; p < length(plan.programs()); ++p) {
    const dsp::Program &program = *plan.programs()->Get(p);
    for (uint32_t s = 0; s < length(program.steps()); ++s) {
      const dsp::Step &step = *program.steps()->Get(s);
      if (std::strcmp(str(step.op()), op) != 0)
        continue;
      for (uint32_t input : {1u, 3u}) {
        if (input >= length(step.inputs()) || step.inputs()->Get(input) < 0)
          continue;
        const dsp::Tensor &t = *plan.tensors()->Get(step.inputs()->Get(input));
        if (t.kind() == dsp::TensorKind::weight)
          weights.insert(t.weight_index());
      }
    }
  }
  return weights;
}

// One line per section: the bytes of its weights as stored (padding between them not
// counted), in total, by stored dtype, those of the linear layers and the LM head, and
// those one decode step reads (all but the embedding tables: the roofline of decode).
void printWeightSummary(const dsp::Plan &plan, const dsp::WeightSection &section,
                        const std::set<int32_t> &linear, const std::set<int32_t> &lmHead) {
  uint64_t total = 0, linearBytes = 0, lmHeadBytes = 0;
  std::map<std::string, uint64_t> byDtype;
  for (uint32_t w = 0; w < length(section.weights()); ++w) {
    const dsp::WeightEntry &e = *section.weights()->Get(w);
    total += e.bytes();
    byDtype[dtype(e.dtype())] += e.bytes();
    if (linear.count(static_cast<int32_t>(w)))
      linearBytes += e.bytes();
    if (lmHead.count(static_cast<int32_t>(w)))
      lmHeadBytes += e.bytes();
  }
  std::printf("    weight bytes: %" PRIu64 " total (", total);
  const char *separator = "";
  for (const auto &[name, bytes] : byDtype) {
    std::printf("%s%s %" PRIu64, separator, name.c_str(), bytes);
    separator = ", ";
  }
  std::printf("); tfm.linear weights and scales %" PRIu64
              "; tfm.lm_head weights and scales %" PRIu64,
              linearBytes, lmHeadBytes);
  uint64_t decodeBytes = 0;
  // One sequence's decode step: a mixture of experts reads its k experts.
  if (dsrt::programWeightBytes(plan, section.rank(), "decode", decodeBytes, 1).isOk())
    std::printf("; a decode step reads %" PRIu64, decodeBytes);
  std::printf("\n");
}

// Returns false when a section fails verification.
bool printSections(PlanFile &file, bool verify) {
  const dsp::Plan &plan = file.plan();
  const std::set<int32_t> linear = layerWeights(plan, "tfm.linear");
  const std::set<int32_t> lmHead = layerWeights(plan, "tfm.lm_head");
  bool ok = true;
  std::printf("\nsections (%u):\n", length(plan.sections()));
  for (uint32_t r = 0; r < length(plan.sections()); ++r) {
    const dsp::WeightSection &section = *plan.sections()->Get(r);
    std::printf("  rank %d: offset %" PRIu64 ", %" PRIu64 " bytes, checksum %016" PRIx64
                ", %u weights",
                section.rank(), section.file_offset(), section.size(), section.checksum(),
                length(section.weights()));
    if (verify) {
      const dsrt::PlanSection *view = nullptr;
      dsrt::Status status = file.section(static_cast<int>(r), view);
      std::printf(", %s", status.isOk() ? "verified" : "CORRUPT");
      if (!status.isOk()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        ok = false;
      }
    }
    std::printf("\n");
    printWeightSummary(plan, section, linear, lmHead);
    for (uint32_t w = 0; w < length(section.weights()); ++w) {
      const dsp::WeightEntry &e = *section.weights()->Get(w);
      std::printf("    %u %s: %s%s at +%" PRIu64 ", %" PRIu64 " bytes\n", w, str(e.name()),
                  dtype(e.dtype()), longs(e.shape()).c_str(), e.offset(), e.bytes());
    }
  }
  return ok;
}

// Writes each kernel's PTX to `directory`/<name>.ptx and its cubins to <name>.<arch>.cubin
// (for ptxas and cuobjdump); false when a file cannot be written.
bool extractKernels(const dsp::Plan &plan, const std::string &directory) {
  auto save = [&](const std::string &file, const flatbuffers::Vector<uint8_t> *bytes) {
    std::string path = directory + "/" + file;
    FILE *out = std::fopen(path.c_str(), "wb");
    bool ok = out && (!length(bytes) ||
                      std::fwrite(bytes->data(), 1, bytes->size(), out) == bytes->size());
    if (out)
      ok = std::fclose(out) == 0 && ok;
    if (!ok)
      std::fprintf(stderr, "dsp-dump: cannot write %s\n", path.c_str());
    return ok;
  };
  for (uint32_t k = 0; k < length(plan.kernels()); ++k) {
    const dsp::Kernel &kernel = *plan.kernels()->Get(k);
    if (length(kernel.ptx()) && !save(std::string(str(kernel.name())) + ".ptx", kernel.ptx()))
      return false;
    for (uint32_t b = 0; b < length(kernel.binaries()); ++b) {
      const dsp::KernelBinary &binary = *kernel.binaries()->Get(b);
      if (!save(std::string(str(kernel.name())) + "." + str(binary.arch()) + ".cubin",
                binary.cubin()))
        return false;
    }
  }
  std::printf("extracted %u kernels to %s\n", length(plan.kernels()), directory.c_str());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  bool verify = false;
  std::string extractDirectory;
  std::vector<std::string> plans;
  dstools::CommandLine commandLine(
      "dsp-dump", {"dsp-dump PLAN [--verify-sections]", "dsp-dump PLAN --extract-kernels DIR"},
      "Prints a plan file's header, programs, kernels, tensors and weight sections.");
  commandLine.arguments("PLAN", plans, "the plan file (.dsp)");
  commandLine.flag("--verify-sections", verify, "also check every weight section's checksum");
  commandLine.text("--extract-kernels", extractDirectory, "DIR",
                   "write each kernel's PTX and cubins to DIR instead of printing");
  commandLine.parse(argc, argv);
  const std::string &path = commandLine.single(plans, "plan");

  std::unique_ptr<PlanFile> file;
  dsrt::Status status = PlanFile::open(path, file);
  if (!status.isOk())
    dstools::fail("dsp-dump", status.message(), 1);
  if (!extractDirectory.empty())
    return extractKernels(file->plan(), extractDirectory) ? 0 : 1;
  printHeader(*file);
  printTensors(file->plan());
  printPrograms(file->plan());
  printKernels(file->plan());
  bool ok = printSections(*file, verify);
  std::fflush(stdout);
  return ok ? 0 : 1;
}

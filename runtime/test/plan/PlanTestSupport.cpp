#include "PlanTestSupport.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <dirent.h>
#include <unistd.h>

namespace plantest {

ScratchDir::ScratchDir() {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dsp-test-XXXXXX";
  if (!::mkdtemp(pattern.data()))
    throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  for (const std::string &name : entries())
    ::unlink(file(name).c_str());
  ::rmdir(path_.c_str());
}

std::vector<std::string> ScratchDir::entries() const {
  std::vector<std::string> names;
  if (DIR *dir = ::opendir(path_.c_str())) {
    while (dirent *entry = ::readdir(dir))
      if (std::strcmp(entry->d_name, ".") && std::strcmp(entry->d_name, ".."))
        names.push_back(entry->d_name);
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<uint8_t> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

namespace {

dsp::format::Prelude preludeOf(const std::vector<uint8_t> &file) {
  uint8_t bytes[dsp::format::kPreludeSize];
  std::memcpy(bytes, file.data(), sizeof bytes);
  return dsp::format::decodePrelude(bytes);
}

void setPrelude(std::vector<uint8_t> &file, const dsp::format::Prelude &prelude) {
  uint8_t bytes[dsp::format::kPreludeSize];
  dsp::format::encodePrelude(prelude, bytes);
  std::memcpy(file.data(), bytes, sizeof bytes);
}

std::vector<uint8_t> pack(const dsp::PlanT &plan) {
  flatbuffers::FlatBufferBuilder builder;
  builder.ForceDefaults(true);
  dsp::FinishPlanBuffer(builder, dsp::Plan::Pack(builder, &plan));
  return std::vector<uint8_t>(builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize());
}

} // namespace

std::vector<uint8_t> rewriteHeader(const std::vector<uint8_t> &file,
                                   const std::function<void(dsp::PlanT &)> &mutate) {
  using namespace dsp::format;
  dsp::format::Prelude prelude = preludeOf(file);
  // The FlatBuffer must sit 8-byte aligned in memory for the object API's reads.
  std::vector<uint64_t> aligned((prelude.headerSize + 7) / 8);
  std::memcpy(aligned.data(), file.data() + kHeaderOffset, prelude.headerSize);
  std::unique_ptr<dsp::PlanT> original(dsp::GetPlan(aligned.data())->UnPack());
  uint64_t firstSection = original->sections.empty() ? file.size()
                                                     : original->sections[0]->file_offset;

  dsp::PlanT probe(*original);
  mutate(probe);
  uint64_t headerSize = pack(probe).size();
  uint64_t newFirst = alignUp(kHeaderOffset + headerSize, kSectionAlignment);
  newFirst = std::max(newFirst, firstSection);  // never move sections towards the header
  uint64_t shift = newFirst - firstSection;

  dsp::PlanT plan(*original);
  for (auto &section : plan.sections)
    section->file_offset += shift;
  mutate(plan);
  std::vector<uint8_t> header = pack(plan);
  if (header.size() != headerSize)
    throw std::runtime_error("rewriteHeader: the header size depends on the mutation's values");

  std::vector<uint8_t> out(file.size() + shift, 0);
  std::copy(file.begin() + static_cast<std::ptrdiff_t>(firstSection), file.end(),
            out.begin() + static_cast<std::ptrdiff_t>(firstSection + shift));
  std::copy(header.begin(), header.end(), out.begin() + kHeaderOffset);
  prelude.headerSize = header.size();
  prelude.headerChecksum = XXH3_64bits(header.data(), header.size());
  prelude.fileSize = out.size();
  setPrelude(out, prelude);
  return out;
}

void restampHeaderChecksum(std::vector<uint8_t> &file) {
  dsp::format::Prelude prelude = preludeOf(file);
  prelude.headerChecksum =
      XXH3_64bits(file.data() + dsp::format::kHeaderOffset, prelude.headerSize);
  setPrelude(file, prelude);
}

namespace {

// Touches a string's bytes, so that ASan sees every read.
size_t touch(const flatbuffers::String *s) {
  size_t sum = 0;
  if (s)
    for (uint32_t i = 0; i < s->size(); ++i)
      sum += static_cast<uint8_t>(s->Get(i));
  return sum;
}

// Sums the elements' bits: a cast of a float element could overflow (UB) for the values a
// corrupted plan holds.
template <typename T> size_t touch(const flatbuffers::Vector<T> *v) {
  size_t sum = 0;
  if (v)
    for (uint32_t i = 0; i < v->size(); ++i) {
      const T value = v->Get(i);
      size_t bits = 0;
      std::memcpy(&bits, &value, std::min(sizeof value, sizeof bits));
      sum += bits;
    }
  return sum;
}

} // namespace

dsrt::Status openAndWalk(const std::string &path) {
  std::unique_ptr<dsrt::PlanFile> file;
  DSRT_RETURN_IF_ERROR(dsrt::PlanFile::open(path, file));
  DSRT_RETURN_IF_ERROR(file->verifyAllSections());
  const dsp::Plan &plan = file->plan();
  size_t sum = touch(plan.producer()) + touch(plan.model_name()) + touch(plan.tokenizer_json());
  if (plan.options())
    sum += touch(plan.options()->dtype()) + touch(plan.options()->command_line());
  if (plan.symbols())
    for (const dsp::SymbolBound *symbol : *plan.symbols())
      sum += touch(symbol->symbol());
  if (plan.kernels())
    for (const dsp::Kernel *kernel : *plan.kernels()) {
      sum += touch(kernel->name()) + touch(kernel->entry()) + touch(kernel->ptx()) +
             touch(kernel->kind()) + touch(kernel->ptx_arch());
      if (kernel->binaries())
        for (const dsp::KernelBinary *binary : *kernel->binaries())
          sum += touch(binary->arch()) + touch(binary->cubin());
    }
  uint32_t tensors = plan.tensors() ? plan.tensors()->size() : 0;
  auto useTensor = [&](int32_t index) {
    if (index >= 0)
      sum += touch(plan.tensors()->Get(static_cast<uint32_t>(index))->name());
  };
  for (uint32_t i = 0; i < tensors; ++i) {
    const dsp::Tensor *t = plan.tensors()->Get(i);
    sum += touch(t->name()) + touch(t->max_shape()) + touch(t->constant_data());
    if (t->shape())
      for (const dsp::Dim *dim : *t->shape())
        sum += static_cast<size_t>(dim->size()) + touch(dim->symbol());
    if (t->kind() == dsp::TensorKind::weight) {
      // The index the runtime will use on its own rank's section, on every rank.
      for (int rank = 0; rank < file->rankCount(); ++rank) {
        const dsrt::PlanSection *section = nullptr;
        DSRT_RETURN_IF_ERROR(file->section(rank, section));
        dsrt::TensorRef ref = section->weight(static_cast<size_t>(t->weight_index()));
        const uint8_t *bytes = static_cast<const uint8_t *>(ref.data);
        for (size_t b = 0; b < ref.bytes(); ++b)
          sum += bytes[b];
      }
    }
  }
  uint32_t programs = plan.programs() ? plan.programs()->size() : 0;
  for (uint32_t p = 0; p < programs; ++p) {
    const dsp::Program *program = plan.programs()->Get(p);
    for (auto *list : {program->inputs(), program->outputs(), program->branch_outputs()})
      if (list)
        for (int32_t t : *list)
          useTensor(t);
    if (!program->steps())
      continue;
    for (const dsp::Step *step : *program->steps()) {
      sum += touch(step->op()) + touch(step->location());
      for (auto *list : {step->inputs(), step->outputs()})
        if (list)
          for (int32_t t : *list)
            useTensor(t);
      if (step->branches())
        for (int32_t b : *step->branches())
          sum += touch(plan.programs()->Get(static_cast<uint32_t>(b))->name());
      if (step->attrs())
        for (const dsp::Attr *a : *step->attrs())
          sum += touch(a->name()) + touch(a->s()) + touch(a->ints()) + touch(a->floats()) +
                 touch(a->tensor_shape()) + touch(a->tensor_data());
    }
  }
  for (int rank = 0; rank < file->rankCount(); ++rank) {
    const dsrt::PlanSection *section = nullptr;
    DSRT_RETURN_IF_ERROR(file->section(rank, section));
    for (size_t w = 0; w < section->weightCount(); ++w) {
      sum += touch(section->entry(w).name()) + touch(section->entry(w).shape());
      const uint8_t *bytes = section->weightData(w);
      for (uint64_t b = 0; b < section->entry(w).bytes(); ++b)
        sum += bytes[b];
    }
  }
  // Keeps the reads from being optimised away.
  static volatile size_t sink;
  sink = sum;
  return dsrt::Status::ok();
}

} // namespace plantest

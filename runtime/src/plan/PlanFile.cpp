// Opening a plan file: the prelude is read with pread, the header is mapped and verified,
// and each rank's section is mapped on first use (only that section: a rank of a large
// TP plan never faults in the others' weights).
#include "plan/PlanFile.h"

// Inlined: libdsrt needs no libxxhash.so at run time, so it travels with fewer libraries.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsrt {
namespace {

template <typename... Args> std::string cat(const Args &...args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// pread until `size` bytes or end of file; the count read, or -1 with errno.
ssize_t readFully(int fd, void *buffer, size_t size, off_t offset) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, static_cast<uint8_t *>(buffer) + done, size - done,
                        offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

bool allZero(const uint8_t *bytes, size_t size) {
  for (size_t i = 0; i < size; ++i)
    if (bytes[i])
      return false;
  return true;
}

} // namespace

struct PlanFile::RankState {
  std::once_flag once;
  Status status = Status::ok();
  void *map = nullptr;
  size_t mapBytes = 0;
  PlanSection view;
};

size_t PlanSection::weightCount() const {
  return table_->weights() ? table_->weights()->size() : 0;
}

const dsp::WeightEntry &PlanSection::entry(size_t index) const {
  return *table_->weights()->Get(static_cast<flatbuffers::uoffset_t>(index));
}

const uint8_t *PlanSection::weightData(size_t index) const {
  return data_ + entry(index).offset();
}

TensorRef PlanSection::weight(size_t index) const {
  const dsp::WeightEntry &e = entry(index);
  TensorRef ref;
  ref.dtype = planDType(e.dtype());
  if (e.shape())
    ref.shape.assign(e.shape()->begin(), e.shape()->end());
  // Read-only mapping: TensorRef has no const flavour, the caller must not write.
  ref.data = const_cast<uint8_t *>(weightData(index));
  return ref;
}

PlanFile::PlanFile() = default;

PlanFile::~PlanFile() {
  for (auto &rank : ranks_)
    if (rank && rank->map)
      ::munmap(rank->map, rank->mapBytes);
  if (headerMap_)
    ::munmap(headerMap_, headerMapBytes_);
  if (fd_ >= 0)
    ::close(fd_);
}

int PlanFile::rankCount() const { return static_cast<int>(ranks_.size()); }

Status PlanFile::open(const std::string &path, std::unique_ptr<PlanFile> &out) {
  using namespace dsp::format;
  std::unique_ptr<PlanFile> file(new PlanFile());
  file->path_ = path;
  auto fail = [&](const std::string &message) { return Status::error(path + ": " + message); };

  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0)
    return fail(cat("cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(file->fd_, &st) != 0)
    return fail(cat("cannot stat: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return fail("not a regular file");
  uint64_t realSize = static_cast<uint64_t>(st.st_size);

  uint8_t bytes[kPreludeSize];
  ssize_t got = readFully(file->fd_, bytes, kPreludeSize, 0);
  if (got < 0)
    return fail(cat("cannot read: ", std::strerror(errno)));
  if (static_cast<uint64_t>(got) < kPreludeSize) {
    if (got >= static_cast<ssize_t>(sizeof kMagic) && std::memcmp(bytes, kMagic, sizeof kMagic) == 0)
      return fail(cat("truncated: the file has ", realSize,
                      " bytes, fewer than the 64-byte prelude"));
    return fail(cat("not a plan file (", realSize, " bytes, no DSPLAN prelude)"));
  }
  Prelude &prelude = file->prelude_;
  prelude = decodePrelude(bytes);
  if (std::memcmp(prelude.magic, kMagic, sizeof kMagic) != 0)
    return fail("not a plan file (the DSPLAN magic is missing)");
  if (prelude.formatVersion != kFormatVersion)
    return fail(cat("plan format version ", prelude.formatVersion,
                    " is not supported (this runtime reads version ", kFormatVersion, ")"));
  if (prelude.reserved0 != 0 || !allZero(prelude.reserved1, sizeof prelude.reserved1))
    return fail("the prelude's reserved bytes are not zero: the file is corrupt");
  if (prelude.fileSize != realSize) {
    if (realSize < prelude.fileSize)
      return fail(cat("truncated: the prelude says ", prelude.fileSize, " bytes, the file has ",
                      realSize));
    return fail(cat("the prelude says ", prelude.fileSize, " bytes, the file has ", realSize,
                    ": the file is corrupt"));
  }
  if (prelude.headerOffset != kHeaderOffset)
    return fail(cat("the header offset is ", prelude.headerOffset, ", not ", kHeaderOffset,
                    ": the file is corrupt"));
  if (prelude.headerSize == 0 || prelude.headerSize >= FLATBUFFERS_MAX_BUFFER_SIZE ||
      prelude.headerSize > realSize - kHeaderOffset)
    return fail(cat("the header size ", prelude.headerSize, " does not fit the file (",
                    realSize, " bytes): the file is corrupt"));

  file->headerMapBytes_ = static_cast<size_t>(kHeaderOffset + prelude.headerSize);
  void *map = ::mmap(nullptr, file->headerMapBytes_, PROT_READ, MAP_PRIVATE, file->fd_, 0);
  if (map == MAP_FAILED)
    return fail(cat("cannot map the header: ", std::strerror(errno)));
  file->headerMap_ = map;
  file->header_ = static_cast<const uint8_t *>(map) + kHeaderOffset;
  if (XXH3_64bits(file->header_, prelude.headerSize) != prelude.headerChecksum)
    return fail("header checksum mismatch: the file is corrupt");
  DSRT_RETURN_IF_ERROR(verifyPlanHeader(path, file->header_, prelude.headerSize, realSize));
  file->plan_ = dsp::GetPlan(file->header_);

  size_t ranks = file->plan_->sections()->size();  // >= 1, verified
  file->ranks_.reserve(ranks);
  for (size_t i = 0; i < ranks; ++i)
    file->ranks_.push_back(std::make_unique<RankState>());
  out = std::move(file);
  return Status::ok();
}

Status PlanFile::mapSection(int rank, RankState &state) {
  const dsp::WeightSection *table = plan_->sections()->Get(static_cast<flatbuffers::uoffset_t>(rank));
  std::string where = cat(path_, ": section ", rank);
  state.view.rank_ = rank;
  state.view.table_ = table;
  state.view.size_ = table->size();
  uint64_t checksum;
  if (table->size() == 0) {
    checksum = XXH3_64bits("", 0);
  } else {
    // A file truncated since open() would turn reads of the mapping into SIGBUS.
    struct stat st;
    if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) != prelude_.fileSize)
      return Status::error(cat(where, ": the file changed size since it was opened"));
    // The section is 4096-aligned; pages may be larger (64 KiB on some arm64 kernels).
    uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t start = table->file_offset() - table->file_offset() % page;
    uint64_t lead = table->file_offset() - start;
    state.mapBytes = static_cast<size_t>(lead + table->size());
    void *map = ::mmap(nullptr, state.mapBytes, PROT_READ, MAP_PRIVATE, fd_,
                       static_cast<off_t>(start));
    if (map == MAP_FAILED)
      return Status::error(cat(where, ": cannot map ", table->size(), " bytes: ",
                               std::strerror(errno)));
    state.map = map;
    state.view.data_ = static_cast<const uint8_t *>(map) + lead;
    ::madvise(map, state.mapBytes, MADV_SEQUENTIAL);
    checksum = XXH3_64bits(state.view.data_, table->size());
    ::madvise(map, state.mapBytes, MADV_NORMAL);
  }
  if (checksum != table->checksum())
    return Status::error(cat(where, ": checksum mismatch: the file is corrupt"));
  return Status::ok();
}

Status PlanFile::section(int rank, const PlanSection *&out) {
  out = nullptr;
  if (rank < 0 || rank >= rankCount())
    return Status::error(cat(path_, ": rank ", rank, " is out of range (the plan has ",
                             rankCount(), " ranks)"));
  RankState &state = *ranks_[static_cast<size_t>(rank)];
  std::call_once(state.once, [&] {
    state.status = mapSection(rank, state);
    if (!state.status.isOk() && state.map) {
      ::munmap(state.map, state.mapBytes);
      state.map = nullptr;
      state.view.data_ = nullptr;
    }
  });
  if (!state.status.isOk())
    return state.status;
  out = &state.view;
  return Status::ok();
}

Status PlanFile::verifyAllSections() {
  for (int rank = 0; rank < rankCount(); ++rank) {
    const PlanSection *unused;
    DSRT_RETURN_IF_ERROR(section(rank, unused));
  }
  return Status::ok();
}

namespace {

// The share of a tfm.moe step's experts that `tokens` tokens can choose: min(E, tokens * k)
// of E (1 when `tokens` is 0, or the step does not say).
double activeExperts(const dsp::Plan &plan, const dsp::Step &step, int64_t tokens) {
  if (tokens <= 0 || !step.inputs() || step.inputs()->size() < 2 || !plan.tensors())
    return 1.0;
  int32_t logits = step.inputs()->Get(1);
  if (logits < 0 || logits >= static_cast<int32_t>(plan.tensors()->size()))
    return 1.0;
  const dsp::Tensor *tensor = plan.tensors()->Get(logits);
  if (!tensor->max_shape() || tensor->max_shape()->size() == 0)
    return 1.0;
  const int64_t experts = tensor->max_shape()->Get(tensor->max_shape()->size() - 1);
  int64_t topK = 0;
  if (step.attrs())
    for (const dsp::Attr *attr : *step.attrs())
      if (attr->name() && attr->name()->str() == "top_k")
        topK = attr->i();
  if (experts <= 0 || topK <= 0)
    return 1.0;
  return static_cast<double>(std::min(experts, tokens * topK)) / static_cast<double>(experts);
}

void addProgramWeights(const dsp::Plan &plan, const dsp::Program &program,
                       const dsp::WeightSection &section, std::set<int> &counted,
                       std::set<int> &visitedPrograms, uint64_t &bytes, int64_t tokens) {
  if (!program.steps())
    return;
  for (const dsp::Step *step : *program.steps()) {
    const bool embedding = step->op() && step->op()->str() == "tfm.embedding";
    // A mixture of experts reads the experts its tokens choose.
    const double experts =
        step->op() && step->op()->str() == "tfm.moe" ? activeExperts(plan, *step, tokens) : 1.0;
    if (step->inputs())
      for (size_t position = 0; position < step->inputs()->size(); ++position) {
        int32_t id = step->inputs()->Get(static_cast<flatbuffers::uoffset_t>(position));
        if (id < 0 || !plan.tensors() || id >= static_cast<int32_t>(plan.tensors()->size()))
          continue;
        const dsp::Tensor *tensor = plan.tensors()->Get(id);
        if (tensor->kind() != dsp::TensorKind::weight || (embedding && position == 1))
          continue;
        int index = tensor->weight_index();
        if (!section.weights() || index < 0 ||
            index >= static_cast<int>(section.weights()->size()) || !counted.insert(index).second)
          continue;
        const uint64_t whole = section.weights()->Get(index)->bytes();
        // The routed experts' weights, biases and scales (2-5, 9, 10); not the shared
        // expert (6-8), which every token runs.
        const bool routed = position >= 2 && (position <= 5 || position >= 9);
        bytes += routed && experts < 1.0
                     ? static_cast<uint64_t>(static_cast<double>(whole) * experts + 0.5)
                     : whole;
      }
    if (step->branches())
      for (int32_t branch : *step->branches())
        if (plan.programs() && branch >= 0 &&
            branch < static_cast<int32_t>(plan.programs()->size()) &&
            visitedPrograms.insert(branch).second)
          addProgramWeights(plan, *plan.programs()->Get(branch), section, counted,
                            visitedPrograms, bytes, tokens);
  }
}

} // namespace

Status programWeightBytes(const dsp::Plan &plan, int rank, const std::string &program,
                          uint64_t &out, int64_t tokens) {
  out = 0;
  const dsp::WeightSection *section = nullptr;
  if (plan.sections())
    for (const dsp::WeightSection *candidate : *plan.sections())
      if (candidate->rank() == rank)
        section = candidate;
  if (!section)
    return Status::error("the plan has no weight section for rank " + std::to_string(rank));
  const dsp::Program *found = nullptr;
  if (plan.programs())
    for (const dsp::Program *candidate : *plan.programs())
      if (candidate->name() && candidate->name()->str() == program)
        found = candidate;
  if (!found)
    return Status::error("the plan has no program '" + program + "'");
  std::set<int> counted, visitedPrograms;
  addProgramWeights(plan, *found, *section, counted, visitedPrograms, out, tokens);
  return Status::ok();
}

} // namespace dsrt

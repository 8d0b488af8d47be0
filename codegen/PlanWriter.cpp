#include "codegen/PlanWriter.h"

#include "PlanFormat.h"
#include "plan/PlanFile.h"

// Inlined, as in the runtime: no libxxhash.so needed.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc {
namespace {

using dsrt::Status;
using namespace dsp::format;

template <typename... Args> std::string cat(const Args &...args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

Status writeAt(const std::string &path, int fd, const uint8_t *data, uint64_t size,
               uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, static_cast<size_t>(std::min<uint64_t>(size, 1u << 30)),
                         static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return Status::error(cat(path, ": cannot write: ", std::strerror(n < 0 ? errno : EIO)));
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

// The temporary file: removed unless committed, whatever way write() leaves (an error,
// or an exception thrown by a weight callback).
class TempFile {
public:
  Status create(const std::string &path) {
    name_ = path + ".tmp.XXXXXX";
    fd_ = ::mkstemp(name_.data());
    if (fd_ < 0) {
      name_.clear();
      return Status::error(cat(path, ": cannot create a temporary file beside it: ",
                               std::strerror(errno)));
    }
    // mkstemp makes it private; a plan is an ordinary output file.
    ::fchmod(fd_, 0644);
    return Status::ok();
  }
  int fd() const { return fd_; }

  Status commit(const std::string &path) {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      return Status::error(cat(path, ": cannot write: ", std::strerror(errno)));
    }
    fd_ = -1;
    if (::rename(name_.c_str(), path.c_str()) != 0)
      return Status::error(cat(path, ": cannot rename ", name_, " into place: ",
                               std::strerror(errno)));
    name_.clear();
    // Make the rename itself durable; failure here loses nothing already written.
    size_t slash = path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
      ::fsync(dirFd);
      ::close(dirFd);
    }
    return Status::ok();
  }

  ~TempFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!name_.empty())
      ::unlink(name_.c_str());
  }

private:
  std::string name_;
  int fd_ = -1;
};

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
struct HashDeleter {
  void operator()(XXH3_state_t *state) const { XXH3_freeState(state); }
};

} // namespace

PlanWriter::PlanWriter(int ranks) : ranks_(ranks), sectionSizes_(ranks > 0 ? ranks : 0, 0) {}

std::vector<dsrt::DType> PlanWriter::weightDTypes() const {
  std::vector<dsrt::DType> dtypes;
  for (const Weight &weight : weights_)
    dtypes.push_back(weight.shards.front().dtype);
  return dtypes;
}

Status PlanWriter::addWeight(std::string name, std::vector<WeightShard> shards,
                             int32_t &index) {
  std::string where = cat("weight '", name, "'");
  if (ranks_ < 1)
    return Status::error(cat("a plan needs at least one rank, not ", ranks_));
  if (name.empty())
    return Status::error("a weight needs a name");
  if (names_.count(name))
    return Status::error(cat(where, " is added twice"));
  if (shards.size() != static_cast<size_t>(ranks_))
    return Status::error(cat(where, ": ", shards.size(), " shards for ", ranks_, " ranks"));
  Weight weight;
  for (int rank = 0; rank < ranks_; ++rank) {
    const WeightShard &shard = shards[rank];
    std::string at = cat(where, " (rank ", rank, ")");
    if (shard.dtype == dsrt::DType::Undefined || dsrt::dtypeSize(shard.dtype) == 0)
      return Status::error(cat(at, ": no dtype"));
    if (shard.dtype != shards[0].dtype)
      return Status::error(cat(at, ": dtype ", dsrt::dtypeName(shard.dtype), " differs from rank 0's ",
                               dsrt::dtypeName(shards[0].dtype)));
    int64_t elements = dsrt::elementCount(shard.shape);
    uint64_t size = dsrt::dtypeSize(shard.dtype);
    if (elements < 0 || static_cast<uint64_t>(elements) > (uint64_t(1) << 62) / size)
      return Status::error(cat(at, ": invalid shape ", dsrt::shapeString(shard.shape)));
    if (!shard.fill)
      return Status::error(cat(at, ": no fill callback"));
    uint64_t bytes = static_cast<uint64_t>(elements) * size;
    uint64_t offset = alignUp(sectionSizes_[rank], kTensorAlignment);
    weight.bytes.push_back(bytes);
    weight.offsets.push_back(offset);
  }
  if (weights_.size() >= static_cast<size_t>(INT32_MAX))
    return Status::error("too many weights");
  // Committed only once every shard is valid, so a failed call changes nothing.
  for (int rank = 0; rank < ranks_; ++rank) {
    sectionSizes_[rank] = weight.offsets[rank] + weight.bytes[rank];
    largestWeight_ = std::max(largestWeight_, weight.bytes[rank]);
  }
  weight.name = name;
  weight.shards = std::move(shards);
  names_.insert(std::move(name));
  index = static_cast<int32_t>(weights_.size());
  weights_.push_back(std::move(weight));
  return Status::ok();
}

// Sections follow the header, so their offsets depend on the header's size, which depends
// on nothing but the header's shape: with ForceDefaults every scalar is stored, whatever
// its value, so offsets and checksums can change without changing the size. One pass with
// placeholders gives the size, the next one the real layout.
Status PlanWriter::buildHeader(const std::string &path, std::vector<uint8_t> &header,
                               uint64_t &fileSize) {
  uint64_t reserved = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint64_t offset = alignUp(kHeaderOffset + reserved, kSectionAlignment);
    for (int rank = 0; rank < ranks_; ++rank) {
      plan_.sections[rank]->file_offset = offset;
      fileSize = offset + sectionSizes_[rank];
      offset = alignUp(fileSize, kSectionAlignment);
    }
    flatbuffers::FlatBufferBuilder builder(64 * 1024);
    builder.ForceDefaults(true);
    dsp::FinishPlanBuffer(builder, dsp::Plan::Pack(builder, &plan_));
    uint64_t size = builder.GetSize();
    if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
      return Status::error(cat(path, ": the header would be ", size, " bytes, over 2 GiB"));
    if (reserved != 0 && size <= reserved) {
      header.assign(builder.GetBufferPointer(), builder.GetBufferPointer() + size);
      return Status::ok();
    }
    reserved = size;
  }
  return Status::error(cat(path, ": internal error: the header's size does not settle"));
}

Status PlanWriter::streamSections(const std::string &path, int fd) {
  // At least one alignment unit, so that even empty weights get a valid destination.
  std::unique_ptr<uint8_t, FreeDeleter> buffer;
  void *memory = nullptr;
  uint64_t capacity = alignUp(std::max<uint64_t>(largestWeight_, 1), kTensorAlignment);
  if (::posix_memalign(&memory, kTensorAlignment, capacity) != 0)
    return Status::error(cat(path, ": cannot allocate ", capacity,
                             " bytes for the largest weight"));
  buffer.reset(static_cast<uint8_t *>(memory));
  std::unique_ptr<XXH3_state_t, HashDeleter> hash(XXH3_createState());
  if (!hash)
    return Status::error(cat(path, ": out of memory"));
  static const uint8_t zeros[kTensorAlignment] = {};

  for (int rank = 0; rank < ranks_; ++rank) {
    dsp::WeightSectionT &section = *plan_.sections[rank];
    XXH3_64bits_reset(hash.get());
    uint64_t position = 0;  // inside the section
    for (Weight &weight : weights_) {
      uint64_t offset = weight.offsets[rank], bytes = weight.bytes[rank];
      // Padding is never written (the file has a hole there, read as zeros) but hashed.
      XXH3_64bits_update(hash.get(), zeros, offset - position);
      std::memset(buffer.get(), 0, bytes);
      Status filled = weight.shards[rank].fill(buffer.get());
      if (!filled.isOk())
        return Status::error(cat(path, ": weight '", weight.name, "' (rank ", rank,
                                 "): ", filled.message()));
      XXH3_64bits_update(hash.get(), buffer.get(), bytes);
      DSRT_RETURN_IF_ERROR(writeAt(path, fd, buffer.get(), bytes, section.file_offset + offset));
      position = offset + bytes;
      // Frees the callback's captures (an mmapped source, a transposed copy) as we go.
      weight.shards[rank].fill = nullptr;
    }
    section.checksum = XXH3_64bits_digest(hash.get());
  }
  return Status::ok();
}

Status PlanWriter::write(const std::string &path) {
  if (ranks_ < 1)
    return Status::error(cat(path, ": a plan needs at least one rank, not ", ranks_));
  if (plan_.options && plan_.options->tp != ranks_)
    return Status::error(cat(path, ": options.tp is ", plan_.options->tp, " but the writer has ",
                             ranks_, " ranks"));
  for (const Weight &weight : weights_)
    for (int rank = 0; rank < ranks_; ++rank)
      if (!weight.shards[rank].fill)
        return Status::error(cat(path, ": weight '", weight.name,
                                 "' was already written (fill callbacks run once)"));
  plan_.format_version = kFormatVersion;
  plan_.sections.clear();
  for (int rank = 0; rank < ranks_; ++rank) {
    auto section = std::make_unique<dsp::WeightSectionT>();
    section->rank = rank;
    section->size = sectionSizes_[rank];
    for (const Weight &weight : weights_) {
      auto entry = std::make_unique<dsp::WeightEntryT>();
      entry->name = weight.name;
      entry->dtype = static_cast<dsp::DType>(weight.shards[rank].dtype);
      entry->shape = weight.shards[rank].shape;
      entry->offset = weight.offsets[rank];
      entry->bytes = weight.bytes[rank];
      section->weights.push_back(std::move(entry));
    }
    plan_.sections.push_back(std::move(section));
  }

  // Checked before any weight is produced: a plan the runtime would reject fails fast.
  std::vector<uint8_t> header;
  uint64_t fileSize = 0;
  DSRT_RETURN_IF_ERROR(buildHeader(path, header, fileSize));
  DSRT_RETURN_IF_ERROR(dsrt::verifyPlanHeader(path, header.data(), header.size(), fileSize));
  uint64_t reservedSize = header.size();

  TempFile temp;
  DSRT_RETURN_IF_ERROR(temp.create(path));
  DSRT_RETURN_IF_ERROR(streamSections(path, temp.fd()));

  // The checksums are in; the layout is unchanged (see buildHeader).
  flatbuffers::FlatBufferBuilder builder(header.size() + 1024);
  builder.ForceDefaults(true);
  dsp::FinishPlanBuffer(builder, dsp::Plan::Pack(builder, &plan_));
  if (builder.GetSize() != reservedSize)
    return Status::error(cat(path, ": internal error: the header changed size (",
                             reservedSize, " -> ", builder.GetSize(), ") once checksummed"));
  const uint8_t *bytes = builder.GetBufferPointer();
  DSRT_RETURN_IF_ERROR(writeAt(path, temp.fd(), bytes, builder.GetSize(), kHeaderOffset));

  uint8_t prelude[kPreludeSize];
  encodePrelude(makePrelude(builder.GetSize(), XXH3_64bits(bytes, builder.GetSize()), fileSize),
                prelude);
  DSRT_RETURN_IF_ERROR(writeAt(path, temp.fd(), prelude, kPreludeSize, 0));
  // The last section may end in padding or be empty: the file still has its full size.
  if (::ftruncate(temp.fd(), static_cast<off_t>(fileSize)) != 0)
    return Status::error(cat(path, ": cannot write: ", std::strerror(errno)));
  return temp.commit(path);
}

} // namespace dsc

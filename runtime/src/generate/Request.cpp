#include "generate/Request.h"

#include <cstring>
#include <type_traits>

namespace dsrt {
namespace {

constexpr uint32_t kRequestMagic = 0x51525344;  // "DSRQ" in little-endian bytes
constexpr uint32_t kRequestVersion = 3;

class Writer {
public:
  template <typename T> void put(const T &value) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    const auto *p = reinterpret_cast<const uint8_t *>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof value);
  }
  void putIds(const std::vector<int64_t> &ids) {
    put<uint64_t>(ids.size());
    const auto *p = reinterpret_cast<const uint8_t *>(ids.data());
    bytes_.insert(bytes_.end(), p, p + ids.size() * sizeof(int64_t));
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

private:
  std::vector<uint8_t> bytes_;
};

class Reader {
public:
  explicit Reader(const std::vector<uint8_t> &bytes) : bytes_(bytes) {}
  template <typename T> Status get(T &value, const char *what) {
    if (bytes_.size() - offset_ < sizeof value)
      return truncated(what);
    std::memcpy(&value, bytes_.data() + offset_, sizeof value);
    offset_ += sizeof value;
    return Status::ok();
  }
  Status getIds(std::vector<int64_t> &ids, const char *what) {
    uint64_t count = 0;
    DSRT_RETURN_IF_ERROR(get(count, what));
    if (count > (bytes_.size() - offset_) / sizeof(int64_t))
      return truncated(what);
    ids.resize(static_cast<size_t>(count));
    std::memcpy(ids.data(), bytes_.data() + offset_, ids.size() * sizeof(int64_t));
    offset_ += ids.size() * sizeof(int64_t);
    return Status::ok();
  }
  size_t left() const { return bytes_.size() - offset_; }

private:
  Status truncated(const char *what) const {
    return Status::error(std::string("the request ends inside ") + what + " (" +
                         std::to_string(bytes_.size()) + " bytes)");
  }
  const std::vector<uint8_t> &bytes_;
  size_t offset_ = 0;
};

} // namespace

std::vector<uint8_t> encodeRequest(const GenerationRequest &request) {
  Writer out;
  out.put(kRequestMagic);
  out.put(kRequestVersion);
  out.put(static_cast<uint8_t>(request.kind));
  switch (request.kind) {
  case GenerationRequest::Kind::Generate: {
    const GenerateOptions &options = request.options;
    out.put<int64_t>(options.maxNewTokens);
    out.put<float>(options.temperature);
    out.put<int64_t>(options.topK);
    out.put<float>(options.topP);
    out.put<uint64_t>(options.seed);
    out.put<uint8_t>(options.ignoreEos ? 1 : 0);
    out.put<int64_t>(options.numBeams);
    out.put<float>(options.lengthPenalty);
    out.put<uint8_t>(static_cast<uint8_t>(options.earlyStopping));
    out.put<float>(options.repetitionPenalty);
    out.put<int64_t>(options.noRepeatNgramSize);
    out.put<int64_t>(options.minNewTokens);
    out.put<int64_t>(options.forcedBosToken);
    out.put<int64_t>(options.forcedEosToken);
    out.putIds(options.stopTokens);
    out.put<uint64_t>(request.prompts.size());
    for (const std::vector<int64_t> &prompt : request.prompts)
      out.putIds(prompt);
    break;
  }
  case GenerationRequest::Kind::Failed:
    out.put<int32_t>(request.errorCode);
    out.put<uint64_t>(request.errorMessage.size());
    for (char c : request.errorMessage)
      out.put(c);
    break;
  case GenerationRequest::Kind::Finish:
    break;
  }
  return out.take();
}

Status decodeRequest(const std::vector<uint8_t> &bytes, GenerationRequest &out) {
  Reader in(bytes);
  uint32_t magic = 0, version = 0;
  uint8_t kind = 0;
  DSRT_RETURN_IF_ERROR(in.get(magic, "the header"));
  DSRT_RETURN_IF_ERROR(in.get(version, "the header"));
  if (magic != kRequestMagic || version != kRequestVersion)
    return Status::error("rank 0 sent a request this libdsrt cannot read (format " +
                         std::to_string(version) + ", this build reads " +
                         std::to_string(kRequestVersion) +
                         "); run one libdsrt build on every rank");
  DSRT_RETURN_IF_ERROR(in.get(kind, "the header"));
  GenerationRequest request;
  switch (kind) {
  case static_cast<uint8_t>(GenerationRequest::Kind::Generate): {
    request.kind = GenerationRequest::Kind::Generate;
    GenerateOptions &options = request.options;
    uint8_t ignoreEos = 0;
    uint64_t prompts = 0;
    DSRT_RETURN_IF_ERROR(in.get(options.maxNewTokens, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.temperature, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.topK, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.topP, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.seed, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(ignoreEos, "the options"));
    options.ignoreEos = ignoreEos != 0;
    uint8_t earlyStopping = 0;
    DSRT_RETURN_IF_ERROR(in.get(options.numBeams, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.lengthPenalty, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(earlyStopping, "the options"));
    if (earlyStopping > 2)
      return Status::error("rank 0 sent early_stopping " + std::to_string(earlyStopping));
    options.earlyStopping = static_cast<GenerateOptions::EarlyStopping>(earlyStopping);
    DSRT_RETURN_IF_ERROR(in.get(options.repetitionPenalty, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.noRepeatNgramSize, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.minNewTokens, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.forcedBosToken, "the options"));
    DSRT_RETURN_IF_ERROR(in.get(options.forcedEosToken, "the options"));
    DSRT_RETURN_IF_ERROR(in.getIds(options.stopTokens, "the stop tokens"));
    DSRT_RETURN_IF_ERROR(in.get(prompts, "the prompt count"));
    // Each prompt takes at least its length's 8 bytes.
    if (prompts > in.left() / sizeof(uint64_t))
      return Status::error("the request ends inside its prompts (" + std::to_string(prompts) +
                           " of them in its last " + std::to_string(in.left()) + " bytes)");
    request.prompts.resize(static_cast<size_t>(prompts));
    for (std::vector<int64_t> &prompt : request.prompts)
      DSRT_RETURN_IF_ERROR(in.getIds(prompt, "a prompt"));
    break;
  }
  case static_cast<uint8_t>(GenerationRequest::Kind::Failed): {
    request.kind = GenerationRequest::Kind::Failed;
    uint64_t length = 0;
    DSRT_RETURN_IF_ERROR(in.get(request.errorCode, "the error"));
    DSRT_RETURN_IF_ERROR(in.get(length, "the error"));
    if (length > in.left())
      return Status::error("the request's error message of " + std::to_string(length) +
                           " bytes is longer than the " + std::to_string(in.left()) +
                           " bytes left");
    request.errorMessage.resize(static_cast<size_t>(length));
    for (char &c : request.errorMessage)
      DSRT_RETURN_IF_ERROR(in.get(c, "the error"));
    if (request.errorCode == 0)
      return Status::error("the request reports a failure with status 0 (success)");
    break;
  }
  case static_cast<uint8_t>(GenerationRequest::Kind::Finish):
    request.kind = GenerationRequest::Kind::Finish;
    break;
  default:
    return Status::error("the request is of kind " + std::to_string(kind) +
                         ", not 0 (generate), 1 (failed) or 2 (finish)");
  }
  if (in.left() != 0)
    return Status::error("the request has " + std::to_string(in.left()) +
                         " bytes past its end");
  out = std::move(request);
  return Status::ok();
}

Status shareRequest(ops::Collectives &group, GenerationRequest &request) {
  std::vector<uint8_t> bytes;
  if (group.rank() == 0)
    bytes = encodeRequest(request);
  DSRT_RETURN_IF_ERROR(group.broadcastFromRank0(bytes));
  Status decoded = group.rank() == 0 ? Status::ok() : decodeRequest(bytes, request);
  // Rank 0 would otherwise generate while a follower that could not read the request waits
  // for the next one: every rank learns whether every follower read it.
  uint8_t unread = decoded.isOk() ? 0 : 1;
  std::vector<uint8_t> verdicts;
  DSRT_RETURN_IF_ERROR(group.allGatherRecords(unread, verdicts));
  if (!decoded.isOk())
    return Status::error("rank " + std::to_string(group.rank()) +
                         " cannot read rank 0's request: " + decoded.message());
  for (size_t rank = 0; rank < verdicts.size(); ++rank)
    if (verdicts[rank])
      return Status::error("rank " + std::to_string(rank) +
                           " cannot read rank 0's request (its own error says why)");
  return Status::ok();
}

} // namespace dsrt

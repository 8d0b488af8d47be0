#include "session/RankAgreement.h"

#include <cstring>
#include <string>
#include <vector>

namespace dsrt {
namespace {

// Fixed-size, so that one all-gather carries every rank's.
struct PlanIdentity {
  uint64_t headerChecksum = 0;
  uint64_t fileSize = 0;
  int64_t rankCount = 0;
  int64_t maxBatch = 0;
  int64_t maxSeqLen = 0;
  int64_t maxTokensPerStep = 0;
  char dtype[16] = {};
  char computeDtype[16] = {};
};

void copyName(const flatbuffers::String *from, char (&to)[16]) {
  if (from)
    std::strncpy(to, from->c_str(), sizeof to - 1);
}

PlanIdentity identityOf(const PlanFile &plan) {
  PlanIdentity id;
  id.headerChecksum = plan.prelude().headerChecksum;
  id.fileSize = plan.fileSize();
  id.rankCount = plan.rankCount();
  if (const dsp::Limits *limits = plan.plan().limits()) {
    id.maxBatch = limits->max_batch();
    id.maxSeqLen = limits->max_seq_len();
    id.maxTokensPerStep = limits->max_tokens_per_step();
  }
  if (const dsp::CompileOptions *options = plan.plan().options()) {
    copyName(options->dtype(), id.dtype);
    copyName(options->compute_dtype(), id.computeDtype);
  }
  return id;
}

// What differs between rank 0's identity and another rank's, for the message.
std::string differences(const PlanIdentity &first, const PlanIdentity &other) {
  std::string out;
  auto add = [&](const std::string &what, const std::string &theirs, const std::string &ours) {
    out += (out.empty() ? "" : ", ") + what + " " + theirs + " (rank 0: " + ours + ")";
  };
  auto number = [](int64_t v) { return std::to_string(v); };
  if (first.rankCount != other.rankCount)
    add("tensor-parallel ranks", number(other.rankCount), number(first.rankCount));
  if (first.maxBatch != other.maxBatch)
    add("max_batch", number(other.maxBatch), number(first.maxBatch));
  if (first.maxSeqLen != other.maxSeqLen)
    add("max_seq_len", number(other.maxSeqLen), number(first.maxSeqLen));
  if (first.maxTokensPerStep != other.maxTokensPerStep)
    add("max_tokens_per_step", number(other.maxTokensPerStep), number(first.maxTokensPerStep));
  if (std::strncmp(first.dtype, other.dtype, sizeof first.dtype) != 0)
    add("dtype", other.dtype, first.dtype);
  if (std::strncmp(first.computeDtype, other.computeDtype, sizeof first.computeDtype) != 0)
    add("compute dtype", other.computeDtype, first.computeDtype);
  if (out.empty() && (first.headerChecksum != other.headerChecksum ||
                      first.fileSize != other.fileSize))
    out = "the plan itself (its header's checksum or its size: another model, or other "
          "compile options)";
  return out;
}

} // namespace

Status checkRanksRunOnePlan(ops::Collectives &group, const PlanFile &plan) {
  const int ranks = group.size();
  if (ranks <= 1)
    return Status::ok();
  PlanIdentity mine = identityOf(plan);
  std::vector<PlanIdentity> all;
  DSRT_RETURN_IF_ERROR(group.allGatherRecords(mine, all));
  std::string message;
  for (int rank = 1; rank < ranks; ++rank) {
    std::string differs = differences(all[0], all[static_cast<size_t>(rank)]);
    if (!differs.empty())
      message += "; rank " + std::to_string(rank) + " differs from rank 0 in " + differs;
  }
  if (message.empty())
    return Status::ok();
  return Status::error(plan.path() + " (rank " + std::to_string(group.rank()) +
                       "): the ranks do not run one plan" + message +
                       "; give every rank the same plan file");
}

} // namespace dsrt

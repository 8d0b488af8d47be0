// The C API of tensor-parallel ranks: MPI sessions, and in-process groups that run every
// rank of a plan on threads of this process.
#include "dsrt/dsrt.h"

#include "PlanHandle.h"
#include "SessionHandle.h"
#include "Status.h"
#include "comm/InProcessGroup.h"
#include "comm/MpiCollectives.h"
#include "comm/Nccl.h"
#include "session/RankAgreement.h"

#include <cstdio>

#include <functional>
#include <thread>

struct dsrt_group {
  std::unique_ptr<dsrt::InProcessGroup> group;
  std::vector<std::unique_ptr<dsrt::Session>> sessions;
  std::vector<int64_t> outputShape;
  dsrt_device requested = DSRT_DEVICE_CPU;
};

namespace {

dsrt_status nullArgument(const char *what) {
  return dsrt::fail(DSRT_INVALID_ARGUMENT, std::string(what) + " is null");
}

// Runs `work` for every rank, rank 0 on this thread; a rank that fails wakes the others out
// of their collectives. The first failure (in rank order) is the result.
dsrt::Status runRanks(dsrt_group &group, const std::function<dsrt::Status(int)> &work) {
  int ranks = group.group->size();
  std::vector<dsrt::Status> results(ranks, dsrt::Status::ok());
  auto runOne = [&](int rank) {
    results[rank] = work(rank);
    if (!results[rank].isOk())
      group.group->abort();
  };
  std::vector<std::thread> threads;
  for (int rank = 1; rank < ranks; ++rank)
    threads.emplace_back(runOne, rank);
  runOne(0);
  for (std::thread &thread : threads)
    thread.join();
  group.group->reset();
  // A rank woken by another's failure reports "another rank failed"; the cause comes first.
  for (int rank = 0; rank < ranks; ++rank)
    if (!results[rank].isOk() &&
        results[rank].message().find("another rank failed") == std::string::npos)
      return dsrt::Status::error("rank " + std::to_string(rank) + ": " +
                                 results[rank].message());
  for (const dsrt::Status &result : results)
    if (!result.isOk())
      return result;
  return dsrt::Status::ok();
}

dsrt_status fromStatus(const dsrt::Status &status, dsrt_status code) {
  return status.isOk() ? DSRT_OK : dsrt::fail(code, status.message());
}

// An MPI rank on a GPU: the host collectives over MPI (the generator's, and host steps')
// and NCCL between the GPUs, owned together so that the session's handle keeps both alive
// as long as the session that points to them (and destroys them after it).
class MpiGpuGroup final : public dsrt::ops::Collectives {
public:
  MpiGpuGroup(std::unique_ptr<dsrt::ops::Collectives> host,
              std::unique_ptr<dsrt::NcclCollectives> device)
      : host_(std::move(host)), device_(std::move(device)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  dsrt::Status allReduceSum(float *data, int64_t count) override {
    return host_->allReduceSum(data, count);
  }
  dsrt::Status allGather(const void *mine, const std::vector<int64_t> &bytes,
                         void *out) override {
    return host_->allGather(mine, bytes, out);
  }
  dsrt::Status allGatherUntimed(const void *mine, const std::vector<int64_t> &bytes,
                                void *out) override {
    return host_->allGatherUntimed(mine, bytes, out);
  }
  dsrt::Status allReduceMax(uint64_t *data, int64_t count) override {
    return host_->allReduceMax(data, count);
  }
  dsrt::NcclCollectives *device() { return device_.get(); }

private:
  std::unique_ptr<dsrt::ops::Collectives> host_;
  std::unique_ptr<dsrt::NcclCollectives> device_;
};

} // namespace

extern "C" {

dsrt_status dsrt_session_create_mpi(dsrt_plan *plan, dsrt_device device, dsrt_session **out) {
  if (!plan || !out)
    return nullArgument(!plan ? "plan" : "out");
  if (!dsrt::knownDevice(device))
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "unknown device " + std::to_string(device));
  std::unique_ptr<dsrt::ops::Collectives> collectives;
  if (dsrt_status status =
          fromStatus(dsrt::createMpiCollectives(collectives), DSRT_UNSUPPORTED))
    return status;
  // First of all, while every rank is still here to answer: a rank on another plan would
  // otherwise compute silently wrong tokens, or hang in a collective the others skip.
  if (dsrt_status status = fromStatus(dsrt::checkRanksRunOnePlan(*collectives, *plan->file),
                                      DSRT_INVALID_ARGUMENT))
    return status;
  // On GPUs the collectives run on NCCL; without it (no libnccl, no GPU, ranks sharing a
  // GPU) the CUDA session stages them through host memory over MPI. Every rank reaches the
  // same outcome (NcclCollectives::create agrees across ranks), so rank 0 alone says so.
  dsrt::cuda::DeviceCollectives *deviceCollectives = nullptr;
  if (device == DSRT_DEVICE_CUDA && collectives->size() > 1) {
    std::unique_ptr<dsrt::NcclCollectives> nccl;
    dsrt::Status status = dsrt::NcclCollectives::create(*collectives, nccl);
    if (status.isOk()) {
      auto group = std::make_unique<MpiGpuGroup>(std::move(collectives), std::move(nccl));
      deviceCollectives = group->device();
      collectives = std::move(group);
    } else if (collectives->rank() == 0) {
      std::fprintf(stderr,
                   "dsrt: no NCCL for the tensor-parallel ranks (%s); their collectives are "
                   "staged through host memory over MPI\n",
                   status.message().c_str());
    }
  }
  std::unique_ptr<dsrt::Session> session;
  if (dsrt_status status = fromStatus(
          dsrt::createSession(plan->file, collectives->rank(), dsrt::deviceKind(device),
                              collectives.get(), session, deviceCollectives),
          DSRT_INVALID_ARGUMENT))
    return status;
  *out = new (std::nothrow) dsrt_session{};
  if (!*out)
    return dsrt::fail(DSRT_OUT_OF_MEMORY, "out of memory");
  (*out)->collectives = std::move(collectives);
  (*out)->session = std::move(session);
  (*out)->requested = device;
  return DSRT_OK;
}

dsrt_status dsrt_group_create(dsrt_plan *plan, dsrt_device device, dsrt_group **out) {
  if (!plan || !out)
    return nullArgument(!plan ? "plan" : "out");
  if (!dsrt::knownDevice(device))
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "unknown device " + std::to_string(device));
  auto group = std::make_unique<dsrt_group>();
  int ranks = plan->file->rankCount();
  group->group = std::make_unique<dsrt::InProcessGroup>(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    std::unique_ptr<dsrt::Session> session;
    if (dsrt_status status = fromStatus(
            dsrt::createSession(plan->file, rank, dsrt::deviceKind(device), &group->group->member(rank), session),
            DSRT_CORRUPT_PLAN))
      return status;
    group->sessions.push_back(std::move(session));
  }
  group->requested = device;
  *out = group.release();
  return DSRT_OK;
}

void dsrt_group_destroy(dsrt_group *group) { delete group; }

dsrt_status dsrt_group_set_strict(dsrt_group *group, int strict) {
  if (!group)
    return nullArgument("group");
  for (const std::unique_ptr<dsrt::Session> &session : group->sessions)
    if (strict && group->requested == DSRT_DEVICE_CUDA &&
        session->device() != dsrt::DeviceKind::Cuda)
      return dsrt::fail(DSRT_UNSUPPORTED, "strict device mode: the ranks asked for CUDA run "
                                          "on the CPU (no usable CUDA device)");
  for (const std::unique_ptr<dsrt::Session> &session : group->sessions)
    session->setStrict(strict != 0);
  return DSRT_OK;
}

dsrt_status dsrt_group_stats(const dsrt_group *group, dsrt_stats *out) {
  if (!group || !out)
    return nullArgument(!group ? "group" : "out");
  *out = dsrt_stats{};
  for (const std::unique_ptr<dsrt::Session> &session : group->sessions) {
    dsrt::SessionStats stats = session->stats();
    out->kernel_launches += stats.kernelLaunches;
    out->fallback_steps += stats.fallbackSteps;
    out->graph_captures += stats.graphCaptures;
    out->graph_replays += stats.graphReplays;
    out->bytes_uploaded += stats.bytesUploaded;
    out->bytes_downloaded += stats.bytesDownloaded;
  }
  return DSRT_OK;
}

dsrt_status dsrt_group_set_input(dsrt_group *group, const char *program, size_t index,
                                 dsrt_dtype dtype, const int64_t *shape, size_t rank,
                                 const void *data) {
  if (!group || !program)
    return nullArgument(!group ? "group" : "program");
  for (const auto &session : group->sessions) {
    dsrt_session handle{};
    handle.session.reset(session.get());
    dsrt_status status = dsrt_session_set_input(&handle, program, index, dtype, shape, rank, data);
    handle.session.release();
    if (status != DSRT_OK)
      return status;
  }
  return DSRT_OK;
}

dsrt_status dsrt_group_run(dsrt_group *group, const char *program) {
  if (!group || !program)
    return nullArgument(!group ? "group" : "program");
  std::string name = program;
  return fromStatus(
      runRanks(*group, [&](int rank) { return group->sessions[rank]->run(name); }),
      DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_group_get_output(dsrt_group *group, const char *program, size_t index,
                                  dsrt_tensor *out) {
  if (!group)
    return nullArgument("group");
  dsrt_session handle{};
  handle.session.reset(group->sessions[0].get());
  dsrt_status status = dsrt_session_get_output(&handle, program, index, out);
  handle.session.release();
  if (status == DSRT_OK) {
    group->outputShape = handle.outputShape;
    out->shape = group->outputShape.data();
  }
  return status;
}

dsrt_status dsrt_group_generate(dsrt_group *group, size_t count, const int64_t *const *prompts,
                                const size_t *lengths, const dsrt_generate_options *options,
                                dsrt_generation **out) {
  if (!group || !out)
    return nullArgument(!group ? "group" : "out");
  std::vector<std::vector<int64_t>> batch;
  dsrt::GenerateOptions rank0;
  if (dsrt_status status = dsrt::toPrompts(count, prompts, lengths, batch))
    return status;
  if (dsrt_status status = dsrt::toGenerateOptions(options, rank0))
    return status;
  // Every rank draws the same tokens from the same gathered logits and seed (greedy with a
  // vocabulary-parallel LM head: from one distributed argmax); only rank 0 reports them.
  // The generator shares the sequences rank 0's callback stops with the other ranks.
  dsrt::GenerateOptions others = rank0;
  others.onToken = nullptr;
  std::vector<std::vector<dsrt::GeneratedSequence>> results(group->sessions.size());
  dsrt::Status status = runRanks(*group, [&](int rank) {
    dsrt::GenerateOptions options = rank == 0 ? rank0 : others;
    options.group = &group->group->member(rank);
    return dsrt::generate(*group->sessions[rank], batch, options, results[rank]);
  });
  if (dsrt_status code = fromStatus(status, DSRT_INVALID_ARGUMENT))
    return code;
  auto generation = std::make_unique<dsrt_generation>();
  generation->sequences = std::move(results[0]);
  *out = generation.release();
  return DSRT_OK;
}

} // extern "C"

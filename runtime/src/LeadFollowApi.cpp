// Rank 0 drives the generation of an MPI session's ranks: dsrt_generate_lead,
// dsrt_generate_follow, dsrt_generate_finish (include/dsrt/dsrt.h; docs/reliability.md,
// "Ranks generate one request"). The request travels as generate/Request.h's record.
#include "dsrt/dsrt.h"

#include "SessionHandle.h"
#include "Status.h"
#include "generate/Request.h"

#include <memory>
#include <string>

namespace {

// The other ranks a session's rank 0 leads; null for a session of one rank.
dsrt::ops::Collectives *tensorParallelGroup(const dsrt_session &session) {
  dsrt::ops::Collectives *group = session.collectives.get();
  return group && group->size() > 1 ? group : nullptr;
}

dsrt_status shareWithTheRanks(dsrt::ops::Collectives &group, dsrt::GenerationRequest &request,
                              const char *caller) {
  dsrt::Status status = dsrt::shareRequest(group, request);
  return status.isOk() ? DSRT_OK
                       : dsrt::fail(DSRT_INTERNAL, std::string(caller) + ": " + status.message());
}

// Every rank generates the request alike, as dsrt_generate does.
dsrt_status generateRequest(dsrt_session &session, dsrt::ops::Collectives &group,
                            const dsrt::GenerationRequest &request,
                            dsrt::GenerateOptions options, dsrt_generation **out) {
  options.group = &group;
  auto generation = std::make_unique<dsrt_generation>();
  dsrt::Status status =
      dsrt::generate(*session.session, request.prompts, options, generation->sequences);
  if (!status.isOk())
    return dsrt::fail(DSRT_INVALID_ARGUMENT, status.message());
  if (out)
    *out = generation.release();
  return DSRT_OK;
}

} // namespace

extern "C" {

int dsrt_session_rank(const dsrt_session *session) {
  if (!session)
    return -1;
  return session->collectives ? session->collectives->rank() : session->rank;
}

dsrt_status dsrt_generate_lead(dsrt_session *session, size_t count,
                               const int64_t *const *prompts, const size_t *lengths,
                               const dsrt_generate_options *options, dsrt_generation **out) {
  if (!session)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "session is null");
  dsrt::ops::Collectives *group = tensorParallelGroup(*session);
  if (!group)
    return dsrt_generate(session, count, prompts, lengths, options, out);
  if (group->rank() != 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "dsrt_generate_lead on rank " + std::to_string(group->rank()) +
                          ": rank 0 leads; the other ranks call dsrt_generate_follow");
  dsrt::GenerationRequest request;
  dsrt::GenerateOptions local;
  dsrt_status invalid = DSRT_OK;
  if (!out)
    invalid = dsrt::fail(DSRT_INVALID_ARGUMENT, "out is null");
  if (invalid == DSRT_OK)
    invalid = dsrt::toPrompts(count, prompts, lengths, request.prompts);
  if (invalid == DSRT_OK)
    invalid = dsrt::toGenerateOptions(options, local);
  if (invalid != DSRT_OK) {
    // The followers wait for a request: they get this failure instead, and fail alike.
    std::string message = dsrt_last_error();
    request.kind = dsrt::GenerationRequest::Kind::Failed;
    request.errorCode = invalid;
    request.errorMessage = message;
    if (dsrt_status status = shareWithTheRanks(*group, request, "dsrt_generate_lead"))
      return status;
    return dsrt::fail(invalid, message);
  }
  request.options = local;
  request.options.onToken = nullptr;
  if (dsrt_status status = shareWithTheRanks(*group, request, "dsrt_generate_lead"))
    return status;
  return generateRequest(*session, *group, request, local, out);
}

dsrt_status dsrt_generate_follow(dsrt_session *session, dsrt_generation **out) {
  if (out)
    *out = nullptr;
  if (!session)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "session is null");
  dsrt::ops::Collectives *group = tensorParallelGroup(*session);
  if (!group)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "dsrt_generate_follow: the session is a plan's only rank, which leads "
                      "itself; there is no rank 0 to follow (ranks that follow are MPI "
                      "processes of dsrt_session_create_mpi)");
  if (group->rank() == 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "dsrt_generate_follow on rank 0: rank 0 leads (dsrt_generate_lead, "
                      "dsrt_generate_finish); the other ranks follow");
  dsrt::GenerationRequest request;
  if (dsrt_status status = shareWithTheRanks(*group, request, "dsrt_generate_follow"))
    return status;
  switch (request.kind) {
  case dsrt::GenerationRequest::Kind::Finish:
    return DSRT_LEADER_FINISHED;
  case dsrt::GenerationRequest::Kind::Failed:
    return dsrt::fail(static_cast<dsrt_status>(request.errorCode), request.errorMessage);
  case dsrt::GenerationRequest::Kind::Generate:
    break;
  }
  return generateRequest(*session, *group, request, request.options, out);
}

dsrt_status dsrt_generate_finish(dsrt_session *session) {
  if (!session)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "session is null");
  dsrt::ops::Collectives *group = tensorParallelGroup(*session);
  if (!group)
    return DSRT_OK;
  if (group->rank() != 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "dsrt_generate_finish on rank " + std::to_string(group->rank()) +
                          ": rank 0 leads and finishes; the other ranks follow");
  dsrt::GenerationRequest request;
  request.kind = dsrt::GenerationRequest::Kind::Finish;
  return shareWithTheRanks(*group, request, "dsrt_generate_finish");
}

} // extern "C"

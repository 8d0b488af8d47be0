// A generation request as rank 0 hands it to the ranks that follow it (dsrt_generate_lead,
// dsrt_generate_follow: a server reads requests on rank 0 alone). Only what decides the
// tokens travels: the prompts and the options, not the callback (rank 0's) nor the group
// (each rank's own).
#ifndef DSRT_GENERATE_REQUEST_H
#define DSRT_GENERATE_REQUEST_H

#include "core/Status.h"
#include "generate/Generator.h"
#include "ops/Ops.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

struct GenerationRequest {
  enum class Kind : uint8_t {
    Generate = 0,  // prompts and options follow
    Failed = 1,    // rank 0's request failed before it could be sent: the followers fail alike
    Finish = 2     // rank 0 leads no more requests
  };
  Kind kind = Kind::Generate;
  std::vector<std::vector<int64_t>> prompts;
  GenerateOptions options;  // onToken and group are neither sent nor set on arrival
  // Failed: rank 0's status code (a dsrt_status) and message, for the followers to return.
  int32_t errorCode = 0;
  std::string errorMessage;
};

// A byte record that begins with a magic number and a format version, so that a rank of
// another libdsrt build is refused rather than misread.
std::vector<uint8_t> encodeRequest(const GenerationRequest &request);
// Checks every count against the bytes left before allocating; an error names what is wrong.
Status decodeRequest(const std::vector<uint8_t> &bytes, GenerationRequest &out);

// Collective: rank 0's `request` on every rank of `group` (the others' is replaced). Where a
// follower cannot decode it, every rank gets an error, rank 0 included, so that none goes
// on to generate alone; the group's collectives stay in step.
Status shareRequest(ops::Collectives &group, GenerationRequest &request);

} // namespace dsrt

#endif

// Whether the ranks of a tensor-parallel group were given the same request.
#ifndef DSRT_GENERATE_REQUESTAGREEMENT_H
#define DSRT_GENERATE_REQUESTAGREEMENT_H

#include "generate/Generator.h"

namespace dsrt {

// The ranks of a tensor-parallel group must generate from the same request, or they run
// different programs and wait for each other forever (one rank's prefill of 3 tokens, the
// other's of 2). Checked before anything else, while every rank is still in step: one
// all-gather of each rank's prompts and options, and an error on every rank naming what
// differs. `anyCallback`: whether some rank has a token callback.
Status checkRanksAgree(ops::Collectives &group, const std::vector<std::vector<int64_t>> &prompts,
                       const GenerateOptions &options, bool &anyCallback);

} // namespace dsrt

#endif

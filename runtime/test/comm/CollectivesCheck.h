// The collectives every communicator must get right, checked from one rank's side: sums and
// uint64 maxima in place, uneven all-gathers in rank order, and the tfm.all_gather/all_reduce kernels on top.
// Returns "" when everything holds, else what failed.
#ifndef DSRT_TEST_COMM_COLLECTIVESCHECK_H
#define DSRT_TEST_COMM_COLLECTIVESCHECK_H

#include "ops/Ops.h"

#include <string>

namespace dsrt::test {
std::string checkCollectives(ops::Collectives &collectives);
}

#endif

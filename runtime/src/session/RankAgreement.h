// Ranks that must run the same plan check that they do before anything else they share:
// a rank on another plan (another model, other limits, another dtype) would otherwise run
// and print tokens that are silently wrong, or wait forever in a collective the others
// never reach.
#ifndef DSRT_SESSION_RANKAGREEMENT_H
#define DSRT_SESSION_RANKAGREEMENT_H

#include "core/Status.h"
#include "ops/Ops.h"
#include "plan/PlanFile.h"

namespace dsrt {

// Every rank of `group` calls it with its plan, before creating its session. Each rank's
// plan identity (the header's checksum and size, the rank count, the limits, the weight
// dtypes) reaches every rank, so each reaches the same verdict: ok, or an error naming what
// differs and which ranks differ from rank 0.
Status checkRanksRunOnePlan(ops::Collectives &group, const PlanFile &plan);

} // namespace dsrt

#endif

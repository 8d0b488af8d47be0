// Tensor-parallel ranks as MPI processes (`mpirun -np N dsrun plan.dsp ...`): rank and size
// from MPI_COMM_WORLD. MPI is initialised on first use and finalised at exit when this
// library initialised it.
#ifndef DSRT_COMM_MPICOLLECTIVES_H
#define DSRT_COMM_MPICOLLECTIVES_H

#include "ops/Ops.h"

#include <memory>

namespace dsrt {

// An error naming the reason when this build has no MPI.
Status createMpiCollectives(std::unique_ptr<ops::Collectives> &out);

} // namespace dsrt

#endif

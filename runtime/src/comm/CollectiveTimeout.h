// DSRT_COLLECTIVE_TIMEOUT, shared by every communicator that can wait for a rank that never
// comes (MPI's polling, NCCL's watchdog), so that one setting means the same everywhere.
#ifndef DSRT_COMM_COLLECTIVETIMEOUT_H
#define DSRT_COMM_COLLECTIVETIMEOUT_H

namespace dsrt {

// The seconds a collective may wait for the other ranks: DSRT_COLLECTIVE_TIMEOUT as read
// now (default 300; 0 waits forever; anything that is not a number >= 0 is the default).
double collectiveTimeoutSeconds();

} // namespace dsrt

#endif

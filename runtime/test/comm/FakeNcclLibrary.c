/* A libnccl without a GPU for NcclWatchdogTest.cpp (DSRT_NCCL points at it): every function
 * NcclCollectives resolves, with the C signatures of nccl.h 2.28, plus dsrt_fake_nccl_*
 * controls that the test reaches through dlsym. Collectives do nothing; what matters is
 * what the watchdog sees (ncclCommGetAsyncError) and does (ncclCommAbort), and that nothing
 * touches a communicator after it was aborted or destroyed ("misuse", which the tests
 * expect to stay 0). Built twice: FAKE_NCCL_WITHOUT_ABORT leaves out ncclCommAbort, for the
 * loader's check that it is there. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  char internal[128];
} ncclUniqueId;

/* Never freed, so that a late call is seen, not a crash; kept on a list so that a leak
 * checker sees them reachable. */
typedef struct FakeComm {
  int rank, size;
  int aborted, destroyed;
  struct FakeComm *next;
} FakeComm;

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static FakeComm *comms;
static int asyncError;
static long inits, aborts, destroys, misuses, asyncQueries, allReduces, broadcasts, groups;

static void touch(FakeComm *comm) {
  if (!comm || comm->aborted || comm->destroyed)
    ++misuses;
}

int ncclGetVersion(int *version) {
  *version = 22809;
  return 0;
}

int ncclGetUniqueId(ncclUniqueId *id) {
  memset(id->internal, 0x5a, sizeof id->internal);
  return 0;
}

int ncclCommInitRank(FakeComm **comm, int size, ncclUniqueId id, int rank) {
  (void)id;
  FakeComm *made = calloc(1, sizeof *made);
  if (!made)
    return 1; /* ncclUnhandledCudaError: any error will do */
  made->rank = rank;
  made->size = size;
  pthread_mutex_lock(&mutex);
  ++inits;
  made->next = comms;
  comms = made;
  pthread_mutex_unlock(&mutex);
  *comm = made;
  return 0;
}

int ncclCommDestroy(FakeComm *comm) {
  pthread_mutex_lock(&mutex);
  touch(comm);
  if (comm)
    comm->destroyed = 1;
  ++destroys;
  pthread_mutex_unlock(&mutex);
  return 0;
}

#ifndef FAKE_NCCL_WITHOUT_ABORT
int ncclCommAbort(FakeComm *comm) {
  pthread_mutex_lock(&mutex);
  touch(comm);
  if (comm)
    comm->aborted = 1;
  ++aborts;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mutex);
  return 0;
}
#endif

int ncclCommGetAsyncError(FakeComm *comm, int *error) {
  pthread_mutex_lock(&mutex);
  touch(comm);
  ++asyncQueries;
  *error = asyncError;
  pthread_mutex_unlock(&mutex);
  return 0;
}

const char *ncclGetErrorString(int result) {
  switch (result) {
  case 0:
    return "no error";
  case 6: /* ncclRemoteError */
    return "remote process exited or there was a network error (fake NCCL)";
  default:
    return "unhandled error (fake NCCL)";
  }
}

int ncclAllReduce(const void *send, void *receive, size_t count, int type, int op,
                  FakeComm *comm, void *stream) {
  (void)send, (void)receive, (void)count, (void)type, (void)op, (void)stream;
  pthread_mutex_lock(&mutex);
  touch(comm);
  ++allReduces;
  pthread_mutex_unlock(&mutex);
  return 0;
}

int ncclBroadcast(const void *send, void *receive, size_t count, int type, int root,
                  FakeComm *comm, void *stream) {
  (void)send, (void)receive, (void)count, (void)type, (void)root, (void)stream;
  pthread_mutex_lock(&mutex);
  touch(comm);
  ++broadcasts;
  pthread_mutex_unlock(&mutex);
  return 0;
}

int ncclGroupStart(void) {
  pthread_mutex_lock(&mutex);
  ++groups;
  pthread_mutex_unlock(&mutex);
  return 0;
}

int ncclGroupEnd(void) { return 0; }

/* The controls. */

/* Forgets the counts and the asynchronous error, so that tests may share a process. */
void dsrt_fake_nccl_reset(void) {
  pthread_mutex_lock(&mutex);
  asyncError = 0;
  inits = aborts = destroys = misuses = asyncQueries = allReduces = broadcasts = groups = 0;
  pthread_mutex_unlock(&mutex);
}

/* What ncclCommGetAsyncError reports for every communicator from now on (0: none). */
void dsrt_fake_nccl_set_async_error(int error) {
  pthread_mutex_lock(&mutex);
  asyncError = error;
  pthread_mutex_unlock(&mutex);
}

/* Blocks like an NCCL kernel whose peer never comes: until some communicator is aborted
 * (1) or `seconds` pass (0). */
int dsrt_fake_nccl_wait_for_abort(double seconds) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  long long nanoseconds = deadline.tv_nsec + (long long)(seconds * 1e9);
  deadline.tv_sec += (time_t)(nanoseconds / 1000000000);
  deadline.tv_nsec = (long)(nanoseconds % 1000000000);
  pthread_mutex_lock(&mutex);
  int timedOut = 0;
  while (aborts == 0 && !timedOut)
    timedOut = pthread_cond_timedwait(&changed, &mutex, &deadline) == ETIMEDOUT;
  int aborted = aborts > 0;
  pthread_mutex_unlock(&mutex);
  return aborted;
}

/* How often something happened: "init", "abort", "destroy", "misuse", "async_queries",
 * "all_reduce", "broadcast", "group"; -1 for an unknown name. */
long dsrt_fake_nccl_count(const char *what) {
  long value = -1;
  pthread_mutex_lock(&mutex);
  if (!strcmp(what, "init"))
    value = inits;
  else if (!strcmp(what, "abort"))
    value = aborts;
  else if (!strcmp(what, "destroy"))
    value = destroys;
  else if (!strcmp(what, "misuse"))
    value = misuses;
  else if (!strcmp(what, "async_queries"))
    value = asyncQueries;
  else if (!strcmp(what, "all_reduce"))
    value = allReduces;
  else if (!strcmp(what, "broadcast"))
    value = broadcasts;
  else if (!strcmp(what, "group"))
    value = groups;
  pthread_mutex_unlock(&mutex);
  return value;
}

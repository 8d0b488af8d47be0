#include "comm/Nccl.h"

#include "comm/CollectiveTimeout.h"
#include "core/LibraryLoader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <system_error>

namespace dsrt {

// NCCL's C interface as /usr/local/cuda/include/nccl.h (2.28) declares it; the values are
// part of NCCL's stable ABI.
namespace {

constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct NcclUniqueId {
  char internal[kUniqueIdBytes];
};
using NcclComm = void *;      // ncclComm_t
using NcclResult = int;       // ncclResult_t
constexpr NcclResult kNcclSuccess = 0;
constexpr int kNcclUint8 = 1;    // ncclUint8
constexpr int kNcclFloat32 = 7;  // ncclFloat32
constexpr int kNcclSum = 0;      // ncclSum

// How often the watchdog looks at a communicator the host waits on, and how long it keeps
// doing so after the last wait before it sleeps until the next (so that a decode loop's
// guards need not wake it, and an idle process is not woken ten times a second).
constexpr std::chrono::milliseconds kWatchdogPoll(100);
constexpr std::chrono::seconds kWatchdogStayAwake(1);

} // namespace

struct NcclCollectives::Api {
  void *library = nullptr;
  NcclResult (*getVersion)(int *) = nullptr;
  NcclResult (*getUniqueId)(NcclUniqueId *) = nullptr;
  NcclResult (*commInitRank)(NcclComm *, int, NcclUniqueId, int) = nullptr;
  NcclResult (*commDestroy)(NcclComm) = nullptr;
  NcclResult (*commAbort)(NcclComm) = nullptr;
  NcclResult (*commGetAsyncError)(NcclComm, NcclResult *) = nullptr;
  const char *(*getErrorString)(NcclResult) = nullptr;
  NcclResult (*allReduce)(const void *, void *, size_t, int, int, NcclComm, void *) = nullptr;
  NcclResult (*broadcast)(const void *, void *, size_t, int, int, NcclComm, void *) = nullptr;
  NcclResult (*groupStart)() = nullptr;
  NcclResult (*groupEnd)() = nullptr;
};

namespace {

using Api = NcclCollectives::Api;

template <typename Fn> bool resolve(void *library, const char *name, Fn &out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

// Resolves every function of the library at `library` into `api`; "" or what it lacks.
std::string resolveApi(void *library, Api &api) {
  api = Api{};
  api.library = library;
  const char *missing = nullptr;
  if (!resolve(library, "ncclGetVersion", api.getVersion))
    missing = "ncclGetVersion";
  else if (!resolve(library, "ncclGetUniqueId", api.getUniqueId))
    missing = "ncclGetUniqueId";
  else if (!resolve(library, "ncclCommInitRank", api.commInitRank))
    missing = "ncclCommInitRank";
  else if (!resolve(library, "ncclCommDestroy", api.commDestroy))
    missing = "ncclCommDestroy";
  else if (!resolve(library, "ncclCommAbort", api.commAbort))
    missing = "ncclCommAbort";
  else if (!resolve(library, "ncclCommGetAsyncError", api.commGetAsyncError))
    missing = "ncclCommGetAsyncError";
  else if (!resolve(library, "ncclGetErrorString", api.getErrorString))
    missing = "ncclGetErrorString";
  else if (!resolve(library, "ncclAllReduce", api.allReduce))
    missing = "ncclAllReduce";
  else if (!resolve(library, "ncclBroadcast", api.broadcast))
    missing = "ncclBroadcast";
  else if (!resolve(library, "ncclGroupStart", api.groupStart))
    missing = "ncclGroupStart";
  else if (!resolve(library, "ncclGroupEnd", api.groupEnd))
    missing = "ncclGroupEnd";
  if (missing) {
    api = Api{};
    return std::string("has no ") + missing;
  }
  return "";
}

// Opens `path` and resolves every function; on success the library stays open for the
// life of the process (NCCL's proxy threads may outlive a communicator).
Status openApi(const std::string &path, Api &api) {
  dlerror();
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    return Status::error("NCCL: cannot open '" + path + "': " + (why ? why : "unknown error"));
  }
  if (std::string missing = resolveApi(library, api); !missing.empty()) {
    dlclose(library);
    return Status::error("NCCL: '" + path + "' " + missing);
  }
  return Status::ok();
}

// The process's NCCL, opened once from the first candidate that works.
Status loadApi(const Api *&out) {
  static std::mutex mutex;
  static Api api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    // The shared search (core/LibraryLoader.h): DSRT_NCCL, the toolkit, the loader path,
    // PyTorch's wheels; the first library with every function is kept open.
    const LibrarySpec spec = ncclLibrary();
    LoadedLibrary found =
        findLibrary(spec, [](void *library) { return resolveApi(library, api); });
    if (!found.handle)
      return Status::error("NCCL: " + found.failure(spec));
    loaded = true;
  }
  out = &api;
  return Status::ok();
}

std::string describe(const Api &api, NcclResult result) {
  const char *text = api.getErrorString ? api.getErrorString(result) : nullptr;
  return text ? std::string(text) : "error " + std::to_string(result);
}

// The default device selection: libcuda's primary context of the rank's device, made
// current on this thread (the CUDA session retains the same primary context).
struct CudaDriver {
  int (*init)(unsigned) = nullptr;
  int (*deviceGetCount)(int *) = nullptr;
  int (*deviceGet)(int *, int) = nullptr;
  int (*primaryCtxRetain)(void **, int) = nullptr;
  int (*primaryCtxRelease)(int) = nullptr;
  int (*ctxSetCurrent)(void *) = nullptr;
};

Status loadDriver(const CudaDriver *&out) {
  static std::mutex mutex;
  static CudaDriver driver;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    // The library the CUDA session opens (cuda/CudaDriver.cpp), so that both see one
    // driver and one primary context.
    const LibrarySpec spec = cudaDriverLibrary();
    LoadedLibrary found = findLibrary(spec);
    if (!found.handle)
      return Status::error("no CUDA driver: " + found.failure(spec));
    void *library = found.handle;
    bool ok = resolve(library, "cuInit", driver.init) &&
              resolve(library, "cuDeviceGetCount", driver.deviceGetCount) &&
              resolve(library, "cuDeviceGet", driver.deviceGet) &&
              resolve(library, "cuDevicePrimaryCtxRetain", driver.primaryCtxRetain) &&
              (resolve(library, "cuDevicePrimaryCtxRelease_v2", driver.primaryCtxRelease) ||
               resolve(library, "cuDevicePrimaryCtxRelease", driver.primaryCtxRelease)) &&
              resolve(library, "cuCtxSetCurrent", driver.ctxSetCurrent);
    if (!ok) {
      dlclose(library);
      driver = CudaDriver{};
      return Status::error("the CUDA driver lacks a function NCCL's set-up needs");
    }
    loaded = true;
  }
  out = &driver;
  return Status::ok();
}

Status selectPrimaryContext(int rank, int &device, std::function<void()> &release) {
  const CudaDriver *driver = nullptr;
  DSRT_RETURN_IF_ERROR(loadDriver(driver));
  if (int code = driver->init(0))
    return Status::error("cuInit failed (CUresult " + std::to_string(code) + ")");
  int count = 0;
  if (int code = driver->deviceGetCount(&count))
    return Status::error("cuDeviceGetCount failed (CUresult " + std::to_string(code) + ")");
  if (count < 1)
    return Status::error("no CUDA device");
  int ordinal = rank % count;
  if (const char *chosen = std::getenv("DSRT_CUDA_DEVICE"); chosen && *chosen) {
    char *end = nullptr;
    long value = std::strtol(chosen, &end, 10);
    if (*end || value < 0 || value >= count)
      return Status::error(std::string("DSRT_CUDA_DEVICE=") + chosen + " is not a device in [0, " +
                           std::to_string(count) + ")");
    ordinal = static_cast<int>(value);
  }
  int handle = 0;
  if (int code = driver->deviceGet(&handle, ordinal))
    return Status::error("cuDeviceGet(" + std::to_string(ordinal) + ") failed (CUresult " +
                         std::to_string(code) + ")");
  void *context = nullptr;
  if (int code = driver->primaryCtxRetain(&context, handle))
    return Status::error("cuDevicePrimaryCtxRetain failed (CUresult " + std::to_string(code) +
                         ")");
  if (int code = driver->ctxSetCurrent(context)) {
    driver->primaryCtxRelease(handle);
    return Status::error("cuCtxSetCurrent failed (CUresult " + std::to_string(code) + ")");
  }
  device = ordinal;
  release = [driver, handle] { driver->primaryCtxRelease(handle); };
  return Status::ok();
}

// Whether every rank succeeded; the ranks that did learn that another did not.
Status agree(ops::Collectives &bootstrap, const Status &mine, const char *stage) {
  float failures = mine.isOk() ? 0.0f : 1.0f;
  DSRT_RETURN_IF_ERROR(bootstrap.allReduceSum(&failures, 1));
  if (!mine.isOk())
    return mine;
  if (failures > 0)
    return Status::error(std::string("NCCL: another rank could not ") + stage);
  return Status::ok();
}

} // namespace

std::vector<std::string> ncclLibraryCandidates() {
  std::vector<std::string> paths;
  for (const LibraryCandidate &candidate :
       libraryCandidates(ncclLibrary(), SearchRoots::fromEnvironment()))
    paths.push_back(candidate.path);
  return paths;
}

Status probeNcclLibrary(const std::string &path, int &version) {
  Api api;
  DSRT_RETURN_IF_ERROR(openApi(path, api));
  NcclResult result = api.getVersion(&version);
  if (result != kNcclSuccess)
    return Status::error("NCCL: ncclGetVersion failed: " + describe(api, result));
  return Status::ok();
}

Status bootstrapNcclUniqueId(ops::Collectives &bootstrap, std::vector<uint8_t> &uniqueId) {
  // Rank 0 sends its id and a status byte; the others send nothing, so the gather is a
  // broadcast.
  std::vector<uint8_t> message(kUniqueIdBytes + 1, 0);
  std::string failure;
  if (bootstrap.rank() == 0) {
    const Api *api = nullptr;
    Status loaded = loadApi(api);
    NcclUniqueId id{};
    NcclResult result = loaded.isOk() ? api->getUniqueId(&id) : kNcclSuccess;
    if (!loaded.isOk())
      failure = loaded.message();
    else if (result != kNcclSuccess)
      failure = "NCCL: ncclGetUniqueId failed: " + describe(*api, result);
    else
      std::memcpy(message.data(), id.internal, kUniqueIdBytes);
    message[kUniqueIdBytes] = failure.empty() ? 1 : 0;
  }
  std::vector<int64_t> bytes(static_cast<size_t>(bootstrap.size()), 0);
  bytes[0] = static_cast<int64_t>(message.size());
  std::vector<uint8_t> received(message.size());
  DSRT_RETURN_IF_ERROR(bootstrap.allGather(message.data(), bytes, received.data()));
  if (!received[kUniqueIdBytes])
    return Status::error(bootstrap.rank() == 0 ? failure
                                               : "NCCL: rank 0 could not create a unique id");
  uniqueId.assign(received.begin(), received.begin() + kUniqueIdBytes);
  return Status::ok();
}

Status NcclCollectives::create(ops::Collectives &bootstrap,
                               std::unique_ptr<NcclCollectives> &out,
                               const SelectNcclDevice &select) {
  std::unique_ptr<NcclCollectives> made(new NcclCollectives());
  made->rank_ = bootstrap.rank();
  made->size_ = bootstrap.size();
  // Each stage ends with every rank knowing whether all succeeded: a rank that stopped
  // early would leave the others waiting in NCCL's bootstrap forever.
  Status local = loadApi(made->api_);
  if (local.isOk()) {
    if (select)
      local = select(made->rank_, made->device_);
    else
      local = selectPrimaryContext(made->rank_, made->device_, made->releaseDevice_);
  }
  DSRT_RETURN_IF_ERROR(agree(bootstrap, local, "open NCCL or its GPU"));
  std::vector<uint8_t> id;
  DSRT_RETURN_IF_ERROR(bootstrapNcclUniqueId(bootstrap, id));
  NcclUniqueId uniqueId;
  std::memcpy(uniqueId.internal, id.data(), kUniqueIdBytes);
  NcclComm comm = nullptr;
  NcclResult result = made->api_->commInitRank(&comm, made->size_, uniqueId, made->rank_);
  made->comm_ = result == kNcclSuccess ? comm : nullptr;
  local = made->check(result, "ncclCommInitRank");
  made->timeout_ = collectiveTimeoutSeconds();
  if (local.isOk()) {
    try {
      made->watchdog_ = std::thread(&NcclCollectives::watch, made.get());
    } catch (const std::system_error &error) {
      local = Status::error(std::string("NCCL: cannot start the watchdog thread: ") +
                            error.what());
    }
  }
  // The destructor destroys a communicator that some other rank could not create.
  DSRT_RETURN_IF_ERROR(agree(bootstrap, local, "create its NCCL communicator"));
  out = std::move(made);
  return Status::ok();
}

NcclCollectives::~NcclCollectives() {
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    watchdog_.join();
  }
  if (comm_ && !aborted())
    api_->commDestroy(comm_);
  if (releaseDevice_)
    releaseDevice_();
}

Status NcclCollectives::abortedError() const { return Status::error(abortMessage_); }

Status NcclCollectives::guard(const char *step, const std::function<Status()> &wait) {
  if (aborted()) {
    // Nothing of the dead communicator is left on the stream, but the rest of the work
    // still has to finish before the caller may touch its buffers.
    (void)wait();
    return abortedError();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_ = true;
    step_ = step ? step : "";
    waitStart_ = Clock::now();
    if (asleep_)
      wake_.notify_one();
  }
  Status status = wait();
  {
    // Taken after an abort under way has finished: the watchdog aborts only while
    // waiting_, so the communicator is never aborted under a collective being enqueued.
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_ = false;
    lastWaitEnd_ = Clock::now();
  }
  return aborted() ? abortedError() : status;
}

void NcclCollectives::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!waiting_ && (aborted() || Clock::now() - lastWaitEnd_ > kWatchdogStayAwake)) {
      asleep_ = true;
      wake_.wait(lock, [this] { return stopping_ || waiting_; });
      asleep_ = false;
      continue;
    }
    if (wake_.wait_for(lock, kWatchdogPoll, [this] { return stopping_; }))
      break;
    if (!waiting_ || aborted())
      continue;
    NcclResult async = kNcclSuccess;
    NcclResult queried = api_->commGetAsyncError(comm_, &async);
    double waited = std::chrono::duration<double>(Clock::now() - waitStart_).count();
    if (queried != kNcclSuccess)
      abortLocked("failed: ncclCommGetAsyncError failed: " + describe(*api_, queried));
    else if (async != kNcclSuccess)
      abortLocked("failed: NCCL reported an asynchronous error: " + describe(*api_, async));
    else if (timeout_ > 0 && waited > timeout_) {
      std::ostringstream cause;
      cause << "did not finish within " << timeout_
            << " s (DSRT_COLLECTIVE_TIMEOUT): a rank stopped taking part (which ranks did "
               "not arrive is not known to NCCL)";
      abortLocked(cause.str());
    }
  }
}

void NcclCollectives::abortLocked(const std::string &what) {
  std::string message =
      "NCCL: '" + std::string(step_) + "' on rank " + std::to_string(rank_) + " " + what;
  NcclResult result = api_->commAbort(comm_);
  message += result == kNcclSuccess
                 ? "; the communicator was aborted"
                 : "; aborting the communicator failed too: " + describe(*api_, result);
  // Said here as well: the rank may be stuck elsewhere, and the job's log should show which
  // rank gave up and why even if the error never reaches the caller.
  std::fprintf(stderr, "dsrt: %s\n", message.c_str());
  std::fflush(stderr);
  abortMessage_ = message;
  aborted_.store(true, std::memory_order_release);
}

Status NcclCollectives::check(int result, const char *call) const {
  if (result == kNcclSuccess)
    return Status::ok();
  std::string message = std::string("NCCL: ") + call + " failed on rank " +
                        std::to_string(rank_) + ": " + describe(*api_, result);
  // An asynchronous error of an earlier collective explains a failing one better.
  if (comm_) {
    NcclResult async = kNcclSuccess;
    if (api_->commGetAsyncError(comm_, &async) == kNcclSuccess && async != kNcclSuccess)
      message += " (earlier: " + describe(*api_, async) + ")";
  }
  return Status::error(message);
}

Status NcclCollectives::allReduceSum(cuda::DevicePtr data, int64_t count,
                                     cuda::StreamHandle stream) {
  if (aborted())
    return abortedError();
  if (count < 0)
    return Status::error("NCCL: all-reduce of a negative count");
  if (count == 0)
    return Status::ok();
  void *buffer = reinterpret_cast<void *>(static_cast<uintptr_t>(data));
  return check(api_->allReduce(buffer, buffer, static_cast<size_t>(count), kNcclFloat32, kNcclSum,
                               comm_, stream),
               "ncclAllReduce");
}

Status NcclCollectives::allGather(cuda::DevicePtr mine, const std::vector<int64_t> &bytes,
                                  cuda::DevicePtr out, cuda::StreamHandle stream) {
  if (aborted())
    return abortedError();
  if (static_cast<int>(bytes.size()) != size_)
    return Status::error("NCCL: all-gather of " + std::to_string(bytes.size()) +
                         " sizes for " + std::to_string(size_) + " ranks");
  for (int64_t count : bytes)
    if (count < 0)
      return Status::error("NCCL: all-gather of a negative size");
  DSRT_RETURN_IF_ERROR(check(api_->groupStart(), "ncclGroupStart"));
  Status status = Status::ok();
  uint64_t offset = 0;
  for (int root = 0; root < size_ && status.isOk(); ++root) {
    uint64_t count = static_cast<uint64_t>(bytes[root]);
    // Every rank skips the same empty parts: the sizes are the same on every rank.
    if (count > 0) {
      void *target = reinterpret_cast<void *>(static_cast<uintptr_t>(out + offset));
      const void *source =
          root == rank_ ? reinterpret_cast<const void *>(static_cast<uintptr_t>(mine)) : target;
      status = check(api_->broadcast(source, target, count, kNcclUint8, root, comm_, stream),
                     "ncclBroadcast");
    }
    offset += count;
  }
  // The group is closed even after a failure, or NCCL would keep collecting calls into it.
  Status closed = check(api_->groupEnd(), "ncclGroupEnd");
  return status.isOk() ? closed : status;
}

} // namespace dsrt

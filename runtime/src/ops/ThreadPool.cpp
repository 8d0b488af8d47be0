#include "ops/ThreadPool.h"

#include "ops/AvailableCpus.h"
#include "ops/Ops.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dsrt::ops {
namespace {

// One parallelFor call. Workers hold a shared_ptr to it, so one that wakes up late finds
// every chunk taken and never touches the caller's (by then gone) body.
struct Job {
  const std::function<void(int64_t, int64_t)> *body = nullptr;
  int64_t count = 0;
  int64_t chunkSize = 0;
  int64_t chunks = 0;
  std::atomic<int64_t> nextChunk{0};
  std::atomic<int64_t> finishedChunks{0};

  // Runs chunks until none are left; true when this call finished the last one.
  bool work() {
    bool finishedLast = false;
    for (int64_t chunk; (chunk = nextChunk.fetch_add(1)) < chunks;) {
      int64_t begin = chunk * chunkSize;
      (*body)(begin, std::min(count, begin + chunkSize));
      finishedLast = finishedChunks.fetch_add(1) + 1 == chunks;
    }
    return finishedLast;
  }
};

// How long a worker (and a caller waiting for its job's last chunk) polls before it sleeps on
// the condition variable. A decode step runs a parallel kernel every few hundred
// microseconds with short serial steps between them: waking a sleeping thread costs tens of
// microseconds (more in a VM), polling this long catches the next kernel without that.
constexpr std::chrono::microseconds kSpinTime{100};

// Polls `done` until it holds or kSpinTime has passed.
template <typename Done> bool spinUntil(const Done &done) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done())
      return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > kSpinTime)
      return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

class ThreadPool {
public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i)  // the calling thread is the last worker
      workers_.emplace_back([this] { workerLoop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread &worker : workers_)
      worker.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t count, int64_t chunks, const std::function<void(int64_t, int64_t)> &body) {
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->count = count;
    job->chunkSize = (count + chunks - 1) / chunks;
    job->chunks = (count + job->chunkSize - 1) / job->chunkSize;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    job->work();
    auto finished = [&] { return job->finishedChunks.load() == job->chunks; };
    spinUntil(finished);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
    job_.reset();
  }

private:
  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      spinUntil([&] { return stopping_.load() || generation_.load() != seen; });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
        if (stopping_)
          return;
        seen = generation_;
        job = job_;
      }
      if (job && job->work()) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  // Written under mutex_; atomic so that a spinning worker may read them without it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
};

// Held while a job runs, and while the pool is replaced.
std::mutex poolMutex;
std::unique_ptr<ThreadPool> pool;
std::atomic<int> requestedThreads{0};  // 0: defaultThreadCount()

} // namespace

void setThreadCount(int threads) {
  std::lock_guard<std::mutex> lock(poolMutex);
  requestedThreads = std::max(threads, 0);
  pool.reset();  // recreated at the next parallel call
}

int parallelThreads() {
  const int requested = requestedThreads.load();
  return requested > 0 ? requested : defaultThreadCount();
}

void parallelFor(int64_t count, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body) {
  if (count <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  if (count <= grain) {
    body(0, count);
    return;
  }
  std::unique_lock<std::mutex> lock(poolMutex, std::try_to_lock);
  if (!lock.owns_lock()) {
    body(0, count);
    return;
  }
  int threads = parallelThreads();
  if (threads <= 1) {
    lock.unlock();
    body(0, count);
    return;
  }
  if (!pool || pool->threads() != threads)
    pool = std::make_unique<ThreadPool>(threads);
  // A few chunks per thread balance uneven progress without much scheduling overhead.
  int64_t chunks = std::min<int64_t>((count + grain - 1) / grain, int64_t(threads) * 4);
  pool->run(count, chunks, body);
}

} // namespace dsrt::ops

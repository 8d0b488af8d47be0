// Just enough of CUDA's execution model on the host to run the kernel templates
// (codegen/kernels/*.cuh) without a GPU, for every test that does (the launchers' emulation
// tests here, and test/codegen's through HostCuda.h): every thread of a block is a fiber
// (ucontext) on the caller's thread, blocks run one after another (so `__shared__` may be
// a function-local static), __syncthreads is a barrier over the block and the warp
// intrinsics exchange values through a per-warp slot array between two barriers over the
// warp. A fiber runs until it waits at a barrier or returns; the scheduler then resumes the
// next one, round robin. A thread that returns drops out of its barriers, as an exited GPU
// thread no longer counts for __syncthreads. Fibers rather than host threads: a barrier
// costs a context switch per thread instead of a futex wake-up of every thread, and a block
// no longer creates a host thread per CUDA thread; on two cores the emulation tests spent
// nine tenths of their time in the kernel's scheduler. A round in which no fiber arrives at
// a barrier, is released or returns is a deadlock (a barrier some thread never reaches),
// which aborts with a message instead of hanging.
// A kernel that never synchronises may run its threads one at a time, without fibers
// (launch's `cooperative` false), which is faster still.
// Only as faithful as that; it checks the kernels' indexing and arithmetic, not their
// performance or memory ordering on a real device.
#ifndef DSRT_TEST_CUDA_CUDAEMULATION_H
#define DSRT_TEST_CUDA_CUDAEMULATION_H

#include <ucontext.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace cuda_emulation {

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

// The fibers of the block that runs now, on this host thread.
struct Scheduler {
  ucontext_t context;           // where a fiber returns to when it waits or ends
  ucontext_t *running = nullptr;
  uint64_t progress = 0;        // arrivals, releases and returns so far
};
inline thread_local Scheduler scheduler;

inline void yieldToScheduler() { swapcontext(scheduler.running, &scheduler.context); }

// A reusable barrier whose party count shrinks when a thread leaves for good. Fibers only
// switch when one waits, so it needs no lock.
class Barrier {
public:
  explicit Barrier(int parties) : parties_(parties) {}
  void arriveAndWait() {
    ++scheduler.progress;
    const uint64_t generation = generation_;
    if (++waiting_ >= parties_) {
      release();
      return;
    }
    while (generation == generation_)
      yieldToScheduler();
  }
  void leave() {
    --parties_;
    if (parties_ > 0 && waiting_ >= parties_)
      release();
  }

private:
  void release() {
    ++scheduler.progress;
    waiting_ = 0;
    ++generation_;
  }
  int parties_, waiting_ = 0;
  uint64_t generation_ = 0;
};

// Words per lane that a warp-wide gather (gatherWarp: the tensor cores' operands) carries.
constexpr int kGatherWords = 10;

struct Warp {
  Barrier barrier{32};
  uint32_t slots[32] = {};
  uint32_t gathered[32][kGatherWords] = {};
};

struct Block {
  explicit Block(int threads) : barrier(threads), warps(static_cast<size_t>(threads / 32)) {}
  Barrier barrier;
  std::vector<Warp> warps;
};

// Blocks run from the last to the first when set: a kernel whose blocks meet through
// memory (attention_decode's last arrival merges) must not depend on their order.
inline bool reversedBlockOrder = false;

// Set by the scheduler before it resumes a fiber, so each thread reads its own.
inline thread_local Dim threadIdx, blockIdx;
inline Dim blockDim, gridDim;
inline thread_local Block *currentBlock = nullptr;

inline Warp &myWarp() { return currentBlock->warps[threadIdx.x / 32]; }

inline uint32_t exchange(uint32_t mine, int sourceLane) {
  Warp &warp = myWarp();
  warp.slots[threadIdx.x % 32] = mine;
  warp.barrier.arriveAndWait();
  uint32_t theirs = warp.slots[sourceLane & 31];
  warp.barrier.arriveAndWait();  // nobody overwrites a slot before every lane read
  return theirs;
}

// Every lane's `count` words (at most kGatherWords) into `all`, on every lane: a
// collective of the whole warp, as an mma.sync is.
inline void gatherWarp(const uint32_t *mine, int count, uint32_t (*all)[kGatherWords]) {
  if (count > kGatherWords) {
    std::fprintf(stderr, "cuda_emulation: a warp gather of %d words (at most %d)\n", count,
                 kGatherWords);
    std::abort();
  }
  Warp &warp = myWarp();
  std::memcpy(warp.gathered[threadIdx.x % 32], mine, sizeof(uint32_t) * count);
  warp.barrier.arriveAndWait();
  for (int lane = 0; lane < 32; ++lane)
    std::memcpy(all[lane], warp.gathered[lane], sizeof(uint32_t) * count);
  warp.barrier.arriveAndWait();  // nobody overwrites a lane's words before every lane read
}

inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// A fiber's stack: mapped, not committed, with a guard page below it so an overflow faults
// instead of writing over its neighbour. Kept for the next launch on this thread.
class FiberStack {
public:
  static constexpr size_t kBytes = size_t(1) << 20;
  FiberStack() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void *memory = mmap(nullptr, kBytes + page_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "cuda_emulation: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(memory, page_, PROT_NONE);
    base_ = static_cast<char *>(memory);
  }
  FiberStack(const FiberStack &) = delete;
  FiberStack &operator=(const FiberStack &) = delete;
  ~FiberStack() { munmap(base_, kBytes + page_); }
  void *bottom() const { return base_ + page_; }

private:
  char *base_;
  size_t page_;
};

struct Fiber {
  ucontext_t context;
  Dim thread;
  bool finished = false;
};

// What a fiber runs: the kernel, then it leaves its block's barriers.
inline thread_local const std::function<void()> *fiberKernel = nullptr;
inline thread_local Fiber *currentFiber = nullptr;

inline void runFiber() {
  Fiber &fiber = *currentFiber;
  (*fiberKernel)();
  currentBlock->warps[fiber.thread.x / 32].barrier.leave();
  currentBlock->barrier.leave();
  fiber.finished = true;
  ++scheduler.progress;
  // Returning resumes uc_link: the scheduler.
}

inline void runBlockAsFibers(int threads, const std::function<void()> &kernel) {
  thread_local std::vector<std::unique_ptr<FiberStack>> stacks;
  while (stacks.size() < static_cast<size_t>(threads))
    stacks.push_back(std::make_unique<FiberStack>());
  Block state(threads);
  std::vector<Fiber> fibers(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    Fiber &fiber = fibers[static_cast<size_t>(t)];
    fiber.thread = Dim{static_cast<unsigned>(t), 0, 0};
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = stacks[static_cast<size_t>(t)]->bottom();
    fiber.context.uc_stack.ss_size = FiberStack::kBytes;
    fiber.context.uc_link = &scheduler.context;
    makecontext(&fiber.context, runFiber, 0);
  }
  fiberKernel = &kernel;
  currentBlock = &state;
  int remaining = threads;
  while (remaining > 0) {
    const uint64_t before = scheduler.progress;
    for (Fiber &fiber : fibers) {
      if (fiber.finished)
        continue;
      threadIdx = fiber.thread;
      currentFiber = &fiber;
      scheduler.running = &fiber.context;
      swapcontext(&scheduler.context, &fiber.context);
      if (fiber.finished)
        --remaining;
    }
    if (remaining > 0 && scheduler.progress == before) {
      std::fprintf(stderr, "cuda_emulation: deadlock in block (%u, %u, %u): %d of %d threads "
                           "wait at a barrier that the others never reach\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, remaining, threads);
      std::abort();
    }
  }
  currentBlock = nullptr;
}

// Runs `kernel` over the grid. Cooperative (the default): the block's threads run as
// fibers, and the block size must be a multiple of 32; otherwise one after another on this
// thread, with no barrier or warp to synchronise through.
inline void launch(Dim grid, Dim block, const std::function<void()> &kernel,
                   bool cooperative = true) {
  gridDim = grid;
  blockDim = block;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const bool reversed = reversedBlockOrder;
  for (unsigned zi = 0; zi < grid.z; ++zi)
    for (unsigned yi = 0; yi < grid.y; ++yi)
      for (unsigned xi = 0; xi < grid.x; ++xi) {
        const unsigned z = reversed ? grid.z - 1 - zi : zi;
        const unsigned y = reversed ? grid.y - 1 - yi : yi;
        const unsigned x = reversed ? grid.x - 1 - xi : xi;
        blockIdx = Dim{x, y, z};
        if (!cooperative) {
          currentBlock = nullptr;
          for (int t = 0; t < threads; ++t) {
            threadIdx = Dim{static_cast<unsigned>(t), 0, 0};
            kernel();
          }
          continue;
        }
        runBlockAsFibers(threads, kernel);
      }
}

} // namespace cuda_emulation

// ---- the CUDA spellings the templates and dsc_common.cuh use ---------------------------

using cuda_emulation::blockDim;
using cuda_emulation::blockIdx;
using cuda_emulation::gridDim;
using cuda_emulation::threadIdx;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static

inline void __syncthreads() { cuda_emulation::currentBlock->barrier.arriveAndWait(); }
inline float __shfl_sync(unsigned, float value, int lane) {
  return cuda_emulation::floatOf(
      cuda_emulation::exchange(cuda_emulation::bitsOf(value), lane));
}
inline int __shfl_sync(unsigned, int value, int lane) {
  return static_cast<int>(
      cuda_emulation::exchange(static_cast<uint32_t>(value), lane));
}
inline float __shfl_xor_sync(unsigned, float value, int mask) {
  int lane = static_cast<int>(threadIdx.x % 32) ^ mask;
  return __shfl_sync(0xffffffffu, value, lane);
}
// As CUDA's int overload: without it an int went through the float one, exact only below
// 2^24 (moe_route's argmax exchanges expert indices, 0x7fffffff for none).
inline int __shfl_xor_sync(unsigned, int value, int mask) {
  int lane = static_cast<int>(threadIdx.x % 32) ^ mask;
  return __shfl_sync(0xffffffffu, value, lane);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned bits = 0;
  const unsigned me = threadIdx.x % 32;
  cuda_emulation::Warp &warp = cuda_emulation::myWarp();
  warp.slots[me] = predicate ? 1u : 0u;
  warp.barrier.arriveAndWait();
  for (unsigned lane = 0; lane < 32; ++lane)
    bits |= warp.slots[lane] << lane;
  warp.barrier.arriveAndWait();
  return bits;
}
inline int __popc(unsigned value) { return __builtin_popcount(value); }
// Blocks run one after another, so memory is always coherent between them; an atomic is
// still one, for the threads of a block.
inline void __threadfence() {}
inline float __ldcg(const float *address) { return *address; }
inline float __ldg(const float *address) { return *address; }
inline unsigned short __ldcg(const unsigned short *address) { return *address; }
inline int atomicAdd(int *address, int value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}
inline float __int_as_float(int bits) {
  return cuda_emulation::floatOf(static_cast<uint32_t>(bits));
}
inline float __uint_as_float(unsigned bits) { return cuda_emulation::floatOf(bits); }
inline unsigned __float_as_uint(float value) { return cuda_emulation::bitsOf(value); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __double2float_rn(double value) { return static_cast<float>(value); }
inline float __ll2float_rn(long long value) { return static_cast<float>(value); }
inline double __ll2double_rn(long long value) { return static_cast<double>(value); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

#endif

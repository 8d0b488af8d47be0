// dsrt-engine-check's refusals of engine options (docs/serving.md, "Bad input"): more tokens
// per step than the plan's rows, a KV budget below one block, a batch_invariant level that
// is not one, and kv_cache_memory_fraction's
// budget on the CPU and on a GPU.
#include "EngineCheck.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace engine_check {
namespace {

// The kernel's MemAvailable in bytes, as the engine reads it (0 if there is none).
double memAvailable() {
  double bytes = 0;
  if (std::FILE *meminfo = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof line, meminfo))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        bytes = 1024.0 * static_cast<double>(kib);
        break;
      }
    std::fclose(meminfo);
  }
  return bytes;
}

// kv_cache_memory_fraction: a budget of that fraction of the free memory, shared by the
// plan's ranks in this process, in whole blocks (within the drift of MemAvailable between the
// engine's read and this one's, 5%, and a block); out of (0, 1], beside kv_cache_bytes, or
// less than a block, refused by name.
void checkCpuMemoryFraction(dsrt_plan *plan, dsrt_engine_options options, uint64_t bytesPerBlock) {
  options.kv_cache_bytes = 0;
  options.kv_cache_memory_fraction = 0.01f;
  const double available = memAvailable();
  if (available <= 0)
    return;  // no /proc/meminfo: the engine took sysconf's free pages, which this cannot see
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine with kv_cache_memory_fraction");
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats");
  dsrt_engine_destroy(engine);
  const double budget = 0.01 * available / std::max(1, dsrt_plan_rank_count(plan));
  const double held = static_cast<double>(stats.total_blocks) * static_cast<double>(bytesPerBlock);
  if (held > budget * 1.05 || held < budget * 0.95 - static_cast<double>(bytesPerBlock)) {
    std::fprintf(stderr,
                 "dsrt-engine-check: kv_cache_memory_fraction 0.01 of %.0f bytes free gave %lld "
                 "blocks of %llu bytes\n",
                 available, static_cast<long long>(stats.total_blocks),
                 static_cast<unsigned long long>(bytesPerBlock));
    std::exit(2);
  }
  auto refused = [&](const dsrt_engine_options &bad, const char *why, const char *what) {
    dsrt_engine *probe = nullptr;
    if (dsrt_engine_create(plan, &bad, &probe) == DSRT_OK) {
      dsrt_engine_destroy(probe);
      die(what);
    }
    if (!std::strstr(dsrt_last_error(), why))
      die(std::string(what) + " as such");
  };
  dsrt_engine_options bad = options;
  bad.kv_cache_memory_fraction = 1.5f;
  refused(bad, "kv_cache_memory_fraction must be more than 0 and at most 1",
          "a memory fraction of 1.5 was not refused");
  bad.kv_cache_memory_fraction = -0.5f;
  refused(bad, "kv_cache_memory_fraction must be more than 0 and at most 1",
          "a negative memory fraction was not refused");
  bad = options;
  bad.kv_cache_bytes = bytesPerBlock * 4;
  refused(bad, "both set the KV budget", "kv_cache_bytes beside a memory fraction was not refused");
  bad = options;
  bad.kv_cache_memory_fraction = 1e-30f;
  refused(bad, "less than one block", "a memory fraction below one block was not refused");
}

// On a GPU the fraction is of its free memory once the weights are on it, which the
// sessions read (the fake driver's CudaEngineTest checks the arithmetic): a small fraction
// holds blocks, and one below a block is refused, naming the GPU.
void checkGpuMemoryFraction(dsrt_plan *plan, dsrt_engine_options options) {
  options.kv_cache_bytes = 0;
  options.kv_cache_memory_fraction = 0.01f;
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine with kv_cache_memory_fraction");
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats");
  dsrt_engine_destroy(engine);
  if (stats.total_blocks < 1)
    die("kv_cache_memory_fraction 0.01 of the GPU gave no blocks");
  options.kv_cache_memory_fraction = 1e-30f;
  if (dsrt_engine_create(plan, &options, &engine) == DSRT_OK) {
    dsrt_engine_destroy(engine);
    die("a GPU memory fraction below one block was not refused");
  }
  if (!std::strstr(dsrt_last_error(), "less than one block") ||
      !std::strstr(dsrt_last_error(), "bytes free on cuda:"))
    die(std::string("a GPU memory fraction below one block was not refused as such: ") +
        dsrt_last_error());
}

} // namespace

void checkRefusals(dsrt_plan *plan, dsrt_engine_options options, const dsrt_engine_stats &stats) {
  dsrt_engine *probe = nullptr;
  // The default tokens per step are the rows of the plan's step program, and one more is
  // refused, naming them.
  options.max_tokens_per_step = static_cast<int32_t>(stats.max_tokens_per_step + 1);
  if (dsrt_engine_create(plan, &options, &probe) == DSRT_OK ||
      !std::strstr(dsrt_last_error(), "tokens per step must be between 1 and"))
    die("more tokens per step than the plan's rows were not refused as such");
  options.max_tokens_per_step = 0;
  // Less than one block is refused, naming the budget.
  options.kv_cache_bytes = stats.bytes_per_block - 1;
  if (dsrt_engine_create(plan, &options, &probe) == DSRT_OK ||
      !std::strstr(dsrt_last_error(), "less than one block"))
    die("a KV budget below one block was not refused as such");
  options.kv_cache_bytes = 0;
  // batch_invariant is a level, 0 to 2: another value is refused, naming it.
  for (int level : {-1, 3}) {
    options.batch_invariant = level;
    if (dsrt_engine_create(plan, &options, &probe) == DSRT_OK ||
        !std::strstr(dsrt_last_error(), "batch_invariant must be 0, 1 or 2"))
      die("batch_invariant " + std::to_string(level) + " was not refused as such");
  }
}

void checkMemoryFraction(dsrt_plan *plan, const dsrt_engine_options &options,
                         uint64_t bytesPerBlock) {
  // Without a GPU (not strict) the sessions fell back to the CPU, and so did the budget.
  if (options.device == DSRT_DEVICE_CUDA && dsrt_cuda_device_count() > 0)
    checkGpuMemoryFraction(plan, options);
  else
    checkCpuMemoryFraction(plan, options, bytesPerBlock);
}

} // namespace engine_check

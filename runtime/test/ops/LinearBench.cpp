// dsrt-linear-bench: the CPU's fast linear kernel (ops/fast's linear(), what tfm.linear and
// tfm.lm_head run) on one weight shape, timed alone: a benchmark for kernel work, not a test
// (nothing asserts on time). Random weights; the best of N calls, so that a noisy shared
// machine disturbs it less, and the weight bytes per second at that time.
//
//   dsrt-linear-bench [--dtype f32|f16|bf16|int8|int4] [--in 896] [--out 4864] [--rows 1]
//                     [--group 32] [--scales f32|f16] [--threads 2] [--calls 50]
//                     [--row-invariant 1]   (the serving engine's arithmetic)
//                     [--exact 1]           (batch_invariant 2's: every row as a row alone)
//                     [--int8-activations 0] (int8: as a --int8-weight-only plan; default 1, as
//                                             dsc's int8 plans ask)
//                     [--copies N]          (N copies of the weights, the calls taking them in
//                                            turn: with more bytes than the last-level cache
//                                            each call reads its weights from memory, as a
//                                            model's layers do; 1 leaves them in cache)
#include "core/Tensor.h"
#include "ops/Ops.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dsrt;

namespace {

[[noreturn]] void usage(const std::string &why) {
  std::fprintf(stderr,
               "dsrt-linear-bench: %s\nusage: dsrt-linear-bench [--dtype f32|f16|bf16|int8|int4] "
               "[--in N] [--out N] [--rows N] [--group N] [--scales f32|f16] [--threads N] "
               "[--calls N] [--row-invariant 0|1] [--exact 0|1] [--int8-activations 0|1] "
               "[--copies N]\n",
               why.c_str());
  std::exit(2);
}

int64_t positive(const char *text, const char *flag) {
  char *end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (!end || *end || value < 1)
    usage(std::string(flag) + " takes a positive integer, not '" + text + "'");
  return value;
}

} // namespace

int main(int argc, char **argv) {
  std::string dtype = "int4", scaleType = "f32";
  int64_t in = 896, out = 4864, rows = 1, group = 32, threads = 2, calls = 50, copies = 1;
  bool rowInvariant = false, exact = false, int8Activations = true;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      usage(flag + " needs a value");
    const char *value = argv[++i];
    if (flag == "--dtype") dtype = value;
    else if (flag == "--scales") scaleType = value;
    else if (flag == "--in") in = positive(value, "--in");
    else if (flag == "--out") out = positive(value, "--out");
    else if (flag == "--rows") rows = positive(value, "--rows");
    else if (flag == "--group") group = positive(value, "--group");
    else if (flag == "--threads") threads = positive(value, "--threads");
    else if (flag == "--calls") calls = positive(value, "--calls");
    else if (flag == "--copies") copies = positive(value, "--copies");
    else if (flag == "--row-invariant") rowInvariant = std::string(value) == "1";
    else if (flag == "--exact") exact = rowInvariant = std::string(value) == "1";
    else if (flag == "--int8-activations") int8Activations = std::string(value) == "1";
    else usage("unknown option " + flag);
  }
  const bool int4 = dtype == "int4", int8 = dtype == "int8";
  DType stored = int4 ? DType::U8 : int8 ? DType::I8 : dtype == "f16" ? DType::F16
               : dtype == "bf16" ? DType::BF16 : dtype == "f32" ? DType::F32 : DType::Undefined;
  if (stored == DType::Undefined)
    usage("--dtype must be f32, f16, bf16, int8 or int4");
  if ((int4 || int8) && (in % group != 0 || (int4 && group % 2 != 0)))
    usage("--group must divide --in (and be even for int4)");
  if (scaleType != "f32" && scaleType != "f16")
    usage("--scales must be f32 or f16");
  ops::setThreadCount(static_cast<int>(threads));

  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal;
  const int64_t rowBytes = int4 ? in / 2 : in * static_cast<int64_t>(dtypeSize(stored));
  std::vector<uint8_t> weights(static_cast<size_t>(out * rowBytes));
  for (uint8_t &b : weights)
    b = static_cast<uint8_t>(byte(rng));
  if (stored == DType::F32 || stored == DType::F16 || stored == DType::BF16) {
    std::vector<float> values(static_cast<size_t>(out * in));
    for (float &v : values)
      v = 0.05f * normal(rng);
    convertFloats(DType::F32, values.data(), stored, weights.data(), out * in);
  }
  const int64_t groups = (int4 || int8) ? in / group : 1;
  std::vector<float> scales(static_cast<size_t>(out * groups));
  for (float &s : scales)
    s = 0.01f + 0.001f * std::abs(normal(rng));
  std::vector<uint16_t> halfScales(scales.size());
  convertFloats(DType::F32, scales.data(), DType::F16, halfScales.data(),
                static_cast<int64_t>(scales.size()));

  ops::fast::LinearWeights w;
  w.dtype = stored;
  w.data = weights.data();
  w.out = out;
  w.in = in;
  if (int4 || int8) {
    w.groups = groups;
    w.scales = scaleType == "f16" ? static_cast<const void *>(halfScales.data())
                                  : static_cast<const void *>(scales.data());
    w.scaleType = scaleType == "f16" ? DType::F16 : DType::F32;
    w.int8Activations = int8 && int8Activations;
  }
  std::vector<std::vector<uint8_t>> copiesOfWeights(static_cast<size_t>(copies - 1), weights);
  std::vector<ops::fast::LinearWeights> each(static_cast<size_t>(copies), w);
  for (int64_t c = 1; c < copies; ++c)
    each[static_cast<size_t>(c)].data = copiesOfWeights[static_cast<size_t>(c - 1)].data();
  std::vector<float> x(static_cast<size_t>(rows * in)), y(static_cast<size_t>(rows * out));
  for (float &v : x)
    v = normal(rng);
  const auto none = [](int64_t, int64_t) {};
  for (const ops::fast::LinearWeights &copy : each)  // warm: pages, pool, oneDNN
    ops::fast::linear(x.data(), rows, copy, y.data(), none, nullptr, rowInvariant, exact);
  double best = 1e30, total = 0;
  for (int64_t c = 0; c < calls; ++c) {
    const ops::fast::LinearWeights &copy = each[static_cast<size_t>(c % copies)];
    const auto start = std::chrono::steady_clock::now();
    ops::fast::linear(x.data(), rows, copy, y.data(), none, nullptr, rowInvariant, exact);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, ms);
    total += ms;
  }
  const double bytes = static_cast<double>(weights.size()) +
                       ((int4 || int8) ? static_cast<double>(scales.size()) *
                                             (scaleType == "f16" ? 2 : 4)
                                       : 0.0);
  std::printf("%s%s%s [%lld, %lld] x %lld rows%s, %lld threads (%s): best %.4f ms, mean %.4f ms, "
              "%.2f GB/s of weights at best, %.1f GFLOP/s\n",
              dtype.c_str(), int8 && !int8Activations ? " (weight-only)" : "",
              exact ? " (exact)" : rowInvariant ? " (row-invariant)" : "", static_cast<long long>(out), static_cast<long long>(in),
              static_cast<long long>(rows),
              (int4 || int8) ? (", groups of " + std::to_string(group) + ", " + scaleType +
                                " scales").c_str()
                             : "",
              static_cast<long long>(threads), ops::fast::linearKernelsDescription(), best,
              total / calls, bytes / best / 1e6, 2.0 * rows * in * out / best / 1e6);
  return 0;
}

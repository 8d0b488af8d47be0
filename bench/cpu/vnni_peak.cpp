// The rate this CPU issues AVX-512 VNNI `vpdpbusd` (64 int8 multiply-adds each) from registers
// alone: 12 independent accumulator chains per thread, enough to cover the instruction's
// latency on every core that has it. The ceiling the int8 linears are measured against
// (bench/serving/RESULTS.md). A benchmark, not a test:
//
//   g++ -O2 -std=c++17 -pthread bench/cpu/vnni_peak.cpp -o /tmp/vnni_peak && /tmp/vnni_peak 2
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__attribute__((target("avx512f,avx512bw,avx512vnni"))) long long chains(long long rounds) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi32(0x01020304), b = _mm512_set1_epi32(0x05060708);
  for (long long k = 0; k < rounds; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i)
      acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    asm volatile("" : "+v"(a));  // keeps the loop from being folded
  }
  long long sum = 0;
  for (int i = 0; i < 12; ++i)
    sum += _mm512_reduce_add_epi32(acc[i]);
  return sum;
}

int main(int argc, char **argv) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::puts("this CPU has no AVX-512 VNNI");
    return 0;
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const long long rounds = 200000000LL / 12;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t)
    running.emplace_back([rounds] {
      volatile long long kept = chains(rounds);
      (void)kept;
    });
  for (auto &thread : running)
    thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double issued = double(rounds) * 12 * threads;
  std::printf("%d thread(s): %.2f G vpdpbusd/s, %.0f G int8 ops/s (a multiply-add is 2)\n",
              threads, issued / seconds / 1e9, issued * 128 / seconds / 1e9);
}

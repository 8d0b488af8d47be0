// tfm.moe's routing on the device (docs/cuda-backend.md, "Mixture of experts"): each row's
// router scores, its top k experts, and the per-expert token lists the expert kernels read.
// One block, so that the lists are built after every row is routed without a host sync or a
// second launch: the launches stay capturable in a CUDA graph.
//
// Per row (a warp each): the softmax of the EXPERTS logits (SIGMOID 0) or the sigmoid of
// each (SIGMOID 1), then TOP_K rounds of a warp argmax, the higher score first and the lower
// expert among equal scores (ops/MoeRouting.h's routeToken), then with NORMALIZE each chosen
// score divided by the chosen scores' sum. routes[r * TOP_K + j] and weights[...] hold them.
// Then the rank's experts [first, first + held): counts[e], offsets[e] (offsets[held] the
// total), lists[offsets[e] + i] = the i-th row that chose expert first + e, in row order (the
// CPU kernel's order), and slots[r * TOP_K + j] = that row's place in the lists (-1 for an
// expert another rank holds).
//
// Constants: EXPERTS (E), TOP_K, SIGMOID (0/1), NORMALIZE (0/1), BLOCK (threads, a
// multiple of 32).
#include "dsc_common.cuh"

#if EXPERTS < 1 || EXPERTS > 1024 || TOP_K < 1 || TOP_K > EXPERTS
#error "moe_route: EXPERTS must be in [1, 1024] and TOP_K in [1, EXPERTS]"
#endif

#define MOE_WARPS (BLOCK / 32)

extern "C" __global__ void __launch_bounds__(BLOCK)
moe_route(const float *logits, long long rows, int first, int held, int *routes,
          float *weights, int *slots, int *counts, int *offsets, int *lists) {
  // Each lane keeps its experts' scores (lane, lane + 32, ...) here; no lane reads another's.
  __shared__ float scores[MOE_WARPS][EXPERTS];
  __shared__ int expert_counts[EXPERTS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float *mine = scores[warp];
  for (long long r = warp; r < rows; r += MOE_WARPS) {
    const float *row = logits + r * EXPERTS;
    if (SIGMOID) {
      for (int e = lane; e < EXPERTS; e += 32)
        mine[e] = 1.0f / (1.0f + expf(-row[e]));
    } else {
      float top = __int_as_float(0xff800000);
      for (int e = lane; e < EXPERTS; e += 32)
        top = fmaxf(top, row[e]);
      top = dsc_warp_max(top);
      float sum = 0.0f;
      for (int e = lane; e < EXPERTS; e += 32)
        sum += (mine[e] = expf(row[e] - top));
      sum = dsc_warp_sum(sum);
      for (int e = lane; e < EXPERTS; e += 32)
        mine[e] /= sum;
    }
    // TOP_K rounds: each lane offers its best remaining expert (the first of equal scores,
    // as it scans upwards), the warp keeps the best of the offers, its owner retires it.
    float chosen_sum = 0.0f;
    float chosen_score[TOP_K];
    int chosen_expert[TOP_K];
#pragma unroll
    for (int j = 0; j < TOP_K; ++j) {
      float best = -1.0f;
      int best_expert = 0x7fffffff;
      for (int e = lane; e < EXPERTS; e += 32)
        if (mine[e] > best) {
          best = mine[e];
          best_expert = e;
        }
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const int other_expert = __shfl_xor_sync(0xffffffffu, best_expert, offset);
        if (other > best || (other == best && other_expert < best_expert)) {
          best = other;
          best_expert = other_expert;
        }
      }
      // No expert offered: every remaining score is NaN (logits the CPU kernel refuses). The
      // choice stays out of range, which no rank holds, so it adds nothing.
      if (best_expert < EXPERTS && best_expert % 32 == lane)
        mine[best_expert] = -2.0f;  // below every score: never offered again
      chosen_score[j] = best;
      chosen_expert[j] = best_expert;
      chosen_sum += best;
    }
    if (lane == 0)
#pragma unroll
      for (int j = 0; j < TOP_K; ++j) {
        routes[r * TOP_K + j] = chosen_expert[j];
        weights[r * TOP_K + j] = NORMALIZE ? chosen_score[j] / chosen_sum : chosen_score[j];
      }
  }
  __syncthreads();  // every route is written (global memory, visible to the block)

  // Each of the rank's experts counts its rows, then (after one thread's scan) lists them.
  for (int e = threadIdx.x; e < held; e += BLOCK) {
    int count = 0;
    for (long long i = 0; i < rows * TOP_K; ++i)
      count += routes[i] == first + e;
    expert_counts[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int e = 0; e < held; ++e) {
      offsets[e] = total;
      counts[e] = expert_counts[e];
      total += expert_counts[e];
    }
    offsets[held] = total;
    for (int e = 0; e < held; ++e)
      expert_counts[e] = offsets[e];  // now each expert's next free place
  }
  __syncthreads();
  for (long long i = threadIdx.x; i < rows * TOP_K; i += BLOCK) {
    const int local = routes[i] - first;
    if (local < 0 || local >= held)
      slots[i] = -1;
  }
  for (int e = threadIdx.x; e < held; e += BLOCK) {
    int place = expert_counts[e];
    for (long long i = 0; i < rows * TOP_K; ++i)
      if (routes[i] == first + e) {
        lists[place] = static_cast<int>(i / TOP_K);
        slots[i] = place++;
      }
  }
}

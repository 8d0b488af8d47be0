// tfm.moe's weighted sum on the device (docs/cuda-backend.md, "Mixture of experts"): row r
// of the output is the sum over its chosen experts, in expert order (the CPU kernel's and the
// export's order), of weight * the expert's result for the row, then with SHARED Qwen2-MoE's
// shared expert times sigmoid(x · gate). No atomics: a block owns each row it writes, so the
// result does not depend on scheduling. Experts another rank holds (slot -1) add nothing:
// the rank's partial sum then meets the others' in the plan's all-reduce.
//
// routes, weights and slots are moe_route's ([rows, TOP_K]); expert_out is moe_experts'
// [places, HIDDEN]; shared_out [rows, HIDDEN] and shared_gate [HIDDEN] (dtype
// SHARED_GATE_DT) with SHARED.
//
// Constants: HIDDEN, TOP_K, SHARED (0/1), SHARED_GATE_DT (with SHARED), BLOCK.
#include "dsc_common.cuh"

#ifndef SHARED_GATE_DT
#define SHARED_GATE_DT DSC_DT_F32
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
moe_combine(const float *expert_out, const int *routes, const float *weights, const int *slots,
            const float *shared_out, const void *shared_gate, const float *x, float *out,
            long long rows) {
  __shared__ int order[TOP_K];
  __shared__ float scratch[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    if (threadIdx.x == 0) {
      // The row's choices by expert, lowest first (selection: TOP_K is small).
      int previous = -1;
      for (int j = 0; j < TOP_K; ++j) {
        int next = -1;
        for (int i = 0; i < TOP_K; ++i) {
          const int expert = routes[r * TOP_K + i];
          if (expert > previous && (next < 0 || expert < routes[r * TOP_K + next]))
            next = i;
        }
        // None left only where a row's choices repeat (moe_route's out-of-range choice of
        // NaN scores): -1, skipped below.
        order[j] = next;
        if (next >= 0)
          previous = routes[r * TOP_K + next];
      }
    }
    float scale = 0.0f;
    if (SHARED) {
      float dot = 0.0f;
      for (int h = threadIdx.x; h < HIDDEN; h += BLOCK)
        dot += x[r * HIDDEN + h] * dsc_load_float<SHARED_GATE_DT>(shared_gate, h);
      dot = dsc_block_sum(dot, scratch);  // also waits for `order`
      scale = 1.0f / (1.0f + expf(-dot));
    } else {
      __syncthreads();
    }
    for (int h = threadIdx.x; h < HIDDEN; h += BLOCK) {
      float sum = 0.0f;
      for (int j = 0; j < TOP_K && order[j] >= 0; ++j) {
        const long long chosen = r * TOP_K + order[j];
        const int slot = slots[chosen];
        if (slot >= 0)
          sum += expert_out[static_cast<long long>(slot) * HIDDEN + h] * weights[chosen];
      }
      if (SHARED)
        sum += scale * shared_out[r * HIDDEN + h];
      out[r * HIDDEN + h] = sum;
    }
    __syncthreads();  // `order` is rewritten for the next row
  }
}

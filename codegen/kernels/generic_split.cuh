// ONNX Split in one launch: the input, viewed as [outer, axis, inner], is read once in order
// and each element written to the part its axis coordinate falls in, as on the host
// (runtime/src/ops/Movement.cpp). One launch instead of one strided copy per part: GPT-2's
// fused QKV Split took three copies per layer, 10% of an H200's decode step.
//
// Constants: ES, the element size (1, 2, 4 or 8); PARTS (1..8), the outputs.
#if ES == 1
typedef unsigned char generic_split_t;
#elif ES == 2
typedef unsigned short generic_split_t;
#elif ES == 4
typedef unsigned int generic_split_t;
#elif ES == 8
typedef unsigned long long generic_split_t;
#else
#error "generic_split: ES must be 1, 2, 4 or 8"
#endif
#if PARTS < 1 || PARTS > 8
#error "generic_split: PARTS must be in [1, 8]"
#endif

struct GenericSplitShape {
  unsigned long long outputs[8];  // the parts' device addresses
  long long ends[8];              // where each part ends along the axis (cumulative)
  long long axis;                 // the input's extent along the axis
  long long inner;                // elements per axis position
};

extern "C" __global__ void generic_split(const generic_split_t *input, GenericSplitShape shape,
                                         long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const long long r = i % shape.inner, a = (i / shape.inner) % shape.axis;
    const long long o = i / (shape.inner * shape.axis);
    int part = 0;
#pragma unroll
    for (int p = 0; p < PARTS - 1; ++p)
      part += a >= shape.ends[p] ? 1 : 0;
    const long long start = part > 0 ? shape.ends[part - 1] : 0;
    const long long length = shape.ends[part] - start;
    generic_split_t *out = reinterpret_cast<generic_split_t *>(shape.outputs[part]);
    out[(o * length + (a - start)) * shape.inner + r] = input[i];
  }
}

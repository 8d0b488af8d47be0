// cuBLASLt for the CUDA backend's larger GEMMs (GpuOps.h's GemmDesc), reached through
// dlopen so that the runtime builds and loads without the CUDA toolkit.
#ifndef DSRT_CUDA_CUBLASLT_H
#define DSRT_CUDA_CUBLASLT_H

#include "cuda/GpuOps.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace dsrt::cuda {

// cuBLASLt opened with dlopen (DSRT_CUBLASLT, else the CUDA toolkit, the loader path and
// PyTorch's wheels: core/LibraryLoader.h); a CUDA context must be current.
class CublasLt {
public:
  static Status open(std::unique_ptr<CublasLt> &out);
  ~CublasLt();
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  // Enqueues gemm (GpuOps.h's GemmDesc) on `stream`.
  Status matmul(const GemmDesc &gemm, DevicePtr workspace, size_t workspaceBytes,
                StreamHandle stream);

  // Whether the heuristic has an algorithm for gemm with its epilogue (bias, activation):
  // not every type and alignment has one, and the caller then runs its own epilogue. The
  // answer is kept with the algorithm, which matmul then uses.
  bool takesEpilogue(const GemmDesc &gemm, size_t workspaceBytes);

  // Loads the library and resolves every symbol matmul needs, without creating a handle
  // (so it needs no GPU); `path` receives the library that was loaded.
  static Status probeLibrary(std::string &path);

  struct Api;  // the resolved entry points (CublasLt.cpp)
  struct Descriptors;  // one matmul's descriptors (CublasLt.cpp)

  CublasLt(const CublasLt &) = delete;
  CublasLt &operator=(const CublasLt &) = delete;

private:
  CublasLt() = default;

  // The heuristic's choice is the same for every call with the same problem, so it is
  // queried once per shape and type combination (cublasLtMatmulAlgo_t is 8 uint64).
  struct AlgoKey {
    int64_t m, n, k, ldc;
    int aType, bType;
    bool accumulate;
    size_t workspaceBytes;
    // The pointers' alignments: an algorithm chosen for aligned buffers may not run on
    // less aligned ones.
    uint32_t alignA, alignB, alignC;
    // The epilogue (cublasLtEpilogue_t), the bias's type and alignment (0 without one).
    int epilogue, biasType;
    uint32_t alignBias;
    bool operator<(const AlgoKey &other) const {
      return std::tie(m, n, k, ldc, aType, bType, accumulate, workspaceBytes, alignA, alignB,
                      alignC, epilogue, biasType, alignBias) <
             std::tie(other.m, other.n, other.k, other.ldc, other.aType, other.bType,
                      other.accumulate, other.workspaceBytes, other.alignA, other.alignB,
                      other.alignC, other.epilogue, other.biasType, other.alignBias);
    }
  };
  struct Algo {
    uint64_t data[8];
    bool found;  // false: the heuristic had none (kept, so that it is asked once)
  };

  // Describes gemm (its epilogue included) in `d` and finds its algorithm: the one kept
  // for its key, else the heuristic's first.
  Status prepare(const GemmDesc &gemm, size_t workspaceBytes, Descriptors &d, Algo &algo);

  void *library_ = nullptr;
  std::unique_ptr<Api> api_;
  void *handle_ = nullptr;  // cublasLtHandle_t
  std::mutex algosMutex_;  // sessions of one process may share the handle
  std::map<AlgoKey, Algo> algos_;
};

} // namespace dsrt::cuda

#endif

#include "cuda/CublasLt.h"

#include "core/LibraryLoader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dsrt::cuda {

// cuBLASLt's types and values, from cublasLt.h, cublas_api.h and library_types.h (CUDA 12
// and 13 agree on all of them), declared here so that the runtime builds without CUDA.
namespace lt {
using Status = int;  // cublasStatus_t
constexpr Status kSuccess = 0;
using Handle = void *;
using MatmulDesc = void *;
using MatrixLayout = void *;
using MatmulPreference = void *;
struct MatmulAlgo {
  uint64_t data[8];
};
struct HeuristicResult {
  MatmulAlgo algo;
  size_t workspaceSize;
  Status state;
  float wavesCount;
  int reserved[4];
};
// cudaDataType_t
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;
// cublasComputeType_t
constexpr int kCompute32F = 68;
// cublasOperation_t
constexpr int32_t kOpN = 0, kOpT = 1;
// cublasLtMatmulDescAttributes_t
constexpr int kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8,
              kDescBiasDataType = 26;
// cublasLtEpilogue_t
constexpr int32_t kEpilogueDefault = 1, kEpilogueRelu = 2, kEpilogueBias = 4,
                  kEpilogueGelu = 32;
// cublasLtMatmulPreferenceAttributes_t
constexpr int kPrefMaxWorkspaceBytes = 1, kPrefMinAlignmentA = 5, kPrefMinAlignmentB = 6,
              kPrefMinAlignmentC = 7, kPrefMinAlignmentD = 8;
} // namespace lt

static_assert(sizeof(lt::MatmulAlgo) == 64, "cublasLtMatmulAlgo_t is 8 uint64");

struct CublasLt::Api {
  lt::Status (*create)(lt::Handle *);
  lt::Status (*destroy)(lt::Handle);
  const char *(*statusString)(lt::Status);
  lt::Status (*descCreate)(lt::MatmulDesc *, int computeType, int scaleType);
  lt::Status (*descDestroy)(lt::MatmulDesc);
  lt::Status (*descSetAttribute)(lt::MatmulDesc, int attr, const void *buf, size_t bytes);
  lt::Status (*layoutCreate)(lt::MatrixLayout *, int type, uint64_t rows, uint64_t cols,
                             int64_t ld);
  lt::Status (*layoutDestroy)(lt::MatrixLayout);
  lt::Status (*preferenceCreate)(lt::MatmulPreference *);
  lt::Status (*preferenceDestroy)(lt::MatmulPreference);
  lt::Status (*preferenceSetAttribute)(lt::MatmulPreference, int attr, const void *buf,
                                       size_t bytes);
  lt::Status (*heuristic)(lt::Handle, lt::MatmulDesc, lt::MatrixLayout, lt::MatrixLayout,
                          lt::MatrixLayout, lt::MatrixLayout, lt::MatmulPreference,
                          int requested, lt::HeuristicResult *results, int *returned);
  lt::Status (*matmul)(lt::Handle, lt::MatmulDesc, const void *alpha, const void *a,
                       lt::MatrixLayout aDesc, const void *b, lt::MatrixLayout bDesc,
                       const void *beta, const void *c, lt::MatrixLayout cDesc, void *d,
                       lt::MatrixLayout dDesc, const lt::MatmulAlgo *algo, void *workspace,
                       size_t workspaceBytes, void *stream);
};

namespace {

template <typename Fn> bool resolve(void *library, const char *name, Fn &out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

// Opens the library and resolves every entry point; on failure closes what it opened.
Status loadLibrary(void *&library, CublasLt::Api &api, std::string &path) {
  // The shared search (core/LibraryLoader.h): DSRT_CUBLASLT, the toolkit, the loader path,
  // PyTorch's wheels.
  const LibrarySpec spec = cublasLtLibrary();
  LoadedLibrary found = findLibrary(spec);
  library = found.handle;
  if (!library)
    return Status::error(found.failure(spec));
  path = found.path;

  struct Entry {
    const char *name;
    bool found;
  };
  const Entry entries[] = {
      {"cublasLtCreate", resolve(library, "cublasLtCreate", api.create)},
      {"cublasLtDestroy", resolve(library, "cublasLtDestroy", api.destroy)},
      {"cublasLtGetStatusString", resolve(library, "cublasLtGetStatusString", api.statusString)},
      {"cublasLtMatmulDescCreate", resolve(library, "cublasLtMatmulDescCreate", api.descCreate)},
      {"cublasLtMatmulDescDestroy",
       resolve(library, "cublasLtMatmulDescDestroy", api.descDestroy)},
      {"cublasLtMatmulDescSetAttribute",
       resolve(library, "cublasLtMatmulDescSetAttribute", api.descSetAttribute)},
      {"cublasLtMatrixLayoutCreate",
       resolve(library, "cublasLtMatrixLayoutCreate", api.layoutCreate)},
      {"cublasLtMatrixLayoutDestroy",
       resolve(library, "cublasLtMatrixLayoutDestroy", api.layoutDestroy)},
      {"cublasLtMatmulPreferenceCreate",
       resolve(library, "cublasLtMatmulPreferenceCreate", api.preferenceCreate)},
      {"cublasLtMatmulPreferenceDestroy",
       resolve(library, "cublasLtMatmulPreferenceDestroy", api.preferenceDestroy)},
      {"cublasLtMatmulPreferenceSetAttribute",
       resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.preferenceSetAttribute)},
      {"cublasLtMatmulAlgoGetHeuristic",
       resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.heuristic)},
      {"cublasLtMatmul", resolve(library, "cublasLtMatmul", api.matmul)},
  };
  std::string missing;
  for (const Entry &entry : entries)
    if (!entry.found)
      missing += std::string(missing.empty() ? "" : ", ") + entry.name;
  if (!missing.empty()) {
    dlclose(library);
    library = nullptr;
    return Status::error("cuBLASLt library " + path + " lacks " + missing);
  }
  return Status::ok();
}

std::string statusName(const CublasLt::Api &api, lt::Status status) {
  const char *name = api.statusString ? api.statusString(status) : nullptr;
  return name ? std::string(name) : "cuBLAS status " + std::to_string(status);
}

bool dataType(DType dtype, int &out) {
  switch (dtype) {
  case DType::F32: out = lt::kR32F; return true;
  case DType::F16: out = lt::kR16F; return true;
  case DType::BF16: out = lt::kR16BF; return true;
  default: return false;
  }
}

// The largest power of two (up to cuBLASLt's default assumption, 256) dividing `pointer`.
uint32_t alignmentOf(DevicePtr pointer) {
  uint32_t alignment = 256;
  while (alignment > 1 && pointer % alignment != 0)
    alignment /= 2;
  return alignment;
}

// A cuBLASLt call's status as the runtime's, naming the call and the problem.
Status checked(const CublasLt::Api &api, const GemmDesc &gemm, lt::Status status,
               const char *what) {
  if (status == lt::kSuccess)
    return Status::ok();
  return Status::error(std::string("cuBLASLt ") + what + " failed for gemm m=" +
                       std::to_string(gemm.m) + " n=" + std::to_string(gemm.n) + " k=" +
                       std::to_string(gemm.k) + ": " + statusName(api, status));
}

// cuBLASLt's epilogue for gemm's bias and activation (cublasLtEpilogue_t: the bias bit
// or'ed with the activation's).
int32_t epilogueOf(const GemmDesc &gemm) {
  int32_t epilogue = gemm.bias ? lt::kEpilogueBias : 0;
  if (gemm.activation == GemmActivation::Relu)
    epilogue |= lt::kEpilogueRelu;
  else if (gemm.activation == GemmActivation::GeluTanh)
    epilogue |= lt::kEpilogueGelu;
  return epilogue ? epilogue : lt::kEpilogueDefault;
}

} // namespace

// Destroys the descriptors of one matmul whichever way it returns.
struct CublasLt::Descriptors {
  const CublasLt::Api &api;
  lt::MatmulDesc desc = nullptr;
  lt::MatrixLayout a = nullptr, b = nullptr, c = nullptr;
  lt::MatmulPreference preference = nullptr;
  explicit Descriptors(const CublasLt::Api &api) : api(api) {}
  ~Descriptors() {
    if (preference)
      api.preferenceDestroy(preference);
    if (c)
      api.layoutDestroy(c);
    if (b)
      api.layoutDestroy(b);
    if (a)
      api.layoutDestroy(a);
    if (desc)
      api.descDestroy(desc);
  }
};

Status CublasLt::probeLibrary(std::string &path) {
  void *library = nullptr;
  Api api{};
  DSRT_RETURN_IF_ERROR(loadLibrary(library, api, path));
  dlclose(library);
  return Status::ok();
}

Status CublasLt::open(std::unique_ptr<CublasLt> &out) {
  std::unique_ptr<CublasLt> blas(new CublasLt());
  blas->api_ = std::make_unique<Api>();
  std::string path;
  DSRT_RETURN_IF_ERROR(loadLibrary(blas->library_, *blas->api_, path));
  lt::Handle handle = nullptr;
  lt::Status status = blas->api_->create(&handle);
  if (status != lt::kSuccess)
    return Status::error("cublasLtCreate (" + path + ") failed: " +
                         statusName(*blas->api_, status));
  blas->handle_ = handle;
  out = std::move(blas);
  return Status::ok();
}

CublasLt::~CublasLt() {
  if (handle_ && api_)
    api_->destroy(handle_);
  if (library_)
    dlclose(library_);
}

Status CublasLt::matmul(const GemmDesc &gemm, DevicePtr workspace, size_t workspaceBytes,
                        StreamHandle stream) {
  const Api &api = *api_;
  auto check = [&](lt::Status status, const char *what) {
    return checked(api, gemm, status, what);
  };
  if (gemm.m < 0 || gemm.n < 0 || gemm.k < 0)
    return Status::error("cuBLASLt gemm with a negative size");
  if (gemm.m == 0 || gemm.n == 0)
    return Status::ok();
  const int64_t ldc = gemm.ldc ? gemm.ldc : gemm.n;
  if (ldc < gemm.n)
    return Status::error("cuBLASLt gemm: C's row stride " + std::to_string(ldc) +
                         " is less than its " + std::to_string(gemm.n) + " columns");
  if (gemm.k == 0) {
    if (gemm.accumulate && !gemm.hasEpilogue())
      return Status::ok();  // C += nothing
    return Status::error("cuBLASLt gemm with k = 0 (C would be zeros, or the epilogue's "
                         "alone) is not supported");
  }

  Descriptors d(api);
  if (workspace == 0)
    workspaceBytes = 0;
  Algo algo{};
  DSRT_RETURN_IF_ERROR(prepare(gemm, workspaceBytes, d, algo));
  if (!algo.found)
    return Status::error("cuBLASLt has no algorithm for gemm m=" + std::to_string(gemm.m) +
                         " n=" + std::to_string(gemm.n) + " k=" + std::to_string(gemm.k) +
                         " of " + dtypeName(gemm.bType) +
                         (gemm.hasEpilogue() ? " with its epilogue" : ""));
  const DevicePtr addend = gemm.accumulate ? gemm.addend : 0;

  const float alpha = 1.0f, beta = gemm.accumulate ? 1.0f : 0.0f;
  lt::MatmulAlgo chosen;
  std::memcpy(chosen.data, algo.data, sizeof chosen.data);
  void *c = reinterpret_cast<void *>(static_cast<uintptr_t>(gemm.c));
  const void *cIn = addend ? reinterpret_cast<const void *>(static_cast<uintptr_t>(addend)) : c;
  return check(api.matmul(handle_, d.desc, &alpha, reinterpret_cast<const void *>(gemm.b), d.a,
                          reinterpret_cast<const void *>(gemm.a), d.b, &beta, cIn, d.c, c, d.c,
                          &chosen, reinterpret_cast<void *>(static_cast<uintptr_t>(workspace)),
                          workspaceBytes, stream),
               "cublasLtMatmul");
}

bool CublasLt::takesEpilogue(const GemmDesc &gemm, size_t workspaceBytes) {
  if (gemm.m <= 0 || gemm.n <= 0 || gemm.k <= 0)
    return false;
  Descriptors d(*api_);
  Algo algo{};
  return prepare(gemm, workspaceBytes, d, algo).isOk() && algo.found;
}

Status CublasLt::prepare(const GemmDesc &gemm, size_t workspaceBytes, Descriptors &d,
                         Algo &algo) {
  const Api &api = *api_;
  auto check = [&](lt::Status status, const char *what) {
    return checked(api, gemm, status, what);
  };
  int aType = 0, bType = 0, biasType = 0;
  if (!dataType(gemm.aType, aType) || !dataType(gemm.bType, bType))
    return Status::error(std::string("cuBLASLt gemm of ") + dtypeName(gemm.aType) + " by " +
                         dtypeName(gemm.bType) + " is not supported");
  if (aType != bType)
    return Status::error(std::string("cuBLASLt multiplies equal types, not ") +
                         dtypeName(gemm.aType) + " by " + dtypeName(gemm.bType));
  if (gemm.bias && !dataType(gemm.biasType, biasType))
    return Status::error(std::string("cuBLASLt's bias must be a float vector, not ") +
                         dtypeName(gemm.biasType));
  const int64_t ldc = gemm.ldc ? gemm.ldc : gemm.n;

  // Row-major C[m, n] = A[m, k]·B[n, k]ᵀ is column-major Cᵀ[n, m] = (B[n, k])·(A[m, k])ᵀ,
  // where the column-major view of row-major B with leading dimension k is Bᵀ [k, n], and
  // of A is Aᵀ [k, m]. So cuBLASLt's first operand is B's memory, [k, n] ld k, transposed;
  // its second is A's memory, [k, m] ld k, as is; the result is [n, m] ld n. The bias, one
  // value per column of row-major C, is one per row of cuBLASLt's D, as it broadcasts it.
  DSRT_RETURN_IF_ERROR(check(api.descCreate(&d.desc, lt::kCompute32F, lt::kR32F),
                             "cublasLtMatmulDescCreate"));
  const int32_t transposed = lt::kOpT, asIs = lt::kOpN;
  DSRT_RETURN_IF_ERROR(check(api.descSetAttribute(d.desc, lt::kDescTransA, &transposed,
                                                  sizeof transposed),
                             "setting TRANSA"));
  DSRT_RETURN_IF_ERROR(
      check(api.descSetAttribute(d.desc, lt::kDescTransB, &asIs, sizeof asIs), "setting TRANSB"));
  const int32_t epilogue = epilogueOf(gemm);
  if (gemm.hasEpilogue()) {
    DSRT_RETURN_IF_ERROR(check(
        api.descSetAttribute(d.desc, lt::kDescEpilogue, &epilogue, sizeof epilogue),
        "setting the epilogue"));
    if (gemm.bias) {
      const void *bias = reinterpret_cast<const void *>(static_cast<uintptr_t>(gemm.bias));
      const int32_t biasDataType = biasType;
      DSRT_RETURN_IF_ERROR(check(
          api.descSetAttribute(d.desc, lt::kDescBiasPointer, &bias, sizeof bias),
          "setting the bias"));
      DSRT_RETURN_IF_ERROR(check(api.descSetAttribute(d.desc, lt::kDescBiasDataType,
                                                      &biasDataType, sizeof biasDataType),
                                 "setting the bias type"));
    }
  }
  uint64_t m = static_cast<uint64_t>(gemm.m), n = static_cast<uint64_t>(gemm.n),
           k = static_cast<uint64_t>(gemm.k);
  DSRT_RETURN_IF_ERROR(check(api.layoutCreate(&d.a, bType, k, n, gemm.k), "layout of B"));
  DSRT_RETURN_IF_ERROR(check(api.layoutCreate(&d.b, aType, k, m, gemm.k), "layout of A"));
  DSRT_RETURN_IF_ERROR(check(api.layoutCreate(&d.c, lt::kR32F, n, m, ldc), "layout of C"));

  // cuBLASLt's C, read before D is written: the addend, or D itself.
  const DevicePtr addend = gemm.accumulate ? gemm.addend : 0;
  AlgoKey key{gemm.m,
              gemm.n,
              gemm.k,
              ldc,
              aType,
              bType,
              gemm.accumulate,
              workspaceBytes,
              alignmentOf(gemm.b),  // cuBLASLt's A
              alignmentOf(gemm.a),  // cuBLASLt's B
              // C and D share one layout: the alignment both have.
              std::min(alignmentOf(gemm.c), addend ? alignmentOf(addend) : 256u),
              epilogue,
              gemm.bias ? biasType : -1,
              gemm.bias ? alignmentOf(gemm.bias) : 0u};
  {
    std::lock_guard<std::mutex> lock(algosMutex_);
    auto found = algos_.find(key);
    if (found != algos_.end()) {
      algo = found->second;
      return Status::ok();
    }
  }
  DSRT_RETURN_IF_ERROR(check(api.preferenceCreate(&d.preference), "preference create"));
  const uint64_t maxWorkspace = workspaceBytes;
  DSRT_RETURN_IF_ERROR(check(api.preferenceSetAttribute(d.preference, lt::kPrefMaxWorkspaceBytes,
                                                        &maxWorkspace, sizeof maxWorkspace),
                             "setting the workspace size"));
  const uint32_t alignments[4] = {key.alignA, key.alignB, key.alignC, key.alignC};
  const int alignmentAttrs[4] = {lt::kPrefMinAlignmentA, lt::kPrefMinAlignmentB,
                                 lt::kPrefMinAlignmentC, lt::kPrefMinAlignmentD};
  for (int i = 0; i < 4; ++i)
    DSRT_RETURN_IF_ERROR(check(api.preferenceSetAttribute(d.preference, alignmentAttrs[i],
                                                          &alignments[i], sizeof alignments[i]),
                               "setting an alignment"));
  lt::HeuristicResult result{};
  int returned = 0;
  const lt::Status status = api.heuristic(handle_, d.desc, d.a, d.b, d.c, d.c, d.preference, 1,
                                          &result, &returned);
  // An epilogue the library cannot run (a bias type it does not take beside f32 D) is a
  // refusal to keep, not an error; without one, a failing heuristic is.
  if (status != lt::kSuccess && !gemm.hasEpilogue())
    return check(status, "cublasLtMatmulAlgoGetHeuristic");
  algo.found = status == lt::kSuccess && returned >= 1 && result.state == lt::kSuccess;
  if (algo.found)
    std::memcpy(algo.data, result.algo.data, sizeof algo.data);
  std::lock_guard<std::mutex> lock(algosMutex_);
  algos_.emplace(key, algo);
  return Status::ok();
}

} // namespace dsrt::cuda

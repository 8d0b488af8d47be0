// NVRTC, opened with dlopen (docs/cuda-backend.md), so that dsc builds and runs where there
// is no CUDA toolkit and writes CPU-only plans there. Kernel sources may include
// "dsc_common.cuh", which is handed to NVRTC from the embedded templates: no include path.
//
// Compiled kernels are cached on disk by the hash of their source, options and NVRTC's
// version, under $DSC_CACHE_DIR (default ~/.cache/dsc/kernels). Entries are written to a
// temporary file and renamed into place, so processes compiling at once are safe.
// Plain C++17, no MLIR.
#ifndef DSC_CODEGEN_NVRTC_H
#define DSC_CODEGEN_NVRTC_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsc::codegen {

class Nvrtc {
public:
  // The process's NVRTC, loaded on first use (DSC_NVRTC alone when set, else the CUDA
  // toolkit, the loader path and PyTorch's wheels: runtime/src/core/LibraryLoader.h); null,
  // with `error` saying what was tried, when none can be loaded.
  static Nvrtc *instance(std::string &error);

  ~Nvrtc();
  Nvrtc(const Nvrtc &) = delete;
  Nvrtc &operator=(const Nvrtc &) = delete;

  // "13.0".
  const std::string &version() const { return version_; }

  // Compiles `source` for `arch`: a virtual architecture ("compute_80") gives PTX text, a
  // real one ("sm_80") a cubin, in `output`. `name` is the program's name in diagnostics.
  // On failure `error` holds NVRTC's status and its log. Not cached.
  bool compile(const std::string &source, const std::string &name, const std::string &arch,
               std::string &output, std::string &error) const;

  // The options compile() passes for `arch` (they are part of the cache key).
  static std::vector<std::string> options(const std::string &arch);

  struct Api;

private:
  Nvrtc(void *library, std::unique_ptr<Api> api, std::string version);

  void *library_;
  std::unique_ptr<Api> api_;
  std::string version_;
};

// A kernel's PTX for `ptxArch` and a cubin per real architecture.
struct CompiledKernel {
  std::string ptx;
  std::vector<std::pair<std::string, std::string>> binaries;  // arch, cubin bytes
};

// compile() for `ptxArch` and each of `archs`, each result through the on-disk cache.
bool compileKernelCached(const Nvrtc &nvrtc, const std::string &source,
                         const std::string &name, const std::string &ptxArch,
                         const std::vector<std::string> &archs, CompiledKernel &compiled,
                         std::string &error);

// Where the cache lives: $DSC_CACHE_DIR, else ~/.cache/dsc/kernels.
std::string kernelCacheDirectory();

} // namespace dsc::codegen

#endif

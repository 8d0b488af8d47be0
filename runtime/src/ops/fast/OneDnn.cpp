#include "ops/fast/OneDnn.h"

#include "core/LibraryLoader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace dsrt::ops::fast {

const OneDnn &oneDnn() {
  static OneDnn loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *env = std::getenv("DSRT_DNNL");
    if (env && std::string(env) == "none")
      return;
    LibrarySpec spec{"oneDNN", "DSRT_DNNL", {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"},
                     false, {}, false};
    LoadedLibrary library = findLibrary(spec, [](void *handle) -> std::string {
      return dlsym(handle, "dnnl_sgemm") ? "" : "lacks dnnl_sgemm";
    });
    if (!library.handle)
      return;
    loaded.sgemm = reinterpret_cast<SgemmFn>(dlsym(library.handle, "dnnl_sgemm"));
    loaded.gemmBf16 =
        reinterpret_cast<GemmBf16Fn>(dlsym(library.handle, "dnnl_gemm_bf16bf16f32"));
    loaded.ompMaxThreads =
        reinterpret_cast<int (*)()>(dlsym(library.handle, "omp_get_max_threads"));
    loaded.ompSetThreads =
        reinterpret_cast<void (*)(int)>(dlsym(library.handle, "omp_set_num_threads"));
    // oneDNN's bf16 GEMM needs AVX-512: on AVX2 (AMD's Zen 2) Debian's 2.6 answers
    // dnnl_unimplemented and writes nothing, which DSRT_PREFILL_GEMM=bf16 took for results.
    // Asked once, on 1 x 1: without it the prompts stay in f32.
    const uint16_t bf16One = 0x3F80;
    float product = 0.0f;
    if (loaded.gemmBf16 && (loaded.gemmBf16('N', 'T', 1, 1, 1, 1.0f, &bf16One, 1, &bf16One, 1,
                                            0.0f, &product, 1) != 0 ||
                            product != 1.0f))
      loaded.gemmBf16 = nullptr;
  });
  return loaded;
}

namespace {
// OpenMP held to one thread for one call: the pool already runs one call per thread, so
// oneDNN must not start a team of its own inside.
class OneOmpThread {
public:
  explicit OneOmpThread(const OneDnn &dnn)
      : dnn_(dnn), saved_(dnn.ompMaxThreads && dnn.ompSetThreads ? dnn.ompMaxThreads() : 1) {
    if (saved_ != 1)
      dnn_.ompSetThreads(1);
  }
  ~OneOmpThread() {
    if (saved_ != 1)
      dnn_.ompSetThreads(saved_);
  }
  OneOmpThread(const OneOmpThread &) = delete;
  OneOmpThread &operator=(const OneOmpThread &) = delete;

private:
  const OneDnn &dnn_;
  int saved_;
};
} // namespace

void sgemmNT(const OneDnn &dnn, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
             const float *b, int64_t ldb, float *c, int64_t ldc) {
  OneOmpThread single(dnn);
  dnn.sgemm('N', 'T', M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

void gemmBf16NT(const OneDnn &dnn, int64_t M, int64_t N, int64_t K, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
  OneOmpThread single(dnn);
  dnn.gemmBf16('N', 'T', M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

} // namespace dsrt::ops::fast

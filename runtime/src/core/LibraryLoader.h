// Where libdsrt and dsc find the GPU libraries they open with dlopen (libcuda, cuBLASLt,
// NCCL, NVRTC): one search order for all four (docs/cuda-backend.md, "Finding the
// libraries"):
//   1. the library's environment variable (a full path): when set, the only candidate, so
//      that a wrong path is an error naming it, not a silent fallback to another copy;
//   2. the CUDA toolkit: $CUDA_HOME, else $CUDA_PATH, else /usr/local/cuda; lib64 and
//      targets/<arch>-linux/lib (not for libcuda: the toolkit has only a stub of it);
//   3. the loader path: the plain sonames (LD_LIBRARY_PATH, ldconfig's cache, RUNPATH);
//   4. PyTorch's wheels: <site-packages>/nvidia/<pkg>/lib of the active virtualenv and of
//      every python3* under /usr/local/lib(64) and /usr/lib(64) (globbed; no Python run).
// A library whose path has a `stubs` directory is never taken as the CUDA driver.
#ifndef DSRT_CORE_LIBRARYLOADER_H
#define DSRT_CORE_LIBRARYLOADER_H

#include <functional>
#include <string>
#include <vector>

namespace dsrt {

struct LibrarySpec {
  std::string label;               // "cuBLASLt", in messages
  std::string environment;         // "DSRT_CUBLASLT"
  std::vector<std::string> names;  // sonames, preferred first: "libcublasLt.so.13", ...
  bool inToolkit = true;           // false: the toolkit step is skipped (libcuda)
  std::vector<std::string> wheelDirs;  // under site-packages: "nvidia/cu13/lib", ...
  bool refuseStubs = false;        // libcuda: a path with a "stubs" directory is refused
};

// The four libraries' searches.
LibrarySpec cudaDriverLibrary();  // DSRT_LIBCUDA, libcuda.so.1, libcuda.so
LibrarySpec cublasLtLibrary();    // DSRT_CUBLASLT, libcublasLt.so.13, .so.12, .so
LibrarySpec ncclLibrary();        // DSRT_NCCL, libnccl.so.2, libnccl.so
LibrarySpec nvrtcLibrary();       // DSC_NVRTC, libnvrtc.so.13, .so.12, .so

// Where steps 2 and 4 look; fromEnvironment() is what the libraries use, tests give their own.
struct SearchRoots {
  std::string toolkit;                    // "" skips the toolkit
  std::vector<std::string> sitePackages;  // existing site-/dist-packages directories
  static SearchRoots fromEnvironment();
};

struct LibraryCandidate {
  std::string path;    // what dlopen is given: a full path, or a soname (the loader path)
  std::string origin;  // "DSRT_CUBLASLT", "CUDA toolkit", "loader path", "PyTorch wheel"
};

// The candidates in search order (the wheel directories only where they exist).
std::vector<LibraryCandidate> libraryCandidates(const LibrarySpec &spec,
                                                const SearchRoots &roots);

struct LoadedLibrary {
  void *handle = nullptr;           // null when nothing could be loaded; never closed
  std::string path;                 // the candidate that was loaded, as given to dlopen
  std::string resolved;             // the file the loader opened (its link map's name)
  std::string origin;               // the candidate's origin
  std::vector<std::string> tried;   // "place: why not", one per candidate refused
  // "libcublasLt.so.13 (/usr/lib/x86_64-linux-gnu/libcublasLt.so.13)", or the path alone.
  std::string describe() const;
  // "not found (tried: a: why; b: why)".
  std::string notFound() const;
  // "cannot load cuBLASLt (libcublasLt) (set DSRT_CUBLASLT to its full path): not found
  // (tried: ...)", one line.
  std::string failure(const LibrarySpec &spec) const;
};

// Opens the first candidate that loads (RTLD_NOW | RTLD_LOCAL) and that `accept` takes
// (it returns "" or why not, e.g. "lacks cublasLtMatmul"; a refused library is closed).
using AcceptLibrary = std::function<std::string(void *handle)>;
LoadedLibrary findLibrary(const LibrarySpec &spec, const SearchRoots &roots,
                          const AcceptLibrary &accept = {});
inline LoadedLibrary findLibrary(const LibrarySpec &spec, const AcceptLibrary &accept = {}) {
  return findLibrary(spec, SearchRoots::fromEnvironment(), accept);
}

} // namespace dsrt

#endif

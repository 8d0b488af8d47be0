#include "core/LibraryLoader.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

namespace dsrt {
namespace {

#if defined(__aarch64__)
constexpr const char *kTargetLib = "/targets/sbsa-linux/lib";
#else
constexpr const char *kTargetLib = "/targets/x86_64-linux/lib";
#endif

std::string environment(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool exists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// Whether `path` has a directory named "stubs" (the toolkit's lib64/stubs).
bool inStubs(const std::string &path) {
  size_t at = 0;
  while ((at = path.find("stubs", at)) != std::string::npos) {
    bool starts = at == 0 || path[at - 1] == '/';
    bool ends = at + 5 < path.size() && path[at + 5] == '/';
    if (starts && ends)
      return true;
    at += 5;
  }
  return false;
}

void globInto(const std::string &pattern, std::vector<std::string> &out) {
  glob_t found{};
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i)
      if (isDirectory(found.gl_pathv[i]) &&
          std::find(out.begin(), out.end(), found.gl_pathv[i]) == out.end())
        out.push_back(found.gl_pathv[i]);
  ::globfree(&found);
}

} // namespace

LibrarySpec cudaDriverLibrary() {
  LibrarySpec spec;
  spec.label = "the CUDA driver library (libcuda)";
  spec.environment = "DSRT_LIBCUDA";
  spec.names = {"libcuda.so.1", "libcuda.so"};
  spec.inToolkit = false;
  spec.refuseStubs = true;
  return spec;
}

LibrarySpec cublasLtLibrary() {
  LibrarySpec spec;
  spec.label = "cuBLASLt (libcublasLt)";
  spec.environment = "DSRT_CUBLASLT";
  spec.names = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  spec.wheelDirs = {"nvidia/cu13/lib", "nvidia/cublas/lib"};
  return spec;
}

LibrarySpec ncclLibrary() {
  LibrarySpec spec;
  spec.label = "NCCL (libnccl)";
  spec.environment = "DSRT_NCCL";
  spec.names = {"libnccl.so.2", "libnccl.so"};
  spec.wheelDirs = {"nvidia/nccl/lib", "nvidia/cu13/lib"};
  return spec;
}

LibrarySpec nvrtcLibrary() {
  LibrarySpec spec;
  spec.label = "NVRTC (libnvrtc)";
  spec.environment = "DSC_NVRTC";
  spec.names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  spec.wheelDirs = {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"};
  return spec;
}

SearchRoots SearchRoots::fromEnvironment() {
  SearchRoots roots;
  roots.toolkit = environment("CUDA_HOME");
  if (roots.toolkit.empty())
    roots.toolkit = environment("CUDA_PATH");
  if (roots.toolkit.empty())
    roots.toolkit = "/usr/local/cuda";
  // The active virtualenv first, then the system's interpreters, /usr/local before /usr.
  std::vector<std::string> prefixes;
  if (std::string venv = environment("VIRTUAL_ENV"); !venv.empty())
    prefixes = {venv + "/lib", venv + "/lib64"};
  for (const char *prefix : {"/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64"})
    prefixes.push_back(prefix);
  for (const std::string &prefix : prefixes)
    for (const char *kind : {"site-packages", "dist-packages"})
      globInto(prefix + "/python3*/" + kind, roots.sitePackages);
  return roots;
}

std::vector<LibraryCandidate> libraryCandidates(const LibrarySpec &spec,
                                                const SearchRoots &roots) {
  if (std::string path = environment(spec.environment.c_str()); !path.empty())
    return {{path, spec.environment}};
  std::vector<LibraryCandidate> candidates;
  if (spec.inToolkit && !roots.toolkit.empty())
    for (const std::string &directory : {roots.toolkit + "/lib64", roots.toolkit + kTargetLib})
      for (const std::string &name : spec.names)
        candidates.push_back({directory + "/" + name, "CUDA toolkit"});
  for (const std::string &name : spec.names)
    candidates.push_back({name, "loader path"});
  for (const std::string &site : roots.sitePackages)
    for (const std::string &wheel : spec.wheelDirs)
      if (std::string directory = site + "/" + wheel; isDirectory(directory))
        for (const std::string &name : spec.names)
          candidates.push_back({directory + "/" + name, "PyTorch wheel"});
  return candidates;
}

std::string LoadedLibrary::describe() const {
  if (!handle)
    return notFound();
  return resolved.empty() || resolved == path ? path : path + " (" + resolved + ")";
}

std::string LoadedLibrary::notFound() const {
  std::string text = "not found (tried: ";
  for (size_t i = 0; i < tried.size(); ++i)
    text += (i ? "; " : "") + tried[i];
  return text + ")";
}

std::string LoadedLibrary::failure(const LibrarySpec &spec) const {
  return "cannot load " + spec.label + " (set " + spec.environment + " to its full path): " +
         notFound();
}

LoadedLibrary findLibrary(const LibrarySpec &spec, const SearchRoots &roots,
                          const AcceptLibrary &accept) {
  LoadedLibrary result;
  std::vector<LibraryCandidate> candidates = libraryCandidates(spec, roots);
  std::vector<std::string> missing;  // toolkit and wheel files that are not there
  auto flushMissing = [&] {
    if (!missing.empty()) {
      std::string text;
      for (const std::string &path : missing)
        text += (text.empty() ? "" : ", ") + path;
      result.tried.push_back(text + ": no such file");
      missing.clear();
    }
  };
  for (const LibraryCandidate &candidate : candidates) {
    const bool explicitPath = candidate.origin == spec.environment;
    const bool file = candidate.path.find('/') != std::string::npos;
    const std::string place = explicitPath ? spec.environment + "=" + candidate.path
                                           : candidate.origin == "loader path"
                                                 ? candidate.path + " (loader path)"
                                                 : candidate.path;
    if (file && !explicitPath && !exists(candidate.path)) {
      missing.push_back(candidate.path);
      continue;
    }
    flushMissing();
    if (spec.refuseStubs && inStubs(candidate.path)) {
      result.tried.push_back(place + ": the toolkit's stub, not the driver");
      continue;
    }
    dlerror();
    void *handle = dlopen(candidate.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *error = dlerror();
      std::string why = error ? error : "cannot be opened";
      // dlerror repeats the name: "libx.so: cannot open shared object file: ...".
      if (why.rfind(candidate.path + ": ", 0) == 0)
        why = why.substr(candidate.path.size() + 2);
      result.tried.push_back(place + ": " + why);
      continue;
    }
    std::string resolved;
    struct link_map *map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
      resolved = map->l_name;
    if (spec.refuseStubs && inStubs(resolved)) {
      dlclose(handle);
      result.tried.push_back(place + ": " + resolved + " is the toolkit's stub, not the driver");
      continue;
    }
    if (accept) {
      std::string why = accept(handle);
      if (!why.empty()) {
        dlclose(handle);
        result.tried.push_back(place + ": " + why);
        continue;
      }
    }
    result.handle = handle;
    result.path = candidate.path;
    result.resolved = resolved;
    result.origin = candidate.origin;
    return result;
  }
  flushMissing();
  bool wheels = std::any_of(candidates.begin(), candidates.end(), [](const LibraryCandidate &c) {
    return c.origin == "PyTorch wheel";
  });
  if (!spec.wheelDirs.empty() && !wheels && candidates.size() && candidates[0].origin !=
                                                                     spec.environment) {
    std::string dirs, sites;
    for (const std::string &wheel : spec.wheelDirs)
      dirs += (dirs.empty() ? "" : " or ") + wheel;
    for (const std::string &site : roots.sitePackages)
      sites += (sites.empty() ? "" : ", ") + site;
    result.tried.push_back("PyTorch wheels: no " + dirs + " in " +
                           (sites.empty() ? std::string("any site-packages") : sites));
  }
  return result;
}

} // namespace dsrt

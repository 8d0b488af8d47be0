#include "codegen/Nvrtc.h"

#include "codegen/kernels/KernelRules.h"
#include "core/LibraryLoader.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc::codegen {

// The few NVRTC entry points dsc uses, declared by hand (nvrtc.h's signatures) so that no
// CUDA header is needed to build.
struct Nvrtc::Api {
  using Result = int;  // nvrtcResult; 0 is NVRTC_SUCCESS
  using Program = void *;
  const char *(*getErrorString)(Result) = nullptr;
  Result (*version)(int *, int *) = nullptr;
  Result (*createProgram)(Program *, const char *, const char *, int, const char *const *,
                          const char *const *) = nullptr;
  Result (*destroyProgram)(Program *) = nullptr;
  Result (*compileProgram)(Program, int, const char *const *) = nullptr;
  Result (*getPTXSize)(Program, size_t *) = nullptr;
  Result (*getPTX)(Program, char *) = nullptr;
  Result (*getCUBINSize)(Program, size_t *) = nullptr;
  Result (*getCUBIN)(Program, char *) = nullptr;
  Result (*getProgramLogSize)(Program, size_t *) = nullptr;
  Result (*getProgramLog)(Program, char *) = nullptr;
};

namespace {

template <typename Fn> bool bind(void *library, const char *symbol, Fn &fn, std::string &missing) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (!fn)
    missing = symbol;
  return fn != nullptr;
}

bool isVirtualArch(const std::string &arch) { return arch.rfind("compute_", 0) == 0; }

} // namespace

Nvrtc::Nvrtc(void *library, std::unique_ptr<Api> api, std::string version)
    : library_(library), api_(std::move(api)), version_(std::move(version)) {}

// The library stays loaded for the process's lifetime: NVRTC keeps state that outlives
// its programs, and the instance is a process-wide singleton.
Nvrtc::~Nvrtc() = default;

Nvrtc *Nvrtc::instance(std::string &error) {
  struct Loaded {
    std::unique_ptr<Nvrtc> nvrtc;
    std::string error;
  };
  static const Loaded loaded = [] {
    Loaded result;
    // The shared search (runtime/src/core/LibraryLoader.h): DSC_NVRTC, the CUDA toolkit,
    // the loader path, PyTorch's wheels; a library without every entry point is passed over.
    auto api = std::make_unique<Api>();
    std::string version;
    const dsrt::LibrarySpec spec = dsrt::nvrtcLibrary();
    dsrt::LoadedLibrary found = dsrt::findLibrary(spec, [&](void *library) -> std::string {
      *api = Api{};
      std::string missing;
      bool complete = bind(library, "nvrtcGetErrorString", api->getErrorString, missing) &&
                      bind(library, "nvrtcVersion", api->version, missing) &&
                      bind(library, "nvrtcCreateProgram", api->createProgram, missing) &&
                      bind(library, "nvrtcDestroyProgram", api->destroyProgram, missing) &&
                      bind(library, "nvrtcCompileProgram", api->compileProgram, missing) &&
                      bind(library, "nvrtcGetPTXSize", api->getPTXSize, missing) &&
                      bind(library, "nvrtcGetPTX", api->getPTX, missing) &&
                      bind(library, "nvrtcGetCUBINSize", api->getCUBINSize, missing) &&
                      bind(library, "nvrtcGetCUBIN", api->getCUBIN, missing) &&
                      bind(library, "nvrtcGetProgramLogSize", api->getProgramLogSize, missing) &&
                      bind(library, "nvrtcGetProgramLog", api->getProgramLog, missing);
      if (!complete)
        return "lacks " + missing;
      int major = 0, minor = 0;
      if (api->version(&major, &minor) != 0)
        return "nvrtcVersion failed";
      version = std::to_string(major) + "." + std::to_string(minor);
      return "";
    });
    if (!found.handle) {
      result.error = found.failure(spec);
      return result;
    }
    result.nvrtc.reset(new Nvrtc(found.handle, std::move(api), version));
    return result;
  }();
  if (!loaded.nvrtc)
    error = loaded.error;
  return loaded.nvrtc.get();
}

std::vector<std::string> Nvrtc::options(const std::string &arch) {
  // No --use_fast_math: the kernels' numbers must stay close to the CPU reference's.
  return {"--gpu-architecture=" + arch, "--std=c++17", "-default-device"};
}

bool Nvrtc::compile(const std::string &source, const std::string &name,
                    const std::string &arch, std::string &output, std::string &error) const {
  const Api &api = *api_;
  auto failed = [&](const char *call, Api::Result status) {
    error = name + ": " + call + " failed: " + api.getErrorString(status);
    return false;
  };
  const char *common = kernelTemplateSource("dsc_common");
  if (!common) {
    error = "the embedded templates lack dsc_common.cuh";
    return false;
  }
  const char *headers[] = {common};
  const char *includeNames[] = {"dsc_common.cuh"};
  Api::Program program = nullptr;
  std::string programName = name + ".cu";
  if (Api::Result status = api.createProgram(&program, source.c_str(), programName.c_str(), 1,
                                             headers, includeNames))
    return failed("nvrtcCreateProgram", status);

  std::vector<std::string> optionStrings = options(arch);
  std::vector<const char *> optionPointers;
  for (const std::string &option : optionStrings)
    optionPointers.push_back(option.c_str());
  Api::Result status = api.compileProgram(program, static_cast<int>(optionPointers.size()),
                                          optionPointers.data());
  bool ok = status == 0;
  if (!ok) {
    std::string log;
    size_t logSize = 0;
    if (api.getProgramLogSize(program, &logSize) == 0 && logSize > 1) {
      log.resize(logSize);
      if (api.getProgramLog(program, log.data()) != 0)
        log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
        log.pop_back();
    }
    error = name + " (" + arch + "): nvrtcCompileProgram failed: " +
            api.getErrorString(status) + (log.empty() ? "" : "\n" + log);
  } else {
    bool ptx = isVirtualArch(arch);
    size_t size = 0;
    Api::Result got = ptx ? api.getPTXSize(program, &size) : api.getCUBINSize(program, &size);
    if (got == 0) {
      output.assign(size, '\0');
      got = ptx ? api.getPTX(program, output.data()) : api.getCUBIN(program, output.data());
    }
    if (got != 0) {
      ok = failed(ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", got);
    } else if (ptx) {
      // The PTX size counts its terminating NUL; the plan stores the text.
      while (!output.empty() && output.back() == '\0')
        output.pop_back();
    }
  }
  api.destroyProgram(&program);
  return ok;
}

std::string kernelCacheDirectory() {
  if (const char *dir = std::getenv("DSC_CACHE_DIR"); dir && *dir)
    return dir;
  const char *home = std::getenv("HOME");
  if (!home || !*home) {
    if (const passwd *entry = getpwuid(getuid()))
      home = entry->pw_dir;
  }
  if (home && *home)
    return std::string(home) + "/.cache/dsc/kernels";
  return "/tmp/dsc-kernels-" + std::to_string(getuid());
}

namespace {

// mkdir -p; false when the folder cannot be made (the cache is then skipped).
bool makeDirectories(const std::string &path) {
  std::string partial;
  size_t position = 0;
  while (position != std::string::npos) {
    position = path.find('/', position + 1);
    partial = path.substr(0, position);
    if (partial.empty())
      continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
  }
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool readWholeFile(const std::string &path, std::string &contents) {
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return false;
  contents.clear();
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0)
    contents.append(buffer, got);
  bool ok = !std::ferror(file);
  std::fclose(file);
  return ok && !contents.empty();
}

// Writes to a unique temporary file beside `path` and renames it into place: readers see
// the whole entry or none. Failures only cost a later recompilation.
void writeAtomically(const std::string &path, const std::string &contents) {
  std::string temporary = path + ".tmp.XXXXXX";
  int fd = mkstemp(temporary.data());
  if (fd < 0)
    return;
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    written += static_cast<size_t>(n);
  }
  bool ok = written == contents.size();
  ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(temporary.c_str(), path.c_str()) != 0)
    std::remove(temporary.c_str());
}

std::string cacheKey(const Nvrtc &nvrtc, const std::string &source, const std::string &name,
                     const std::string &arch) {
  std::string keyed = "dsc-kernel-cache-1\n" + nvrtc.version() + "\n" + name + "\n";
  for (const std::string &option : Nvrtc::options(arch))
    keyed += option + "\n";
  // The common header is part of every program's source.
  if (const char *common = kernelTemplateSource("dsc_common"))
    keyed += common;
  keyed += "\n";
  keyed += source;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(keyed.data(), keyed.size())));
  return hex;
}

bool compileOneCached(const Nvrtc &nvrtc, const std::string &directory, bool useCache,
                      const std::string &source, const std::string &name,
                      const std::string &arch, std::string &output, std::string &error) {
  std::string path;
  if (useCache) {
    path = directory + "/" + name + "-" + cacheKey(nvrtc, source, name, arch) + "." + arch +
           (isVirtualArch(arch) ? ".ptx" : ".cubin");
    if (readWholeFile(path, output))
      return true;
  }
  if (!nvrtc.compile(source, name, arch, output, error))
    return false;
  if (useCache)
    writeAtomically(path, output);
  return true;
}

} // namespace

bool compileKernelCached(const Nvrtc &nvrtc, const std::string &source,
                         const std::string &name, const std::string &ptxArch,
                         const std::vector<std::string> &archs, CompiledKernel &compiled,
                         std::string &error) {
  std::string directory = kernelCacheDirectory();
  bool useCache = makeDirectories(directory);
  compiled = {};
  if (!compileOneCached(nvrtc, directory, useCache, source, name, ptxArch, compiled.ptx, error))
    return false;
  for (const std::string &arch : archs) {
    std::string cubin;
    if (!compileOneCached(nvrtc, directory, useCache, source, name, arch, cubin, error))
      return false;
    compiled.binaries.push_back({arch, std::move(cubin)});
  }
  return true;
}

} // namespace dsc::codegen

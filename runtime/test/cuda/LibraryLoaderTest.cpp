// The search order of the GPU libraries (core/LibraryLoader.h) over copies of a tiny shared
// library (FakeGpuLibrary.c) laid out in temporary folders as a CUDA toolkit, PyTorch's
// wheels and an explicit path: which copy is picked, that a failure names every place tried,
// and that the toolkit's libcuda stub is never taken for the driver. Each test runs in its
// own process (gtest_discover_tests), so setenv does not leak between them.
#include "core/LibraryLoader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace dsrt::test {
namespace {

namespace fs = std::filesystem;

#if defined(__aarch64__)
const char *kTargetLib = "targets/sbsa-linux/lib";
#else
const char *kTargetLib = "targets/x86_64-linux/lib";
#endif

const char *kVariable = "DSRT_TEST_FAKE_LIBRARY";

// A library that exists nowhere on the system: only the copies the test makes.
LibrarySpec fakeSpec() {
  LibrarySpec spec;
  spec.label = "the fake library";
  spec.environment = kVariable;
  spec.names = {"libdsrtfake.so.2", "libdsrtfake.so"};
  spec.wheelDirs = {"nvidia/cu13/lib", "nvidia/fake/lib"};
  return spec;
}

class LibraryLoaderTest : public ::testing::Test {
protected:
  void SetUp() override {
    unsetenv(kVariable);
    std::string pattern = (fs::temp_directory_path() / "dsrt-loader-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    toolkit_ = root_ + "/toolkit";
    site_ = root_ + "/venv/lib/python3.99/site-packages";
    fs::create_directories(toolkit_ + "/lib64");
    fs::create_directories(toolkit_ + "/" + kTargetLib);
    fs::create_directories(site_);
    roots_.toolkit = toolkit_;
    roots_.sitePackages = {site_};
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  // Copies the fake library to `path` (folders made as needed); returns `path`.
  std::string place(const std::string &path) {
    fs::create_directories(fs::path(path).parent_path());
    // The GPU sweep runs this binary away from its build tree (scripts/gpu-bundle.sh), with
    // the library beside it named by DSRT_TEST_FAKE_GPU_LIBRARY.
    const char *carried = std::getenv("DSRT_TEST_FAKE_GPU_LIBRARY");
    fs::copy_file(carried && *carried ? carried : DSRT_FAKE_GPU_LIBRARY, path,
                  fs::copy_options::overwrite_existing);
    return path;
  }

  static bool mentions(const LoadedLibrary &found, const std::string &text) {
    return std::any_of(found.tried.begin(), found.tried.end(), [&](const std::string &line) {
      return line.find(text) != std::string::npos;
    });
  }

  std::string root_, toolkit_, site_;
  SearchRoots roots_;
};

TEST_F(LibraryLoaderTest, EnvironmentVariableComesFirst) {
  place(toolkit_ + "/lib64/libdsrtfake.so.2");
  place(site_ + "/nvidia/fake/lib/libdsrtfake.so.2");
  std::string explicitPath = place(root_ + "/elsewhere/libdsrtfake-custom.so");
  setenv(kVariable, explicitPath.c_str(), 1);
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, explicitPath);
  EXPECT_EQ(found.origin, kVariable);
}

TEST_F(LibraryLoaderTest, WrongEnvironmentPathIsAnErrorNotAFallback) {
  place(toolkit_ + "/lib64/libdsrtfake.so.2");
  setenv(kVariable, "/nonexistent/libdsrtfake.so.2", 1);
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  EXPECT_EQ(found.handle, nullptr);
  ASSERT_EQ(found.tried.size(), 1u) << found.notFound();
  std::string message = found.failure(fakeSpec());
  EXPECT_NE(message.find("the fake library"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string(kVariable) + "=/nonexistent/libdsrtfake.so.2"),
            std::string::npos)
      << message;
}

TEST_F(LibraryLoaderTest, ToolkitBeforeWheels) {
  place(site_ + "/nvidia/cu13/lib/libdsrtfake.so.2");
  // The unversioned name in lib64 still beats the wheel: the toolkit is searched first.
  std::string inToolkit = place(toolkit_ + "/lib64/libdsrtfake.so");
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, inToolkit);
  EXPECT_EQ(found.origin, "CUDA toolkit");
}

TEST_F(LibraryLoaderTest, ToolkitTargetsDirectory) {
  std::string inTargets = place(toolkit_ + "/" + kTargetLib + "/libdsrtfake.so.2");
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, inTargets);
}

TEST_F(LibraryLoaderTest, WheelsLast) {
  std::string perPackage = place(site_ + "/nvidia/fake/lib/libdsrtfake.so.2");
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, perPackage);
  EXPECT_EQ(found.origin, "PyTorch wheel");
  // The loader path was tried (and failed) before the wheel.
  EXPECT_TRUE(mentions(found, "libdsrtfake.so.2 (loader path)")) << found.notFound();
}

TEST_F(LibraryLoaderTest, Cu13WheelLayoutBeforePerPackage) {
  place(site_ + "/nvidia/fake/lib/libdsrtfake.so.2");
  std::string cu13 = place(site_ + "/nvidia/cu13/lib/libdsrtfake.so.2");
  LoadedLibrary found = findLibrary(fakeSpec(), roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, cu13);
}

// The loader path sits between the toolkit and the wheels. A soname every machine has
// (libm.so.6) stands in for a library found there.
TEST_F(LibraryLoaderTest, LoaderPathBetweenToolkitAndWheels) {
  LibrarySpec spec = fakeSpec();
  spec.names = {"libm.so.6"};
  place(site_ + "/nvidia/fake/lib/libm.so.6");
  LoadedLibrary found = findLibrary(spec, roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, "libm.so.6");
  EXPECT_EQ(found.origin, "loader path");
  EXPECT_NE(found.describe().find("libm.so.6"), std::string::npos) << found.describe();

  std::string inToolkit = place(toolkit_ + "/lib64/libm.so.6");
  found = findLibrary(spec, roots_);
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, inToolkit);
}

TEST_F(LibraryLoaderTest, FailureNamesEveryPlaceTried) {
  fs::create_directories(site_ + "/nvidia/fake/lib");  // a wheel folder without the library
  LibrarySpec spec = fakeSpec();
  LoadedLibrary found = findLibrary(spec, roots_);
  ASSERT_EQ(found.handle, nullptr);
  std::string message = found.failure(spec);
  EXPECT_NE(message.find("the fake library"), std::string::npos) << message;
  EXPECT_NE(message.find(kVariable), std::string::npos) << message;
  for (const std::string &name : spec.names) {
    EXPECT_NE(message.find(toolkit_ + "/lib64/" + name), std::string::npos) << message;
    EXPECT_NE(message.find(toolkit_ + "/" + kTargetLib + "/" + name), std::string::npos)
        << message;
    EXPECT_NE(message.find(name + " (loader path)"), std::string::npos) << message;
    EXPECT_NE(message.find(site_ + "/nvidia/fake/lib/" + name), std::string::npos) << message;
  }
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  EXPECT_EQ(found.notFound().rfind("not found (tried: ", 0), 0u) << found.notFound();

  // With no wheel folder at all, the message says which site-packages were searched.
  fs::remove_all(site_ + "/nvidia");
  found = findLibrary(spec, roots_);
  ASSERT_EQ(found.handle, nullptr);
  EXPECT_TRUE(mentions(found, "PyTorch wheels: no nvidia/cu13/lib or nvidia/fake/lib in " +
                                  site_))
      << found.notFound();
}

TEST_F(LibraryLoaderTest, RefusedLibraryIsPassedOver) {
  std::string first = place(toolkit_ + "/lib64/libdsrtfake.so.2");
  std::string second = place(site_ + "/nvidia/fake/lib/libdsrtfake.so.2");
  int calls = 0;
  LoadedLibrary found = findLibrary(fakeSpec(), roots_, [&](void *) -> std::string {
    return ++calls == 1 ? "lacks fakeFunction" : "";
  });
  ASSERT_NE(found.handle, nullptr) << found.notFound();
  EXPECT_EQ(found.path, second);
  EXPECT_TRUE(mentions(found, first + ": lacks fakeFunction")) << found.notFound();
}

// libcuda is the driver's: the toolkit is not searched for it (it holds only a stub), and a
// library in a stubs folder is refused even when named explicitly.
TEST_F(LibraryLoaderTest, DriverStubIsNeverChosen) {
  unsetenv("DSRT_LIBCUDA");
  place(toolkit_ + "/lib64/stubs/libcuda.so");
  place(toolkit_ + "/lib64/stubs/libcuda.so.1");
  place(toolkit_ + "/lib64/libcuda.so.1");
  place(toolkit_ + "/" + kTargetLib + "/stubs/libcuda.so");
  for (const LibraryCandidate &candidate : libraryCandidates(cudaDriverLibrary(), roots_))
    EXPECT_EQ(candidate.path.find(toolkit_), std::string::npos) << candidate.path;
  LoadedLibrary found = findLibrary(cudaDriverLibrary(), roots_);
  if (found.handle) {  // a machine with a driver: the real one, from the loader path
    EXPECT_EQ(found.origin, "loader path");
    EXPECT_EQ(found.resolved.find("/stubs/"), std::string::npos) << found.describe();
  }

  std::string stub = toolkit_ + "/lib64/stubs/libcuda.so";
  setenv("DSRT_LIBCUDA", stub.c_str(), 1);
  found = findLibrary(cudaDriverLibrary(), roots_);
  EXPECT_EQ(found.handle, nullptr);
  EXPECT_TRUE(mentions(found, "stub")) << found.notFound();
  // The real toolkit's stub, where there is one.
  const char *realStub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (fs::exists(realStub)) {
    setenv("DSRT_LIBCUDA", realStub, 1);
    found = findLibrary(cudaDriverLibrary(), roots_);
    EXPECT_EQ(found.handle, nullptr) << found.describe();
    EXPECT_TRUE(mentions(found, "stub")) << found.notFound();
  }
}

TEST_F(LibraryLoaderTest, RootsComeFromTheEnvironment) {
  unsetenv("CUDA_HOME");
  setenv("CUDA_PATH", "/opt/cuda-from-path", 1);
  EXPECT_EQ(SearchRoots::fromEnvironment().toolkit, "/opt/cuda-from-path");
  setenv("CUDA_HOME", toolkit_.c_str(), 1);
  EXPECT_EQ(SearchRoots::fromEnvironment().toolkit, toolkit_);
  unsetenv("CUDA_HOME");
  unsetenv("CUDA_PATH");
  EXPECT_EQ(SearchRoots::fromEnvironment().toolkit, "/usr/local/cuda");
  // The active virtualenv's site-packages comes first.
  setenv("VIRTUAL_ENV", (root_ + "/venv").c_str(), 1);
  SearchRoots roots = SearchRoots::fromEnvironment();
  ASSERT_FALSE(roots.sitePackages.empty());
  EXPECT_EQ(roots.sitePackages.front(), site_);
}

// The four libraries' searches: names, variables and wheel layouts.
TEST(LibrarySpecs, NamesVariablesAndWheels) {
  LibrarySpec driver = cudaDriverLibrary();
  EXPECT_EQ(driver.environment, "DSRT_LIBCUDA");
  EXPECT_EQ(driver.names.front(), "libcuda.so.1");
  EXPECT_FALSE(driver.inToolkit);
  EXPECT_TRUE(driver.refuseStubs);
  LibrarySpec blas = cublasLtLibrary();
  EXPECT_EQ(blas.environment, "DSRT_CUBLASLT");
  EXPECT_EQ(blas.names, (std::vector<std::string>{"libcublasLt.so.13", "libcublasLt.so.12",
                                                  "libcublasLt.so"}));
  EXPECT_EQ(blas.wheelDirs, (std::vector<std::string>{"nvidia/cu13/lib", "nvidia/cublas/lib"}));
  LibrarySpec nccl = ncclLibrary();
  EXPECT_EQ(nccl.environment, "DSRT_NCCL");
  EXPECT_EQ(nccl.names.front(), "libnccl.so.2");
  EXPECT_EQ(nccl.wheelDirs.front(), "nvidia/nccl/lib");
  LibrarySpec nvrtc = nvrtcLibrary();
  EXPECT_EQ(nvrtc.environment, "DSC_NVRTC");
  EXPECT_EQ(nvrtc.names.front(), "libnvrtc.so.13");
  EXPECT_EQ(nvrtc.wheelDirs,
            (std::vector<std::string>{"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"}));
}

} // namespace
} // namespace dsrt::test

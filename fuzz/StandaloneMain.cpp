// The harnesses' main in builds without libFuzzer (gcc, or DSC_ENABLE_FUZZ off): runs every
// input file once, or every file under a folder, so that the seed corpora and the regression
// inputs of fuzz/regressions/ run in every build's ctest. A crash is the test's failure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

namespace {

std::vector<std::filesystem::path> inputsOf(const std::filesystem::path &argument) {
  std::vector<std::filesystem::path> inputs;
  if (std::filesystem::is_directory(argument)) {
    for (const auto &entry : std::filesystem::recursive_directory_iterator(argument))
      if (entry.is_regular_file())
        inputs.push_back(entry.path());
  } else {
    inputs.push_back(argument);
  }
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

} // namespace

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-')
      continue;  // libFuzzer's flags, accepted so that one command line serves both mains
    if (!std::filesystem::exists(argv[i])) {
      std::fprintf(stderr, "%s: no input '%s'\n", argv[0], argv[i]);
      return 1;
    }
    for (const std::filesystem::path &input : inputsOf(argv[i])) {
      std::ifstream file(input, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                                 std::istreambuf_iterator<char>());
      std::fprintf(stderr, "running %s (%zu bytes)\n", input.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++ran;
    }
  }
  std::fprintf(stderr, "%s: %zu inputs ran without a crash\n", argv[0], ran);
  return ran ? 0 : 1;
}

// What the C-API harnesses share: the rule that a failure explains itself, dtype sizes, and
// a file made from the input without touching the disk.
#ifndef DSC_FUZZ_FUZZSUPPORT_H
#define DSC_FUZZ_FUZZSUPPORT_H

#include "dsrt/dsrt.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace dsc::fuzz {

// Every failed call must say why (dsrt.h: "the message of the last error"); a bare status is
// a finding too. DSC_FUZZ_VERBOSE=1 prints each refusal, to see how far an input gets.
inline void requireMessage(dsrt_status status, const char *call) {
  static const bool verbose = std::getenv("DSC_FUZZ_VERBOSE") != nullptr;
  if (verbose && status != DSRT_OK)
    std::fprintf(stderr, "%s: %s\n", call, dsrt_last_error());
  if (status != DSRT_OK && std::strlen(dsrt_last_error()) == 0) {
    std::fprintf(stderr, "fuzz: %s failed (%s) without a message\n", call,
                 dsrt_status_name(status));
    std::abort();
  }
}

// Reads the input as a stream of choices; an exhausted input reads zeros.
class Choices {
public:
  Choices(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return offset_ >= size_; }
  uint8_t byte() { return offset_ < size_ ? data_[offset_++] : 0; }
  template <typename T> T pick(std::initializer_list<T> values) {
    return values.begin()[byte() % values.size()];
  }
  int64_t integer() {
    return pick<int64_t>({0, 1, 2, 3, 5, 7, 16, 17, 64, -1, -2, 50256, 50257, 1 << 20,
                          std::numeric_limits<int32_t>::max(),
                          std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int64_t>::min(), byte(), -byte()});
  }
  float real() {
    return pick<float>({0.0f, 0.5f, 1.0f, 0.7f, 2.0f, -1.0f, 7.0f, 1e-30f, 1e30f,
                        std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()});
  }

private:
  const uint8_t *data_;
  size_t size_;
  size_t offset_ = 0;
};

// The plan $DSRT_FUZZ_PLAN names (a small single-rank plan), for the harnesses that drive
// the C API on one; the process exits when there is none.
inline dsrt_plan *openFuzzPlan() {
  const char *path = std::getenv("DSRT_FUZZ_PLAN");
  if (!path) {
    std::fprintf(stderr, "fuzz: set DSRT_FUZZ_PLAN to a single-rank plan\n");
    std::exit(2);
  }
  dsrt_plan *plan = nullptr;
  if (dsrt_plan_open(path, &plan) != DSRT_OK) {
    std::fprintf(stderr, "fuzz: %s: %s\n", path, dsrt_last_error());
    std::exit(2);
  }
  return plan;
}

inline size_t elementBytes(dsrt_dtype dtype) {
  switch (dtype) {
  case DSRT_F64: case DSRT_I64: case DSRT_U64: return 8;
  case DSRT_F32: case DSRT_I32: case DSRT_U32: return 4;
  case DSRT_F16: case DSRT_BF16: case DSRT_I16: case DSRT_U16: return 2;
  default: return 1;
  }
}

// An in-memory file holding `size` bytes, and its path (/proc/self/fd/N) for the APIs that
// open files. Closed when it goes out of scope.
class MemoryFile {
public:
  MemoryFile(const void *data, size_t size) : fd_(memfd_create("fuzz-input", 0)) {
    if (fd_ < 0 || write(fd_, data, size) != static_cast<ssize_t>(size)) {
      std::perror("memfd");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile &) = delete;
  MemoryFile &operator=(const MemoryFile &) = delete;
  const char *path() const { return path_.c_str(); }

private:
  int fd_;
  std::string path_;
};

} // namespace dsc::fuzz

#endif

// What the C-API harnesses share: the rule that a failure explains itself, dtype sizes, and
// a file made from the input without touching the disk.
#ifndef DSC_FUZZ_FUZZSUPPORT_H
#define DSC_FUZZ_FUZZSUPPORT_H

#include "dsrt/dsrt.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

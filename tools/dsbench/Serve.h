// `dsbench serve`: the serving engine under a bounded load in this process (Serve.cpp).
#ifndef DSBENCH_SERVE_H
#define DSBENCH_SERVE_H

#include "dsrt/dsrt.h"

#include <string>

namespace dsbench {
// Both modes' errors: the message on stderr, exit code 2 (dsbench.cpp).
[[noreturn]] void die(const std::string &message);
// die() with the library's message when `status` is not DSRT_OK.
void check(dsrt_status status, const std::string &what);

// argv[0] is "serve"; returns the exit code.
int runServe(int argc, char **argv);
} // namespace dsbench

#endif

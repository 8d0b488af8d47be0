// Writes the sample plan of the plan tests to argv[1], for the dsp-dump test.
#include "SamplePlan.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write-sample-plan out.dsp\n");
    return 2;
  }
  dsrt::Status status = sample::write(argv[1]);
  if (!status.isOk()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  return 0;
}

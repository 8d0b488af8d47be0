// The dsc command line: options, diagnostics and the stages of docs/design.md §3.
#ifndef DSC_COMPILER_DRIVER_H
#define DSC_COMPILER_DRIVER_H

namespace dsc {
int runCompilerDriver(int argc, char **argv);
} // namespace dsc

#endif

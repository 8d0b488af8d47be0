#include "compiler/Driver.h"

int main(int argc, char **argv) { return dsc::runCompilerDriver(argc, argv); }

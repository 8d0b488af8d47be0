// The C++ header compiles against the installed package, and its error path works: opening
// a plan that does not exist throws dsrt::Error with the library's status and message.
#include <dsrt/dsrt.hpp>
#include <iostream>

int main(int argc, char **argv) {
  std::cout << "dsrt " << dsrt::version() << "\n";
  const char *missing = argc > 1 ? argv[1] : "/nonexistent/plan.dsp";
  try {
    dsrt::Plan plan(missing);
  } catch (const dsrt::Error &e) {
    std::cout << "dsrt::Error " << dsrt_status_name(e.status()) << ": " << e.message() << "\n";
    return e.status() != DSRT_OK && !e.message().empty() ? 0 : 1;
  }
  std::cerr << "opening " << missing << " did not throw\n";
  return 1;
}

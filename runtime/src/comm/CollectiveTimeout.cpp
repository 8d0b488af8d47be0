#include "comm/CollectiveTimeout.h"

#include <cstdlib>

namespace dsrt {

double collectiveTimeoutSeconds() {
  constexpr double kDefault = 300.0;
  const char *text = std::getenv("DSRT_COLLECTIVE_TIMEOUT");
  if (!text || !*text)
    return kDefault;
  char *end = nullptr;
  double value = std::strtod(text, &end);
  // A typo must not turn the timeout off: only a number >= 0 and nothing else counts.
  return end && *end == '\0' && value >= 0 ? value : kDefault;
}

} // namespace dsrt

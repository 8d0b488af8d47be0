// Errors inside the runtime: a message, or nothing. The C API turns them into dsrt_status
// codes; the compiler into diagnostics.
#ifndef DSRT_CORE_STATUS_H
#define DSRT_CORE_STATUS_H

#include <cstdio>
#include <string>
#include <utility>

namespace dsrt {

class [[nodiscard]] Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool isOk() const { return message_.empty(); }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const { return message_; }

private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {
    if (message_.empty())
      message_ = "unknown error";
  }
  std::string message_;
};

// A user's number in an error message as they would write it (1e-12, 1.5, inf), where
// std::to_string's six decimals show 1e-12 as 0.000000 and 1.5 as 1.500000.
inline std::string numberText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

#define DSRT_RETURN_IF_ERROR(expr)                                                           \
  do {                                                                                       \
    ::dsrt::Status status_ = (expr);                                                         \
    if (!status_.isOk())                                                                     \
      return status_;                                                                        \
  } while (0)

} // namespace dsrt

#endif

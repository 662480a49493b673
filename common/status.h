// Status: the result of an operation that can fail, LevelDB-style. Functions
// that can fail return Status and write results through out-parameters, so an
// error always carries a message naming what went wrong (and where, e.g. the
// byte offset in a file) instead of crashing or returning garbage.
#pragma once

#include <string>
#include <utility>

namespace pi {

class Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  // printf-style message.
  static Status Error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

  bool ok() const { return !error_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context ("loading model.gguf: ...").
  Status WithContext(const std::string& context) const;

 private:
  bool error_ = false;
  std::string message_;
};

}  // namespace pi

// Returns early from the enclosing function when `expr` is an error.
#define PI_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::pi::Status pi_status_ = (expr);        \
    if (!pi_status_.ok()) return pi_status_; \
  } while (0)

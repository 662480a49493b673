// Status: the result of an operation that can fail, LevelDB-style. Functions
// that can fail return Status and write results through out-parameters, so an
// error always carries a message naming what went wrong (and where, e.g. the
// byte offset in a file) instead of crashing or returning garbage.
//
// An error also has a code, for callers that act on the kind of failure
// rather than show it: a lost or late worker is recovered, a bad request is
// the client's fault (HTTP 400), a full memory is a resource error. Error()
// makes a plain error (kError): the code a caller that only reports it needs.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <utility>

namespace pi {

class Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kError,        // an error no caller tells apart from others
    kInvalid,      // bad input: a flag, a file's contents, a request, a message
    kNotFound,     // a file, tensor or key that is not there
    kIo,           // the system refused a file or memory operation
    kResource,     // would not fit: memory, a limit, a slot
    kUnsupported,  // well-formed, but not what this build or model can do
    kLost,         // a peer gone: a worker process killed, a stream ended
    kTimeout,      // a peer that did not answer in time
    kInternal,     // a device fault or a broken invariant
  };

  Status() = default;  // OK
  static Status Ok() { return Status(); }
  // printf-style messages, one constructor per code.
#define PI_STATUS_CTOR(Name) \
  static Status Name(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
  PI_STATUS_CTOR(Error)
  PI_STATUS_CTOR(Invalid)
  PI_STATUS_CTOR(NotFound)
  PI_STATUS_CTOR(Io)
  PI_STATUS_CTOR(Resource)
  PI_STATUS_CTOR(Unsupported)
  PI_STATUS_CTOR(Lost)
  PI_STATUS_CTOR(Timeout)
  PI_STATUS_CTOR(Internal)
#undef PI_STATUS_CTOR
  // An error of `code` (not kOk) with a message as it is.
  static Status FromCode(Code code, std::string message);
  // A code read from outside (a worker's reply): an unknown value is kError.
  static Code CodeFromWire(uint32_t value);

  bool ok() const {
    return code_ == Code::kOk;
  }
  Code code() const {
    return code_;
  }
  const std::string& message() const {
    return message_;
  }
  // "invalid", "lost", ...: the code's name, for logs and wire replies.
  static const char* CodeName(Code code);

  // Prefixes the message with context ("loading model.gguf: ..."); the code
  // stays.
  Status WithContext(const std::string& context) const;

 private:
  static Status Make(Code code, const char* fmt, va_list args);

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace pi

// Returns early from the enclosing function when `expr` is an error.
#define PI_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::pi::Status pi_status_ = (expr);        \
    if (!pi_status_.ok()) return pi_status_; \
  } while (0)

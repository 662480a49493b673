#include "common/base/status.h"

#include <cstdio>

namespace pi {

Status Status::Make(Code code, const char* fmt, va_list args) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, args);
  return FromCode(code, buf);
}

#define PI_STATUS_CTOR(Name, code)            \
  Status Status::Name(const char* fmt, ...) { \
    va_list args;                             \
    va_start(args, fmt);                      \
    Status s = Make(Code::code, fmt, args);   \
    va_end(args);                             \
    return s;                                 \
  }
PI_STATUS_CTOR(Error, kError)
PI_STATUS_CTOR(Invalid, kInvalid)
PI_STATUS_CTOR(NotFound, kNotFound)
PI_STATUS_CTOR(Io, kIo)
PI_STATUS_CTOR(Resource, kResource)
PI_STATUS_CTOR(Unsupported, kUnsupported)
PI_STATUS_CTOR(Lost, kLost)
PI_STATUS_CTOR(Timeout, kTimeout)
PI_STATUS_CTOR(Internal, kInternal)
#undef PI_STATUS_CTOR

Status Status::FromCode(Code code, std::string message) {
  Status s;
  // An error is never OK, whatever code it was given.
  s.code_ = code == Code::kOk ? Code::kError : code;
  s.message_ = std::move(message);
  return s;
}

Status::Code Status::CodeFromWire(uint32_t value) {
  return value <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(value) : Code::kError;
}

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kError:
      return "error";
    case Code::kInvalid:
      return "invalid";
    case Code::kNotFound:
      return "not found";
    case Code::kIo:
      return "io";
    case Code::kResource:
      return "resource";
    case Code::kUnsupported:
      return "unsupported";
    case Code::kLost:
      return "lost";
    case Code::kTimeout:
      return "timeout";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = context + ": " + message_;
  return s;
}

}  // namespace pi

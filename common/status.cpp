#include "common/status.h"

#include <cstdarg>
#include <cstdio>

namespace pi {

Status Status::Error(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  Status s;
  s.error_ = true;
  s.message_ = buf;
  return s;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = context + ": " + message_;
  return s;
}

}  // namespace pi

#include "common/text/json.h"

#include <cmath>
#include <cstdio>

#include "common/text/unicode.h"

namespace pi {

std::string JsonEscape(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x80) {
      uint32_t cp = 0;
      size_t len = 1;
      if (DecodeUtf8(s.data(), s.size(), i, &cp, &len) == Utf8Status::kValid) {
        out.append(s, i, len);
      } else {
        AppendUtf8(0xFFFD, &out);
      }
      i += len;
      continue;
    }
    ++i;
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (ch < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string JsonIntArray(const std::vector<int32_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

}  // namespace pi

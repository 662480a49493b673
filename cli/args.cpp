#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pi {

void ArgReader::Fail(const std::string& message) {
  if (!failed_) fprintf(stderr, "%s: %s\n", tool_, message.c_str());
  failed_ = true;
}

int ArgReader::ReadFlags(const std::function<bool(const std::string& flag)>& handle,
                         const std::function<void()>& usage) {
  while (!Done() && !failed_) {
    const std::string flag = Next();
    if (flag == "-h" || flag == "--help") {
      usage();
      return 0;
    }
    if (!handle(flag) && !failed_) Fail("unknown flag '" + flag + "' (see --help)");
  }
  return failed_ ? 2 : -1;
}

const char* ArgReader::Value(const std::string& flag) {
  if (i_ >= argc_) {
    Fail(flag + " expects a value");
    return nullptr;
  }
  return argv_[i_++];
}

std::string ArgReader::String(const std::string& flag) {
  const char* v = Value(flag);
  return v ? v : "";
}

int64_t ArgReader::Int64(const std::string& flag) {
  const char* v = Value(flag);
  if (!v) return 0;
  char* end = nullptr;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') {
    Fail(flag + " expects an integer, got '" + v + "'");
    return 0;
  }
  return x;
}

std::vector<std::string> SplitCommaList(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(list.substr(at, comma - at));
    if (comma == list.size()) return out;
    at = comma + 1;
  }
}

std::vector<int64_t> ArgReader::IntList(const std::string& flag, int64_t min, int64_t max) {
  std::vector<int64_t> out;
  const char* v = Value(flag);
  if (!v) return out;
  for (const std::string& item : SplitCommaList(v)) {
    char* end = nullptr;
    errno = 0;
    const long long x = strtoll(item.c_str(), &end, 10);
    const std::string where = flag + " item " + std::to_string(out.size()) + " ('" + item + "')";
    if (item.empty() || errno != 0 || *end != '\0') {
      Fail(where + " is not an integer (expected N[,N...])");
      return {};
    }
    if (x < min || x > max) {
      Fail(where + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
      return {};
    }
    out.push_back(x);
  }
  return out;
}

int ArgReader::Int(const std::string& flag) {
  const int64_t x = Int64(flag);
  if (x < -2147483647LL || x > 2147483647LL) {
    Fail(flag + " is out of range");
    return 0;
  }
  return static_cast<int>(x);
}

float ArgReader::Float(const std::string& flag) {
  const char* v = Value(flag);
  if (!v) return 0.0f;
  char* end = nullptr;
  errno = 0;
  const float x = strtof(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !std::isfinite(x)) {
    Fail(flag + " expects a number, got '" + v + "'");
    return 0.0f;
  }
  return x;
}

int64_t ArgReader::VramBudget(const std::string& flag) {
  if (i_ < argc_ && (std::string(argv_[i_]) == "auto" || std::string(argv_[i_]) == "-1")) {
    ++i_;
    return kVramBudgetAuto;
  }
  return Size(flag, 1024.0 * 1024 * 1024);
}

std::vector<int64_t> ArgReader::VramBudgets(const std::string& flag) {
  const char* v = Value(flag);
  if (!v) return {};
  std::vector<int64_t> out;
  for (const std::string& item : SplitCommaList(v)) {
    if (item == "auto" || item == "-1") {
      out.push_back(kVramBudgetAuto);
    } else {
      out.push_back(ParseSize(flag, item.c_str(), 1024.0 * 1024 * 1024));
    }
    if (failed_) break;
  }
  return out;
}

int64_t ArgReader::Size(const std::string& flag, double bare) {
  const char* v = Value(flag);
  if (!v) return 0;
  return ParseSize(flag, v, bare);
}

int64_t ArgReader::ParseSize(const std::string& flag, const char* v, double bare) {
  char* end = nullptr;
  errno = 0;
  const double x = strtod(v, &end);
  const bool no_number = end == v;  // "G" alone: a suffix without a number
  double mult = bare;
  if (end && *end) {
    switch (*end) {
      case 'b':
      case 'B':
        mult = 1.0;  // bytes, said explicitly ("4096B")
        break;
      case 'k':
      case 'K':
        mult = 1024.0;
        break;
      case 'm':
      case 'M':
        mult = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 't':
      case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        mult = 0.0;
    }
    const bool byte_suffix = *end == 'b' || *end == 'B';
    if (mult != 0.0) ++end;
    if (!byte_suffix && *end == 'i') ++end;  // "GiB"
    if (!byte_suffix && (*end == 'B' || *end == 'b')) ++end;
  }
  if (errno != 0 || no_number || *end != '\0' || mult == 0.0 || !(x >= 0.0) || !std::isfinite(x)) {
    Fail(flag + " expects a size like 512M or 11G, got '" + v + "'");
    return 0;
  }
  // Past 2^62 bytes (4 EiB) a size is a typo, and past 2^63 the conversion
  // would wrap negative (a negative budget reads as "no budget").
  const double bytes = x * mult;
  if (bytes > 4611686018427387904.0) {
    Fail(flag + " is too large: '" + v + "'");
    return 0;
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace pi

#include "common/base/memory_limits.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace pi {
namespace {

// Limits at or above this are "unlimited" (cgroup v1 writes 2^63 rounded
// down to a page).
constexpr int64_t kNoLimit = int64_t{1} << 62;

// A small kernel file (/proc, /sys) as text; empty when unreadable. These
// report a size of 0, so read until EOF rather than by their size.
std::string ReadSmallFile(const std::string& path) {
  std::string out;
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while (out.size() < (1 << 20) && (n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

int64_t ParseCount(const std::string& text) {
  const char* s = text.c_str();
  while (*s == ' ' || *s == '\t') ++s;
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || v >= static_cast<unsigned long long>(kNoLimit)) return INT64_MAX;
  return static_cast<int64_t>(v);
}

void Lower(MemoryAvailable* m, int64_t bytes, const char* source) {
  if (bytes >= 0 && bytes < m->bytes) {
    m->bytes = bytes;
    m->source = source;
  }
}

// limit - usage of the cgroup `dir` and each ancestor up to `root`.
void LowerByCgroup(MemoryAvailable* m, const std::string& root, std::string dir,
                   const char* limit_file, const char* usage_file) {
  while (true) {
    const std::string base = root + dir;
    const int64_t limit = ParseCgroupLimit(ReadSmallFile(base + "/" + limit_file));
    if (limit >= 0 && limit < kNoLimit) {
      const int64_t usage = ParseCount(ReadSmallFile(base + "/" + usage_file));
      Lower(m, usage >= 0 && usage < limit ? limit - usage : 0, "cgroup limit");
    }
    if (dir.empty() || dir == "/") break;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "" : dir.substr(0, slash);
  }
}

void LowerByCgroups(MemoryAvailable* m) {
  std::istringstream lines(ReadSmallFile("/proc/self/cgroup"));
  std::string line;
  while (std::getline(lines, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      LowerByCgroup(m, "/sys/fs/cgroup", path, "memory.max", "memory.current");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      LowerByCgroup(m, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                    "memory.usage_in_bytes");
    }
  }
}

void LowerByRlimit(MemoryAvailable* m, int resource, const char* status_key, const char* source) {
  struct rlimit rl;
  if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  const int64_t used = ParseStatusKb(ReadSmallFile("/proc/self/status"), status_key);
  const int64_t limit = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, kNoLimit));
  Lower(m, used >= 0 && used < limit ? limit - used : 0, source);
}

}  // namespace

int64_t ParseMemAvailable(const std::string& meminfo) {
  return ParseStatusKb(meminfo, "MemAvailable");
}

int64_t ParseCgroupLimit(const std::string& text) {
  if (text.compare(0, 3, "max") == 0) return INT64_MAX;
  return ParseCount(text);
}

int64_t ParseStatusKb(const std::string& status, const std::string& key) {
  const std::string label = key + ":";
  size_t at = 0;
  while ((at = status.find(label, at)) != std::string::npos) {
    if (at == 0 || status[at - 1] == '\n') {
      const int64_t kb = ParseCount(status.substr(at + label.size(), 32));
      if (kb < 0 || kb > INT64_MAX / 1024) return -1;
      return kb * 1024;
    }
    at += label.size();
  }
  return -1;
}

MemoryAvailable AvailableMemory() {
  MemoryAvailable m;
  Lower(&m, ParseMemAvailable(ReadSmallFile("/proc/meminfo")), "MemAvailable");
  LowerByCgroups(&m);
  LowerByRlimit(&m, RLIMIT_AS, "VmSize", "ulimit -v");
  LowerByRlimit(&m, RLIMIT_DATA, "VmData", "ulimit -d");
  return m;
}

std::string HumanBytes(int64_t bytes) {
  static const char* const kUnit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (u < 5 && (v >= 1024 || v <= -1024)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%.2f %s", v, kUnit[u]);
  return buf;
}

Status CheckMemory(const std::string& what, int64_t bytes) {
  if (bytes < 0)
    return Status::Resource("%s needs more memory than can be addressed", what.c_str());
  const MemoryAvailable m = AvailableMemory();
  if (bytes <= m.bytes) return Status::Ok();
  return Status::Resource("%s needs %s of memory, but only %s is available (%s)", what.c_str(),
                          HumanBytes(bytes).c_str(), HumanBytes(m.bytes).c_str(), m.source.c_str());
}

int64_t FreeDiskBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) {
    const size_t slash = path.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    if (statvfs(dir.c_str(), &st) != 0) return INT64_MAX;
  }
  const unsigned long long free_bytes =
      static_cast<unsigned long long>(st.f_bavail) * static_cast<unsigned long long>(st.f_frsize);
  return free_bytes >= static_cast<unsigned long long>(INT64_MAX)
             ? INT64_MAX
             : static_cast<int64_t>(free_bytes);
}

Status CheckDiskSpace(const std::string& what, const std::string& path, int64_t bytes) {
  if (bytes < 0) return Status::Resource("%s: the file would be too large to write", what.c_str());
  const int64_t free_bytes = FreeDiskBytes(path);
  if (bytes <= free_bytes) return Status::Ok();
  return Status::Resource("%s needs %s of disk, but only %s is free on its filesystem",
                          what.c_str(), HumanBytes(bytes).c_str(), HumanBytes(free_bytes).c_str());
}

}  // namespace pi

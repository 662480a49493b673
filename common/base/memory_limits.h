// Memory and disk limits: how many bytes this process may still allocate or
// write, so that a size taken from a flag or a file is checked before it is
// allocated and the user gets "the KV cache for -c 1000000 needs 122 GiB,
// 21 GiB available (MemAvailable)" instead of an abort from std::bad_alloc
// or the OOM killer.
//
// Available memory is the smallest of: the kernel's MemAvailable; the
// process's cgroup limit less its usage (cgroup v2 memory.max, v1
// memory.limit_in_bytes, on the process's own cgroup and its ancestors);
// and the address-space and data rlimits (ulimit -v / -d) less what is
// mapped. It is an estimate of the moment: it guards against asks that can
// never succeed, not against every later shortage.
#pragma once

#include <cstdint>
#include <string>

#include "common/base/status.h"

namespace pi {

struct MemoryAvailable {
  int64_t bytes = INT64_MAX;  // INT64_MAX when nothing could be read
  std::string source;         // what limited it: "MemAvailable", "cgroup limit", "ulimit -v", ...
};

MemoryAvailable AvailableMemory();

// OK when `bytes` fit in AvailableMemory(); otherwise an error naming `what`
// (e.g. "the KV cache for -c 1000000"), the bytes it needs and what is
// available. Negative `bytes` (an overflowed computation) is an error too.
Status CheckMemory(const std::string& what, int64_t bytes);

// Free bytes for an unprivileged writer on the filesystem holding `path` (a
// file that may not exist yet: its directory is asked); INT64_MAX when
// unknown.
int64_t FreeDiskBytes(const std::string& path);

// OK when `bytes` fit in FreeDiskBytes(path); otherwise an error naming
// `what` (e.g. "writing out.gguf"), the bytes it needs and the bytes free.
Status CheckDiskSpace(const std::string& what, const std::string& path, int64_t bytes);

// "1.50 GiB", "640.00 KiB", "12 B": sizes in messages and reports.
std::string HumanBytes(int64_t bytes);

// Parsers behind AvailableMemory, exposed for tests. Each returns -1 when the
// text does not hold the value.
int64_t ParseMemAvailable(const std::string& meminfo);  // /proc/meminfo
// A cgroup limit file ("max" or a byte count): INT64_MAX for no limit.
int64_t ParseCgroupLimit(const std::string& text);
// /proc/self/status's "VmSize:" (key "VmSize") or "VmData:" in bytes.
int64_t ParseStatusKb(const std::string& status, const std::string& key);

}  // namespace pi

// MappedFiles: a process-wide table of the files this process has mapped
// into memory, so that a SIGBUS (a mapped file truncated by someone else
// while in use) can be reported as "model.gguf was truncated while mapped"
// instead of a bare "Bus error". The lookup is async-signal-safe: a fixed
// table of atomics, no allocation, no locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"

namespace pi {

// A regular file mapped read-only, and registered in the table below, until
// destroyed. Opening a FIFO or a directory is refused (never waits).
class MappedRegion {
 public:
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  static Status Map(const std::string& path, std::unique_ptr<MappedRegion>* out);
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedRegion() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;
};

// Records [addr, addr + size) as a mapping of `path`. Returns a slot to pass
// to UnregisterMappedFile, or -1 when the table is full (the mapping then
// simply goes unnamed).
int RegisterMappedFile(const void* addr, size_t size, const std::string& path);
void UnregisterMappedFile(int slot);

// The path of the registered mapping holding `addr`, or nullptr. Safe to call
// from a signal handler.
const char* MappedFileAt(const void* addr);

// Installs a SIGBUS handler that prints "tool: PATH changed size while
// mapped (truncated by another program?): cannot read it" and exits with
// status 1 when the faulting address is in a registered mapping, and
// otherwise restores the default action and re-raises.
void InstallMappedFileFaultHandler(const char* tool);

}  // namespace pi

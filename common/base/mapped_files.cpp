#include "common/base/mapped_files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace pi {
namespace {

constexpr int kSlots = 64;
constexpr size_t kPathBytes = 512;

// A slot is claimed by CAS on `state` (0 free, 1 being written, 2 live), so
// a handler reads only slots whose fields are complete.
struct Slot {
  std::atomic<int> state{0};
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[kPathBytes];
};
Slot g_slots[kSlots];
const char* g_tool = "pi";

void WriteAll(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void OnSigbus(int sig, siginfo_t* info, void*) {
  const char* path = MappedFileAt(info->si_addr);
  if (path != nullptr) {
    WriteAll(g_tool);
    WriteAll(": ");
    WriteAll(path);
    WriteAll(
        " changed size while mapped (truncated or replaced in place by another program?): "
        "cannot read it\n");
    _exit(1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int RegisterMappedFile(const void* addr, size_t size, const std::string& path) {
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    Slot& s = g_slots[i];
    const size_t n = path.size() < kPathBytes - 1 ? path.size() : kPathBytes - 1;
    memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.begin.store(reinterpret_cast<uintptr_t>(addr));
    s.end.store(reinterpret_cast<uintptr_t>(addr) + size);
    s.state.store(2);
    return i;
  }
  return -1;
}

void UnregisterMappedFile(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  g_slots[slot].state.store(1);
  g_slots[slot].begin.store(0);
  g_slots[slot].end.store(0);
  g_slots[slot].state.store(0);
}

const char* MappedFileAt(const void* addr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : g_slots) {
    if (s.state.load() == 2 && a >= s.begin.load() && a < s.end.load()) return s.path;
  }
  return nullptr;
}

void InstallMappedFileFaultHandler(const char* tool) {
  g_tool = tool;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

MappedRegion::~MappedRegion() {
  UnregisterMappedFile(slot_);
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

Status MappedRegion::Map(const std::string& path, std::unique_ptr<MappedRegion>* out) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; it is
  // refused below as not a regular file instead.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return Status::FromCode(err == ENOENT ? Status::Code::kNotFound : Status::Code::kIo,
                            path + ": cannot open: " + strerror(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Status::Io("%s: cannot stat: %s", path.c_str(), strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Invalid("%s: not a regular file", path.c_str());
  }
  std::unique_ptr<MappedRegion> region(new MappedRegion());
  region->size_ = static_cast<size_t>(st.st_size);
  if (region->size_ > 0) {
    void* p = mmap(nullptr, region->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return Status::Io("%s: mmap of %zu bytes failed: %s", path.c_str(), region->size_,
                        strerror(err));
    }
    region->data_ = static_cast<const uint8_t*>(p);
    region->slot_ = RegisterMappedFile(p, region->size_, path);
  }
  close(fd);  // the mapping keeps the file alive
  *out = std::move(region);
  return Status::Ok();
}

}  // namespace pi

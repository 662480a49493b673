#include "common/transport/shm_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <new>

namespace pi {

namespace {

constexpr uint32_t kMagic = 0x48535049;  // bytes "IPSH"
constexpr uint32_t kVersion = 1;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// Shared (not FUTEX_PRIVATE_FLAG) futex calls: the two sides are processes.
long FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_us) {
  struct timespec ts;
  ts.tv_sec = timeout_us / 1000000;
  ts.tv_nsec = (timeout_us % 1000000) * 1000L;
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
                 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

size_t AlignUp(size_t v) {
  return (v + 63) / 64 * 64;
}

}  // namespace

// Offsets, never pointers: the two processes map the region at different
// addresses. Each side's hot words sit on their own cache line.
struct ShmChannel::Header {
  uint32_t magic;
  uint32_t version;
  uint64_t capacity[2];
  uint64_t offset[2];
  struct alignas(64) Line {
    std::atomic<uint32_t> seq;      // bumped by the slot's writer after each message
    std::atomic<uint32_t> waiters;  // the reader is (about to be) asleep on seq
    std::atomic<uint64_t> bytes;    // the message's size
  };
  Line line[2];
  alignas(64) std::atomic<uint64_t> heartbeat;
};

ShmChannel::~ShmChannel() {
  Close();
}

void ShmChannel::Close() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  size_ = 0;
  seen_[0] = seen_[1] = 0;
}

Status ShmChannel::Map(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Io("shm: mmap of %zu bytes: %s", size, strerror(errno));
  base_ = static_cast<uint8_t*>(p);
  size_ = size;
  fd_ = fd;
  return Status::Ok();
}

Status ShmChannel::Create(size_t request_capacity, size_t reply_capacity) {
  Close();
  const size_t request_at = AlignUp(sizeof(Header));
  const size_t reply_at = request_at + AlignUp(request_capacity);
  const size_t size = reply_at + AlignUp(reply_capacity);
  const int fd = memfd_create("pi-step-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Io("shm: memfd_create: %s", strerror(errno));
  // Sealed: a peer cannot shrink the region under the other (a SIGBUS).
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    return Status::Io("shm: sizing the region to %zu bytes: %s", size, strerror(err));
  }
  PI_RETURN_IF_ERROR(Map(fd, size));
  Header* h = new (base_) Header();
  h->magic = kMagic;
  h->version = kVersion;
  h->capacity[kRequest] = request_capacity;
  h->capacity[kReply] = reply_capacity;
  h->offset[kRequest] = request_at;
  h->offset[kReply] = reply_at;
  for (int s = 0; s < 2; ++s) {
    offset_[s] = h->offset[s];
    capacity_[s] = h->capacity[s];
  }
  return Status::Ok();
}

Status ShmChannel::Attach(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) < AlignUp(sizeof(Header))) {
    close(fd);
    return Status::Error("shm: fd %d is not a step channel region", fd);
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    close(fd);
    return Status::Error("shm: the region behind fd %d is not sealed against resizing", fd);
  }
  PI_RETURN_IF_ERROR(Map(fd, static_cast<size_t>(st.st_size)));
  const Header* h = header();
  if (h->magic != kMagic || h->version != kVersion) {
    return Status::Error("shm: region magic 0x%08x version %u, expected 0x%08x version %u",
                         h->magic, h->version, kMagic, kVersion);
  }
  for (int s = 0; s < 2; ++s) {
    if (h->offset[s] < AlignUp(sizeof(Header)) || h->capacity[s] > size_ ||
        h->offset[s] > size_ - h->capacity[s]) {
      return Status::Error("shm: slot %d [%lu, +%lu) lies outside the %zu-byte region", s,
                           static_cast<unsigned long>(h->offset[s]),
                           static_cast<unsigned long>(h->capacity[s]), size_);
    }
    offset_[s] = h->offset[s];
    capacity_[s] = h->capacity[s];
    seen_[s] = 0;  // a message published before this attach is still waiting
  }
  return Status::Ok();
}

void ShmChannel::Publish(Slot s, size_t bytes) {
  Header::Line& line = header()->line[s];
  line.bytes.store(bytes, std::memory_order_relaxed);
  line.seq.fetch_add(1, std::memory_order_seq_cst);
  // Only a reader that said it sleeps needs the syscall.
  if (line.waiters.load(std::memory_order_seq_cst) != 0) FutexWake(&line.seq);
}

Status ShmChannel::WaitFor(Slot s, int timeout_ms, int spin_us, size_t* bytes) {
  Header::Line& line = header()->line[s];
  const auto start = std::chrono::steady_clock::now();
  const auto spin_until = start + std::chrono::microseconds(spin_us);
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  uint32_t seq = line.seq.load(std::memory_order_acquire);
  for (int i = 0; seq == seen_[s]; ++i) {
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= spin_until) break;
    _mm_pause();
    seq = line.seq.load(std::memory_order_acquire);
  }
  while (seq == seen_[s]) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Status::Timeout("shm: no %s within %d ms", s == kRequest ? "request" : "reply",
                             timeout_ms);
    }
    line.waiters.fetch_add(1, std::memory_order_seq_cst);
    // Re-check after announcing: a publish in between has either seen the
    // waiter (and wakes) or bumped seq (and the wait returns at once).
    if (line.seq.load(std::memory_order_seq_cst) == seen_[s]) {
      const int64_t left_us =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
      FutexWait(&line.seq, seen_[s], static_cast<int>(std::min<int64_t>(left_us, 100000)));
    }
    line.waiters.fetch_sub(1, std::memory_order_seq_cst);
    seq = line.seq.load(std::memory_order_acquire);
  }
  seen_[s] = seq;
  const uint64_t n = line.bytes.load(std::memory_order_relaxed);
  if (n > capacity_[s]) {
    return Status::Invalid("shm: the peer published %lu bytes in a %zu-byte slot",
                           static_cast<unsigned long>(n), capacity_[s]);
  }
  *bytes = static_cast<size_t>(n);
  return Status::Ok();
}

void ShmChannel::Beat() {
  header()->heartbeat.fetch_add(1, std::memory_order_relaxed);
}

uint64_t ShmChannel::heartbeat() const {
  return header()->heartbeat.load(std::memory_order_relaxed);
}

}  // namespace pi

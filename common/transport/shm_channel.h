// ShmChannel: one coordinator and one local worker exchanging step messages
// through a shared-memory region: a request slot and a reply slot, one step
// in flight. The region is a sealed memfd (nothing left in /dev/shm when
// either side dies) handed to the worker at spawn. A message is written
// once, in place, by its sender and read in place by its receiver; then a
// sequence word is published (release) and the peer woken.
//
// Waking: the waiter spins on the sequence word for a bounded time (a peer
// on another core answers in well under a microsecond), then announces
// itself and sleeps on a futex on that word, so a peer sharing its core is
// never starved by spinning. Every wait has a deadline: a dead or stopped
// peer becomes a timeout, not a hang.
//
//   coordinator: write request() ... Publish(kRequest, n)  WaitFor(kReply)
//   worker:      WaitFor(kRequest) ... write reply() ... Publish(kReply, n)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/base/status.h"

namespace pi {

class ShmChannel {
 public:
  enum Slot { kRequest = 0, kReply = 1 };

  ShmChannel() = default;
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // The coordinator's side: a new region with slots of these sizes (a
  // region already held is closed first).
  Status Create(size_t request_capacity, size_t reply_capacity);
  // Unmaps and closes the region (a restarted worker gets a fresh one).
  void Close();
  // The worker's side: maps the region behind `fd` (checks magic, version,
  // sizes and seals). Takes ownership of fd.
  Status Attach(int fd);

  int fd() const { return fd_; }
  uint8_t* slot(Slot s) const { return base_ + offset_[s]; }
  size_t capacity(Slot s) const { return capacity_[s]; }

  // Makes the `bytes` just written in slot `s` visible and wakes the peer.
  void Publish(Slot s, size_t bytes);
  // Waits until the peer publishes slot `s` again, at most `timeout_ms`;
  // *bytes = the message size. `spin_us` bounds the spin before sleeping
  // (0: sleep at once). A timeout is a kTimeout error saying so.
  Status WaitFor(Slot s, int timeout_ms, int spin_us, size_t* bytes);

  // Bumped by the worker from a thread of its own: proof of life between
  // steps (the coordinator reads it; a stopped worker's stands still).
  void Beat();
  uint64_t heartbeat() const;

 private:
  struct Header;
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  Status Map(int fd, size_t size);

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  size_t offset_[2] = {0, 0};
  size_t capacity_[2] = {0, 0};
  uint32_t seen_[2] = {0, 0};  // the last sequence number this side consumed
};

}  // namespace pi

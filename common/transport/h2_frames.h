// H2FrameScanner: walks the frames a client sends on an HTTP/2 connection,
// a chunk of bytes at a time as they arrive (a frame may span chunks), and
// tells the type, flags and stream of each frame's header; payloads are
// skipped, never buffered. TokenBucket: a budget of `burst` at once and
// `per_second` after. Both are what H2Guard (h2_guard.h) judges a client by.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pi {

inline constexpr uint8_t kH2Data = 0, kH2Headers = 1, kH2RstStream = 3, kH2Settings = 4;
inline constexpr uint8_t kH2EndStream = 0x1;

class H2FrameScanner {
 public:
  // A client's bytes begin with the connection preface; a server's do not.
  explicit H2FrameScanner(bool client = true) : preface_seen_(client ? 0 : 24) {}
  struct Frame {
    uint8_t type = 0, flags = 0;
    uint32_t stream = 0;
    uint32_t length = 0;
  };
  // Calls on_frame(context, frame) for each frame header completed by these
  // bytes; false (and nothing more, ever) when they do not begin with a
  // client's connection preface.
  bool Feed(const uint8_t* data, size_t n, void (*on_frame)(void*, const Frame&), void* context);

 private:
  size_t preface_seen_;  // of the 24 bytes
  uint8_t header_[9];
  size_t header_seen_ = 0;
  uint64_t payload_left_ = 0;
  bool broken_ = false;
};

class TokenBucket {
 public:
  TokenBucket(double per_second, double burst) : rate_(per_second), burst_(burst), tokens_(burst) {}
  // Takes one at time `now_s` (seconds, non-decreasing); false when none is left.
  bool Take(double now_s) {
    if (last_s_ >= 0) tokens_ = tokens_ + (now_s - last_s_) * rate_;
    if (tokens_ > burst_) tokens_ = burst_;
    last_s_ = now_s;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  double rate_, burst_, tokens_;
  double last_s_ = -1;
};

}  // namespace pi

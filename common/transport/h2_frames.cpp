#include "common/transport/h2_frames.h"

#include <algorithm>
#include <cstring>

namespace pi {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceSize = sizeof kPreface - 1;  // 24

}  // namespace

bool H2FrameScanner::Feed(const uint8_t* data, size_t n, void (*on_frame)(void*, const Frame&),
                          void* context) {
  if (broken_) return false;
  size_t i = 0;
  while (i < n && preface_seen_ < kPrefaceSize) {
    if (data[i] != static_cast<uint8_t>(kPreface[preface_seen_])) {
      broken_ = true;
      return false;
    }
    ++i;
    ++preface_seen_;
  }
  while (i < n) {
    if (payload_left_ > 0) {
      const size_t skip = static_cast<size_t>(std::min<uint64_t>(payload_left_, n - i));
      payload_left_ -= skip;
      i += skip;
      continue;
    }
    const size_t take = std::min(sizeof header_ - header_seen_, n - i);
    memcpy(header_ + header_seen_, data + i, take);
    header_seen_ += take;
    i += take;
    if (header_seen_ < sizeof header_) break;
    header_seen_ = 0;
    Frame f;
    f.length = (uint32_t{header_[0]} << 16) | (uint32_t{header_[1]} << 8) | header_[2];
    f.type = header_[3];
    f.flags = header_[4];
    f.stream = ((uint32_t{header_[5]} & 0x7f) << 24) | (uint32_t{header_[6]} << 16) |
               (uint32_t{header_[7]} << 8) | header_[8];
    payload_left_ = f.length;
    on_frame(context, f);
  }
  return true;
}

}  // namespace pi

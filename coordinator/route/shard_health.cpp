#include "coordinator/route/shard_health.h"

#include <algorithm>

namespace pi {
namespace {

// The wait before the next Recover() after a failure: 250 ms, doubling to 5 s.
int NextBackoffMs(int backoff_ms) {
  return std::min(5000, std::max(250, 2 * backoff_ms));
}

}  // namespace

void ShardHealth::Failed(const Shard& shard, const Status& s, ShardEvents* events) {
  const auto now = Clock::now();
  down_ = true;
  ++events->failures;
  // The message names the shard, once.
  const std::string name = shard.name();
  events->last_error = s.message().rfind(name, 0) == 0 ? s.message() : name + ": " + s.message();
  const bool relapse =
      recovered_at_ != Clock::time_point() && now - recovered_at_ < std::chrono::minutes(1);
  backoff_ms_ = relapse ? NextBackoffMs(backoff_ms_) : 0;
  retry_at_ = now + std::chrono::milliseconds(backoff_ms_);
}

void ShardHealth::TryRecover(Shard* shard, ShardEvents* events) {
  const auto now = Clock::now();
  if (!down_ || now < retry_at_) return;
  if (shard->Recover().ok()) {
    down_ = false;
    recovered_at_ = Clock::now();
    ++events->recoveries;
  } else {
    backoff_ms_ = NextBackoffMs(backoff_ms_);
    retry_at_ = now + std::chrono::milliseconds(backoff_ms_);
  }
}

}  // namespace pi

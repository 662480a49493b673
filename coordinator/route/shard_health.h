// ShardHealth: whether a shard is serving steps, and when to try bringing
// a lost one back. A shard whose Wait fails is down: its neurons run on the
// coordinator until Recover() succeeds, tried at the next step — or, for a
// shard lost again within a minute of coming back, and after a failed
// Recover(), after a backoff of 250 ms doubling to 5 s, so that a crash loop
// does not cost a restart per step.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/base/status.h"
#include "common/shard/shard.h"

namespace pi {

// Over every shard of a layer router: for metrics and pi-bench.
struct ShardEvents {
  int64_t failures = 0, recoveries = 0;
  std::string last_error;  // names the shard
};

class ShardHealth {
 public:
  bool down() const { return down_; }
  // After a failed Wait: down from now on.
  void Failed(const Shard& shard, const Status& s, ShardEvents* events);
  // While down and its time has come: Recover(); up again when it succeeds.
  void TryRecover(Shard* shard, ShardEvents* events);

 private:
  using Clock = std::chrono::steady_clock;
  bool down_ = false;
  Clock::time_point retry_at_, recovered_at_;  // recovered_at_ zero: never
  int backoff_ms_ = 0;
};

}  // namespace pi

// HandleStepMessage: the one worker step handler behind every transport
// (shared memory, gRPC, in-process tests and the fuzzer). It validates a
// request message in place and writes the reply message: the partial sum
// straight into the reply's payload (no intermediate buffer), or an error
// status with a message naming the bad field. A bad message never crashes
// the worker or reads outside the message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/transport/step_shard.h"

namespace pi {

// Reply bytes the handler needs at most for `shard`: a full-batch partial sum,
// or an error message (at most kMaxErrorBytes).
size_t StepReplyCapacity(const ShardLayout& shard);
inline constexpr size_t kMaxErrorBytes = 512;

// Handles one request (`request`, 4-byte aligned) into `reply` (`capacity`
// bytes, at least StepReplyCapacity); returns the reply's size.
size_t HandleStepMessage(const uint8_t* request, size_t size, StepShard* shard, uint8_t* reply,
                         size_t capacity);

}  // namespace pi

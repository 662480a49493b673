// HandleStepMessage: the one FFN step handler behind every transport
// (shared memory, gRPC, in-process tests and the fuzzer). It validates a
// kFfn request message in place and writes the reply message: the partial
// sum straight into the reply's payload (no intermediate buffer), or an
// error reply with the failure's code and a message naming the bad field. A
// bad message never crashes the worker or reads outside the message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/transport/step_shard.h"

namespace pi {

// Handles one request (`request`, 4-byte aligned) into `reply` (`capacity`
// bytes, at least StepReplyCapacity(shard->layout())); returns the reply's
// size.
size_t HandleStepMessage(const uint8_t* request, size_t size, StepShard* shard, uint8_t* reply,
                         size_t capacity);

}  // namespace pi

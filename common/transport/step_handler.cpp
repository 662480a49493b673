#include "common/transport/step_handler.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace pi {

size_t StepReplyCapacity(const ShardLayout& shard) {
  return std::max(StepReplyBytes(shard.max_batch, shard.n_embd),
                  sizeof(StepReplyHeader) + kMaxErrorBytes);
}

size_t HandleStepMessage(const uint8_t* request, size_t size, StepShard* shard, uint8_t* reply,
                         size_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  StepRequest step;
  Status s = ParseStepRequest(request, size, shard->layout(), &step);
  float* y = reinterpret_cast<float*>(reply + sizeof(StepReplyHeader));
  int64_t fired = 0;
  const bool parsed = s.ok();
  if (parsed) s = shard->Run(step, y, &fired);
  if (!s.ok()) {
    StepRequestHeader h{};
    if (size >= sizeof h) memcpy(&h, request, sizeof h);
    const size_t n =
        std::min({s.message().size(), kMaxErrorBytes, capacity - sizeof(StepReplyHeader)});
    const StepReplyHeader r =
        ErrorReply(h.step_id, parsed ? StepStatus::kInternal : StepStatus::kInvalidRequest, n);
    memcpy(reply, &r, sizeof r);
    memcpy(reply + sizeof r, s.message().data(), n);
    return sizeof r + n;
  }
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  const size_t y_bytes = sizeof(float) * static_cast<size_t>(step.batch) * shard->layout().n_embd;
  const StepReplyHeader r = OkReply(step.step_id, fired, ns, y_bytes);
  memcpy(reply, &r, sizeof r);
  return sizeof r + y_bytes;
}

size_t StepShard::reply_capacity() const {
  return StepReplyCapacity(layout());
}

size_t StepShard::Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) {
  return HandleStepMessage(request, size, this, reply, capacity);
}

}  // namespace pi

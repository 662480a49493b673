#include "common/transport/step_handler.h"

#include <chrono>

namespace pi {

size_t HandleStepMessage(const uint8_t* request, size_t size, StepShard* shard, uint8_t* reply,
                         size_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  StepRequest step;
  Status s = ParseStepRequest(request, size, shard->layout(), &step);
  float* y = reinterpret_cast<float*>(reply + sizeof(StepReplyHeader));
  int64_t fired = 0;
  if (s.ok()) s = shard->Run(step, y, &fired);
  if (!s.ok()) return WriteErrorReply(request, size, s, reply, capacity);
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  const size_t y_bytes = sizeof(float) * static_cast<size_t>(step.batch) * shard->layout().n_embd;
  return WriteReplyHeader(step.step_id, StepReplyKind::kSum, step.layer, fired, ns, 0,
                          DeviceOut::kNothing, y_bytes, reply);
}

size_t StepShard::reply_capacity() const {
  return StepReplyCapacity(layout());
}

size_t StepShard::Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) {
  return HandleStepMessage(request, size, this, reply, capacity);
}

}  // namespace pi

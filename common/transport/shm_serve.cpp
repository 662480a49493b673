#include "common/transport/shm_serve.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/transport/hello_message.h"
#include "common/transport/step_handler.h"

namespace pi {

namespace {

// Between two FFN steps the coordinator runs a layer's attention (tens of
// microseconds on small models): spinning through that saves a futex
// wake-up per layer (tens of microseconds on a VM), and sleeping after it
// keeps an idle worker off a core the coordinator may need.
constexpr int kSpinUs = 200;
constexpr int kPollMs = 200;  // how often an idle worker checks on its parent

bool ParentGone(const ShmServeOptions& o) {
  return o.parent_pid != 0 && getppid() != o.parent_pid;
}

Status AnswerHello(ShmChannel* ch, const LlamaModel& model, const Status& loaded,
                   const ShmServeOptions& o, StepShard* shard) {
  size_t n = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(o.hello_timeout_ms);
  while (true) {
    bool timed_out = false;
    const Status s = ch->WaitFor(ShmChannel::kRequest, kPollMs, kSpinUs, &n, &timed_out);
    if (s.ok()) break;
    if (!timed_out) return s;
    if (ParentGone(o)) return Status::Error("the coordinator is gone");
    if (std::chrono::steady_clock::now() > deadline) return Status::Error("no hello in time");
  }
  Status s = loaded;
  if (s.ok()) s = shard->InitFromHello(ch->slot(ShmChannel::kRequest), n, model, o.n_threads);
  if (s.ok() && StepReplyCapacity(shard->layout()) > ch->capacity(ShmChannel::kReply)) {
    s = Status::Error("the reply slot (%zu bytes) cannot hold a full batch (%zu)",
                      ch->capacity(ShmChannel::kReply), StepReplyCapacity(shard->layout()));
  }
  const size_t r = WriteHelloReply(s.ok() ? StepStatus::kOk : StepStatus::kInvalidRequest,
                                   s.ok() ? shard->resident_bytes() : 0, shard->backend(),
                                   s.ok() ? "" : s.message(), ch->slot(ShmChannel::kReply),
                                   ch->capacity(ShmChannel::kReply));
  ch->Publish(ShmChannel::kReply, r);
  return s;
}

}  // namespace

Status ServeShm(ShmChannel* ch, const LlamaModel& model, const Status& loaded,
                const ShmServeOptions& o, StepShard* shard) {
  std::atomic<bool> done{false};
  std::thread heart([&] {
    while (!done.load()) {
      ch->Beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  Status result = AnswerHello(ch, model, loaded, o, shard);
  while (result.ok()) {
    size_t n = 0;
    bool timed_out = false;
    const Status s = ch->WaitFor(ShmChannel::kRequest, kPollMs, kSpinUs, &n, &timed_out);
    if (!s.ok()) {
      if (timed_out && !ParentGone(o)) continue;
      result = timed_out ? Status::Error("the coordinator is gone") : s;
      break;
    }
    const uint8_t* request = ch->slot(ShmChannel::kRequest);
    uint32_t magic = 0;
    if (n >= sizeof magic) memcpy(&magic, request, sizeof magic);
    if (magic == kByeMagic) {
      ch->Publish(ShmChannel::kReply, 0);
      break;
    }
    const size_t r = HandleStepMessage(request, n, shard, ch->slot(ShmChannel::kReply),
                                       ch->capacity(ShmChannel::kReply));
    ch->Publish(ShmChannel::kReply, r);
  }
  done.store(true);
  heart.join();
  return result;
}

}  // namespace pi

#include "common/transport/shm_serve.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/transport/hello_message.h"

namespace pi {

namespace {

// Between two FFN steps the coordinator runs a layer's attention: tens of
// microseconds on small models, where spinning through it saves a futex
// wake-up per layer (tens of microseconds on a VM), milliseconds on large
// ones, where a spin only takes a core from the coordinator's attention. So
// the worker spins only while the gaps between a reply and the next request
// have been short (their moving average below the spin), and otherwise
// sleeps at once; sleeping after the spin keeps an idle worker off a core.
constexpr int kSpinUs = 200;
constexpr int kPollMs = 200;  // how often an idle worker checks on its parent

bool ParentGone(const ShmServeOptions& o) {
  return o.parent_pid != 0 && getppid() != o.parent_pid;
}

Status AnswerHello(ShmChannel* ch, const LlamaModel& model, const Status& loaded,
                   const ShmServeOptions& o, WorkerShard* shard) {
  size_t n = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(o.hello_timeout_ms);
  while (true) {
    const Status s = ch->WaitFor(ShmChannel::kRequest, kPollMs, kSpinUs, &n);
    if (s.ok()) break;
    if (s.code() != Status::Code::kTimeout) return s;
    if (ParentGone(o)) return Status::Lost("the coordinator is gone");
    if (std::chrono::steady_clock::now() > deadline) return Status::Timeout("no hello in time");
  }
  Status s = loaded;
  if (s.ok()) s = shard->InitFromHello(ch->slot(ShmChannel::kRequest), n, model, o.n_threads);
  if (s.ok() && shard->reply_capacity() > ch->capacity(ShmChannel::kReply)) {
    s = Status::Error("the reply slot (%zu bytes) cannot hold the largest reply (%zu)",
                      ch->capacity(ShmChannel::kReply), shard->reply_capacity());
  }
  const size_t r = WriteHelloReply(s, shard->resident_bytes(), shard->backend(),
                                   ch->slot(ShmChannel::kReply), ch->capacity(ShmChannel::kReply));
  ch->Publish(ShmChannel::kReply, r);
  return s;
}

}  // namespace

Status ServeShm(ShmChannel* ch, const LlamaModel& model, const Status& loaded,
                const ShmServeOptions& o, WorkerShard* shard) {
  std::atomic<bool> done{false};
  std::thread heart([&] {
    while (!done.load()) {
      ch->Beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  Status result = AnswerHello(ch, model, loaded, o, shard);
  double gap_us = 0;  // moving average of reply-to-next-request gaps
  auto replied = std::chrono::steady_clock::now();
  while (result.ok()) {
    size_t n = 0;
    const int spin_us = gap_us < kSpinUs ? kSpinUs : 0;
    const Status s = ch->WaitFor(ShmChannel::kRequest, kPollMs, spin_us, &n);
    if (!s.ok()) {
      const bool timed_out = s.code() == Status::Code::kTimeout;
      if (timed_out && !ParentGone(o)) continue;
      result = timed_out ? Status::Lost("the coordinator is gone") : s;
      break;
    }
    const double gap =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - replied)
            .count();
    // Idle between requests (a new prompt) does not count as a step's gap.
    if (gap < 100000) gap_us = 0.9 * gap_us + 0.1 * gap;
    const uint8_t* request = ch->slot(ShmChannel::kRequest);
    uint32_t magic = 0;
    if (n >= sizeof magic) memcpy(&magic, request, sizeof magic);
    if (magic == kByeMagic) {
      ch->Publish(ShmChannel::kReply, 0);
      break;
    }
    const size_t r =
        shard->Handle(request, n, ch->slot(ShmChannel::kReply), ch->capacity(ShmChannel::kReply));
    ch->Publish(ShmChannel::kReply, r);
    replied = std::chrono::steady_clock::now();
  }
  done.store(true);
  heart.join();
  return result;
}

}  // namespace pi

// libFuzzer target for a gpu_worker's side of the device protocol
// (common/transport/device_message.h, gpu_worker/device_shard.h): any
// session of messages — in any order, with any bytes — goes through the
// DeviceShard, which must answer each with a well-formed reply (a cold part
// of a layer the plan says has one, a token's end of the size asked for, a
// kept sequence's bytes of the size a kSeqRead asked for, or an error status) and never crash,
// abort in the backend or read outside a message. Each input message is also parsed as a device
// hello.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/offline/synthetic_model.h"
#include "common/transport/device_message.h"
#include "common/transport/hello_message.h"
#include "gpu_worker/device_shard.h"
#include "tests/fuzz/device_fuzz_session.h"

namespace {

struct Fixture {
  std::vector<uint8_t> bytes;
  pi::LlamaModel model;
  std::unique_ptr<pi::DeviceShard> shard;
  std::vector<uint8_t> hello;
  std::vector<uint8_t> reply;
};

void Check(bool cond, const char* what) {
  if (!cond) {
    fprintf(stderr, "device_fuzz: %s\n", what);
    abort();
  }
}

// A fresh session per input: the shard's state (a token under way) would
// otherwise carry from one input to the next.
void NewSession(Fixture* f) {
  f->shard = std::make_unique<pi::DeviceShard>("host");
  Check(f->shard->InitFromHello(f->hello.data(), f->hello.size(), f->model, 1).ok(), "hello");
}

Fixture* Make() {
  Fixture* f = new Fixture();
  if (!pi::MakeStepFuzzModel(&f->bytes, &f->model)) abort();
  f->hello = pi::WriteDeviceHello(pi::ModelFingerprint(*f->model.file),
                                  pi::DeviceFuzzPlan(f->model.config));
  NewSession(f);
  f->reply.resize(f->shard->reply_capacity());
  return f;
}

// The size a kSeqRead request asks for (the payload's third field), or -1
// for any other message.
int64_t KeptReadSize(const uint8_t* msg, size_t n) {
  pi::StepRequestHeader h;
  int64_t size = -1;
  if (n < sizeof h + 3 * sizeof(int64_t)) return -1;
  memcpy(&h, msg, sizeof h);
  if (h.kind != static_cast<int32_t>(pi::StepKind::kSeqRead)) return -1;
  memcpy(&size, msg + sizeof h + 2 * sizeof(int64_t), sizeof size);
  return size;
}

void CheckReply(const Fixture& f, size_t n, int64_t read_size) {
  const pi::LlamaConfig& c = f.model.config;
  Check(n >= sizeof(pi::StepReplyHeader) && n <= f.reply.size(), "reply size out of bounds");
  pi::StepReplyHeader h;
  memcpy(&h, f.reply.data(), sizeof h);
  Check(h.magic == pi::kStepReplyMagic, "reply magic");
  Check(pi::Status::CodeFromWire(h.status) == static_cast<pi::Status::Code>(h.status),
        "an error reply's code is a Status code");
  Check(h.payload_bytes == n - sizeof h, "reply header disagrees with its size");
  if (h.status != static_cast<uint32_t>(pi::Status::Code::kOk)) return;
  const size_t embd = sizeof(float) * c.n_embd;
  if (h.kind == static_cast<int32_t>(pi::StepReplyKind::kCold)) {
    Check(h.layer >= 0 && h.layer < c.n_layer, "cold part of a layer off the device");
    Check(h.payload_bytes == embd, "cold part of the wrong size");
    return;
  }
  Check(h.kind == static_cast<int32_t>(pi::StepReplyKind::kDone), "reply kind");
  if (read_size >= 0) {
    Check(h.out == static_cast<int32_t>(pi::DeviceOut::kNothing) &&
              h.payload_bytes == static_cast<uint64_t>(read_size),
          "kept bytes of the wrong size");
    return;
  }
  const size_t want = h.out == static_cast<int32_t>(pi::DeviceOut::kH) ? embd
                      : h.out == static_cast<int32_t>(pi::DeviceOut::kLogits)
                          ? sizeof(float) * c.n_vocab
                          : 0;
  Check(h.payload_bytes == want, "token's end of the wrong size");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = Make();
  NewSession(f);
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t len = data[at] | (static_cast<size_t>(data[at + 1]) << 8);
    at += 2;
    const size_t n = std::min(len, size - at);
    // Messages arrive in aligned slots or buffers: copy to one.
    std::vector<uint32_t> aligned((n + 3) / 4);
    if (n > 0) memcpy(aligned.data(), data + at, n);
    at += n;
    const uint8_t* msg = reinterpret_cast<const uint8_t*>(aligned.data());
    CheckReply(*f, f->shard->Handle(msg, n, f->reply.data(), f->reply.size()),
               KeptReadSize(msg, n));
    pi::DevicePlan plan;
    (void)pi::ParseDeviceHello(msg, n, pi::ModelFingerprint(*f->model.file), &plan);
  }
  return 0;
}

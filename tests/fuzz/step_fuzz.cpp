// libFuzzer target for the worker's side of the step protocol: any bytes
// that arrive as a request go through the one step handler
// (common/transport/shard_server.h) and must give a well-formed reply (a partial
// sum of the right size, or an error status), and any bytes that arrive as
// a hello must be refused or give a shard layout that validates. The shard
// is a small ReLU model built in memory once, served twice: as a plain
// session and as a --sparse teal one (requests carry gate dots).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/offline/synthetic_model.h"
#include "common/transport/hello_message.h"
#include "common/transport/shard_server.h"
#include "common/transport/step_message.h"
#include "cpu_worker/cold_shard.h"
#include "tests/fuzz/step_fuzz_model.h"

namespace {

struct Fixture {
  std::vector<uint8_t> bytes;
  pi::LlamaModel model;
  std::unique_ptr<pi::WorkerShard> servers[2] = {pi::NewColdShardServer(),
                                                 pi::NewColdShardServer()};
  std::vector<uint8_t> reply;
};

Fixture* Make() {
  Fixture* f = new Fixture();
  if (!pi::MakeStepFuzzModel(&f->bytes, &f->model)) abort();
  for (int k = 0; k < 2; ++k) {
    pi::ShardLayout layout = pi::StepFuzzLayout(f->model.config);
    layout.gate_dots = k == 1;
    auto& shard = static_cast<pi::ShardServer&>(*f->servers[k]);
    if (!shard.Init(f->model, layout, 1).ok()) abort();
    f->reply.resize(pi::StepReplyCapacity(shard.layout()));
  }
  return f;
}

void Check(bool cond, const char* what) {
  if (!cond) {
    fprintf(stderr, "step_fuzz: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = Make();
  // Messages arrive in aligned slots or buffers: copy to one.
  std::vector<uint32_t> aligned((size + 3) / 4);
  if (size > 0) memcpy(aligned.data(), data, size);
  const uint8_t* msg = reinterpret_cast<const uint8_t*>(aligned.data());
  for (const std::unique_ptr<pi::WorkerShard>& server : f->servers) {
    auto& shard = static_cast<pi::ShardServer&>(*server);
    const size_t n = shard.Handle(msg, size, f->reply.data(), f->reply.size());
    Check(n >= sizeof(pi::StepReplyHeader) && n <= f->reply.size(), "reply size out of bounds");
    pi::StepReplyHeader h;
    memcpy(&h, f->reply.data(), sizeof h);
    Check(h.payload_bytes == n - sizeof h, "reply header disagrees with its size");
    pi::StepRequest r;
    const pi::Status parsed = pi::ParseStepRequest(msg, size, shard.layout(), &r);
    if (h.status == static_cast<uint32_t>(pi::Status::Code::kOk)) {
      Check(parsed.ok(), "accepted twice?");
      Check(n == pi::StepReplyBytes(r.batch, shard.layout().n_embd), "ok reply of wrong size");
    } else if (!parsed.ok()) {
      Check(h.status == static_cast<uint32_t>(pi::Status::Code::kInvalid),
            "a refused message's reply says invalid");
    }
  }
  pi::ShardLayout layout;
  if (pi::ParseHello(msg, size, pi::ModelFingerprint(*f->model.file), &layout).ok()) {
    layout.n_embd = f->model.config.n_embd;
    layout.n_ff = f->model.config.n_ff;
    (void)layout.Finish();
  }
  return 0;
}

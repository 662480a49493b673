#include "common/transport/shard_server.h"

#include <chrono>
#include <cstring>

#include "common/format/fingerprint.h"
#include "common/transport/hello_message.h"

namespace pi {

Status ShardServer::InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                                  int n_threads) {
  ShardLayout layout;
  PI_RETURN_IF_ERROR(ParseHello(hello, size, ModelFingerprint(*model.file), &layout));
  if (layout.n_layer != model.config.n_layer) {
    return Status::Invalid("hello: a shard of %d layers for a model of %d", layout.n_layer,
                           model.config.n_layer);
  }
  layout.n_embd = model.config.n_embd;
  layout.n_ff = model.config.n_ff;
  return Init(model, std::move(layout), n_threads);
}

Status ShardServer::Init(const LlamaModel& model, ShardLayout layout, int n_threads) {
  layout.whole_layers = whole_layers_;
  PI_RETURN_IF_ERROR(layout.Finish());
  std::unique_ptr<Shard> shard;
  PI_RETURN_IF_ERROR(make_(model, layout, n_threads, &shard));
  if (shard->max_batch() < layout.max_batch) {
    return Status::Unsupported("hello: batches of %d rows, the %s take %d", layout.max_batch,
                               shard->name(), shard->max_batch());
  }
  if (layout.gate_dots) {
    gate_dots_.assign(static_cast<size_t>(layout.max_batch) * layout.n_ff, 0.0f);
  }
  layout_ = std::move(layout);
  shard_ = std::move(shard);
  return Status::Ok();
}

size_t ShardServer::Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  StepRequest step;
  Status s = ParseStepRequest(request, size, layout_, &step);
  float* y = reinterpret_cast<float*>(reply + sizeof(StepReplyHeader));
  const size_t y_bytes = sizeof(float) * static_cast<size_t>(step.batch) * layout_.n_embd;
  int64_t fired = 0;
  if (s.ok()) {
    // The sum straight into the reply: the shard writes step.out.
    ShardStep st;
    st.layer = step.layer;
    st.batch = step.batch;
    st.x = step.x;
    st.ids = step.ids;
    st.row_n = step.row_n;
    st.out = y;
    if (step.gate_dots) {  // each candidate's dot into its neuron's slot
      const float* dot = step.gate_dots;
      const int32_t* ids = step.ids;
      const std::vector<int32_t>& owned = layout_.owned[step.layer];
      for (int b = 0; b < step.batch; ++b) {
        float* row = gate_dots_.data() + static_cast<size_t>(b) * layout_.n_ff;
        const int64_t n = step.row_n ? step.row_n[b] : static_cast<int64_t>(owned.size());
        const int32_t* row_ids = step.row_n ? ids : owned.data();
        for (int64_t k = 0; k < n; ++k) row[row_ids[k]] = *dot++;
        if (step.row_n) ids += n;
      }
      st.gate_dots = gate_dots_.data();
    }
    shard_->Start(st);
    const float* sum = nullptr;
    s = shard_->Wait(&sum, &fired);
    if (s.ok() && sum != y) memcpy(y, sum, y_bytes);
  }
  if (!s.ok()) return WriteErrorReply(request, size, s, reply, capacity);
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return WriteReplyHeader(step.step_id, StepReplyKind::kSum, step.layer, fired, ns, 0,
                          DeviceOut::kNothing, y_bytes, reply);
}

}  // namespace pi

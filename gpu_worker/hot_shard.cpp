#include "gpu_worker/hot_shard.h"

#include "common/format/fingerprint.h"
#include "common/transport/hello_message.h"
#include "gpu_worker/backend_factory.h"

namespace pi {

Status HotShard::InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                               int n_threads) {
  ShardLayout layout;
  PI_RETURN_IF_ERROR(ParseHello(hello, size, ModelFingerprint(*model.file), &layout));
  if (layout.n_layer != model.config.n_layer) {
    return Status::Error("hello: a shard of %d layers for a model of %d", layout.n_layer,
                         model.config.n_layer);
  }
  layout.n_embd = model.config.n_embd;
  layout.n_ff = model.config.n_ff;
  layout.whole_layers = true;
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, layout.owned));
  PI_RETURN_IF_ERROR(layout.Finish());
  std::unique_ptr<Shard> backend;
  PI_RETURN_IF_ERROR(LoadHotShard(kind_, n_threads, model, layout.owned, &backend));
  if (backend->max_batch() < layout.max_batch) {
    return Status::Error("hello: batches of %d rows, the %s take %d", layout.max_batch,
                         backend->name(), backend->max_batch());
  }
  layout_ = std::move(layout);
  backend_ = std::move(backend);
  return Status::Ok();
}

Status HotShard::Run(const StepRequest& step, float* y, int64_t* fired) {
  // ParseStepRequest checked: n_ids -1 (whole_layers), the layer and the
  // batch. The sum is written straight into the reply.
  ShardStep s;
  s.layer = step.layer;
  s.batch = step.batch;
  s.x = step.x;
  s.out = y;
  backend_->Start(s);
  const float* sum = nullptr;
  return backend_->Wait(&sum, fired);
}

}  // namespace pi

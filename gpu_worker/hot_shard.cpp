#include "gpu_worker/hot_shard.h"

#include "common/activation_stats.h"
#include "common/transport/hello_message.h"
#include "gpu_worker/ffn_backend_factory.h"

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
  std::unique_ptr<FfnBackend> backend;
  PI_RETURN_IF_ERROR(CreateFfnBackend(kind_, n_threads, &backend));
  PI_RETURN_IF_ERROR(backend->Load(model, layout.owned));
  layout_ = std::move(layout);
  backend_ = std::move(backend);
  return Status::Ok();
}

int64_t HotShard::Run(const StepRequest& step, float* y) {
  // ParseStepRequest checked: n_ids -1 (whole_layers). The backend takes a
  // row at a time: a batch costs the coordinator one round trip, the
  // backend one pass over its hot rows per row.
  const int64_t d = layout_.n_embd;
  int64_t fired = 0;
  for (int b = 0; b < step.batch; ++b) {
    backend_->Start(step.layer, step.x + b * d, y + b * d);
    fired += backend_->Wait();
  }
  return fired;
}

}  // namespace pi

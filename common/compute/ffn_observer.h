// FfnObserver: a read-only tap on each layer's FFN hidden activations, for
// profiling (which neurons fire how often) and for training activation
// predictors (which also need the FFN's input). Declared here, not in the
// engine, so the workers of the multi-process system can call the same hook.
#pragma once

namespace pi {

// The inputs --sparse teal thresholds (OnProjectionInput).
enum class ProjectionInput {
  kAttention,        // the attention's normed input: what q, k and v read
  kAttentionOutput,  // its heads' output: what o reads
  kFfn,              // the FFN's normed input: what gate and up read
};
constexpr int kProjectionInputs = 3;

class FfnObserver {
 public:
  virtual ~FfnObserver() = default;
  // Called right before layer `layer`'s FFN: `h` is [batch, n_embd], the
  // residual stream after attention and before the FFN norm (falcon: the
  // layer input, which its parallel attention and FFN both read) — what
  // PowerInfer's predictor reads. Valid only during the call. The default
  // ignores it, so profilers need not care.
  virtual void OnFfnInput(int layer, int batch, const float* h) {}
  // Called right after layer `layer` computed its activations for a batch:
  // `act` is [batch, n_ff] row-major, zero where a ReLU-form neuron did not
  // fire. Valid only during the call; the observer must not keep it.
  virtual void OnFfn(int layer, int batch, const float* act) = 0;
  // Called before OnFfn for steps that compute every neuron (dense ones):
  // `a` is [batch, n_ff], act(gate x) alone before the up product (ungated:
  // act(up x), the activation itself) — what CATS' thresholds are set on.
  // The default ignores it.
  virtual void OnGate(int layer, int batch, const float* a) {}
  // The input of layer `layer`'s projections `which` reads, [batch, width],
  // for every step (what --sparse teal's thresholds are set on). The default
  // ignores it.
  virtual void OnProjectionInput(int layer, ProjectionInput which, int batch, const float* x,
                                 int width) {}
};

}  // namespace pi

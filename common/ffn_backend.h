// FfnBackend: where the hot part of every FFN layer is computed — the
// neurons a placement put in VRAM. The layer sequencer sees one interface
// whether the hot rows live on a GPU (CUDA backend), or in host memory on a
// machine without one (HostFfnBackend, gpu_worker/host_ffn_backend.h). The
// backend in use is always reported, never silently swapped.
//
// A step is asynchronous: Start() hands over the layer's normed FFN input and
// returns at once, so the CPU computes the cold neurons meanwhile; Wait()
// blocks until the hot partial sum is in `y`.
#pragma once

#include <cstdint>
#include <vector>

#include "common/llama_model.h"
#include "common/status.h"

namespace pi {

// Checks hot neuron sets against a model: the model supports sparse FFNs
// (SupportsSparseFfn), one set per layer, ids sorted, unique and < n_ff.
Status ValidateHotNeurons(const LlamaModel& model,
                          const std::vector<std::vector<int32_t>>& hot_ids);

class FfnBackend {
 public:
  virtual ~FfnBackend() = default;
  virtual const char* name() const = 0;

  // Takes the hot neurons of every layer (sorted, unique ids < n_ff; a layer
  // may have none) and prepares their gate, up and down_t rows. The model
  // must support sparse FFNs (SupportsSparseFfn).
  virtual Status Load(const LlamaModel& model,
                      const std::vector<std::vector<int32_t>>& hot_ids) = 0;

  // Starts y = sum over layer's hot neurons of act_i(x) * down_t[i]; x
  // ([n_embd], the normed FFN input) and y ([n_embd], overwritten) must stay
  // valid until Wait() returns. One step at a time.
  virtual void Start(int layer, const float* x, float* y) = 0;
  // Returns the number of hot neurons that fired in the step.
  virtual int64_t Wait() = 0;
  // The bytes the loaded neurons take where the backend keeps them.
  virtual int64_t resident_bytes() const = 0;
};

}  // namespace pi

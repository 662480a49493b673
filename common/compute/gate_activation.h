// act(g) of an FFN gate's dot alone — an ungated FFN's up dot, its whole
// activation — as the dense FFN computes it (the same bits): what --sparse
// cats thresholds (NeuronFfn) and profiling records (DenseFfn). ReLU forms
// give relu(g).
#pragma once

#include "common/model/llama_model.h"
#include "kernels/cpu/ops.h"

namespace pi {

inline float ActivatedGate(FfnActivation a, float g) {
  switch (a) {
    case FfnActivation::kSilu:
      return SiluOf(g);
    case FfnActivation::kGeluUp:
    case FfnActivation::kGelu:
      return GeluOf(g);
    default:
      return g > 0.0f ? g : 0.0f;
  }
}

}  // namespace pi

// Llama 3.1's RoPE scaling as llama.cpp's converter stores it. Hugging Face's
// config.json describes it as rope_scaling {rope_type: "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}; the
// GGUF holds instead one factor per rotated pair, rope_freqs.weight, by which
// the runtime divides that pair's angle (common/model/llama_model.h):
//
//   wavelength λ_i = 2π / theta^(-2i / rope_dims)
//   λ_i < L0 / high_freq_factor   factor 1 (fast pairs: unchanged)
//   λ_i > L0 / low_freq_factor    factor `factor` (slow pairs: interpolated)
//   otherwise                     1 / ((1 - s) / factor + s),
//                                 s = (L0 / λ_i - low) / (high - low)
//
// with L0 the original context. Used by pi-synth (and the converter) to write
// such files.
#pragma once

#include <vector>

namespace pi {

struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192.0;
};

// The rope_dims / 2 factors of rope_freqs.weight.
std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& s, int rope_dims, double theta);

}  // namespace pi

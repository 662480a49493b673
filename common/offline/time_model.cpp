#include "common/offline/time_model.h"

#include <algorithm>
#include <cstdio>

namespace pi {
namespace {

int64_t Bytes(const Tensor& t) {
  return t.present() ? t.nbytes() : 0;
}

// Bytes of the FFN rows of one neuron, split by when they are read: the
// deciding row (gate; up when ungated) for every candidate, the rest only
// when the neuron fired. Layer 0's sizes (see the header).
struct FfnRowBytes {
  int64_t decide = 0;
  int64_t fired = 0;
};

FfnRowBytes FfnRows(const LlamaModel& model) {
  const LlamaConfig& c = model.config;
  const LlamaLayer& l0 = model.layers[0];
  const int64_t down_row =
      l0.ffn_down_t.present() ? l0.ffn_down_t.row_bytes : l0.ffn_down.nbytes() / c.n_ff;
  const bool gated = FfnIsGated(c.activation);
  return {gated ? l0.ffn_gate.row_bytes : l0.ffn_up.row_bytes,
          (gated ? l0.ffn_up.row_bytes : 0) + down_row};
}

double Tokens(const DecodeCounters& k) {
  return static_cast<double>(k.reps) * k.n_gen;
}

// KV cache bytes all layers' attention reads per token, averaged over a run
// from an empty context: (n_gen + 1) / 2 positions of the n_ctx reserved.
// The cache is the same size in every layer.
double KvBytesPerToken(const DecodeCounters& k) {
  if (k.n_ctx <= 0) return 0;
  return static_cast<double>(k.kv_cache_bytes) / k.n_ctx * (k.n_gen + 1) / 2.0;
}

bool AttnOnGpu(const Placement& plan, int il) {
  return il < static_cast<int>(plan.layers.size()) && plan.layers[il].attn_on_gpu;
}

// The GPU's bytes per token under `plan`.
double GpuBytes(const LlamaModel& model, const Placement& plan, const DecodeCounters& k) {
  const LlamaConfig& c = model.config;
  const FfnRowBytes rows = FfnRows(model);
  const double kv_layer = KvBytesPerToken(k) / c.n_layer;
  double bytes = 0;
  if (plan.output_on_gpu) {
    bytes += static_cast<double>(Bytes(model.output) + Bytes(model.output_norm) +
                                 Bytes(model.output_norm_b));
  }
  for (int il = 0; il < c.n_layer; ++il) {
    if (!AttnOnGpu(plan, il)) continue;
    const LayerPlacement& lp = plan.layers[il];
    const LlamaLayer& l = model.layers[il];
    bytes += static_cast<double>(AttentionBytes(l)) + kv_layer;
    if (lp.predictor_on_gpu && k.mode == SparseMode::kPredictor) {
      bytes += static_cast<double>(PredictorBytes(l));
    }
    // Every hot neuron's deciding row, every step.
    bytes += static_cast<double>(lp.gpu_neurons.size()) * static_cast<double>(rows.decide);
  }
  const double tokens = Tokens(k);
  if (tokens > 0) bytes += k.hot_fired / tokens * static_cast<double>(rows.fired);
  return bytes;
}

// Bytes per token crossing the CPU-GPU link under `plan`.
double TransferBytes(const LlamaModel& model, const Placement& plan, SparseMode mode) {
  const LlamaConfig& c = model.config;
  const double vec = 4.0 * c.n_embd;  // one f32 row of n_embd
  double bytes = 0;
  bool on_gpu = false;  // where the token's vector is: the embedding row starts on the CPU
  auto move_to = [&](bool gpu) {
    if (gpu != on_gpu) bytes += vec;
    on_gpu = gpu;
  };
  for (int il = 0; il < c.n_layer; ++il) {
    const bool gpu = AttnOnGpu(plan, il);
    move_to(gpu);
    if (gpu && static_cast<int64_t>(plan.layers[il].gpu_neurons.size()) < c.n_ff) {
      bytes += 2 * vec;  // normed x down, the cold part's y up
      if (mode == SparseMode::kPredictor) bytes += (c.n_ff + 7) / 8;
    }
  }
  move_to(plan.output_on_gpu);
  if (plan.output_on_gpu) bytes += 4.0 * c.n_vocab;  // logits down to the sampler
  return bytes;
}

}  // namespace

double DecodeBytesPerToken(const LlamaModel& model, const DecodeCounters& k) {
  const LlamaConfig& c = model.config;
  double bytes = static_cast<double>(model.DecodeWeightBytes());
  bytes += KvBytesPerToken(k);
  const double all = Tokens(k) * c.n_layer * c.n_ff;
  if (all > 0) {  // else nothing was counted: every FFN row once
    const FfnRowBytes rows = FfnRows(model);
    const double per_token = static_cast<double>(c.n_layer) * c.n_ff;
    bytes -= (1.0 - k.ffn_neurons / all) * per_token * static_cast<double>(rows.fired) +
             (1.0 - k.gate_rows / all) * per_token * static_cast<double>(rows.decide);
  }
  if (k.mode == SparseMode::kPredictor) {
    for (const LlamaLayer& l : model.layers) bytes += static_cast<double>(PredictorBytes(l));
  }
  if (k.mode == SparseMode::kTeal) {
    // The attention's matrices and the gate read the kept share of their
    // copies' rows; the gate's own rows (counted above as read) are not.
    for (const LlamaLayer& l : model.layers) {
      const double column_read =
          static_cast<double>(l.wq.nbytes() + l.wk.nbytes() + l.wv.nbytes() + l.wo.nbytes()) +
          static_cast<double>(l.ffn_gate.nbytes());
      bytes -= (1.0 - k.input_kept_share) * column_read;
    }
  }
  return bytes;
}

DeviceBytes DecodeDeviceBytes(const LlamaModel& model, const Placement* plan,
                              const DecodeCounters& counters) {
  DeviceBytes out;
  const double total = DecodeBytesPerToken(model, counters);
  if (plan == nullptr) {
    out.cpu = total;
    return out;
  }
  // Each byte is read once, by one device: the CPU's share is what the GPU
  // does not read.
  out.gpu = GpuBytes(model, *plan, counters);
  out.cpu = total - out.gpu;
  out.xfer = TransferBytes(model, *plan, counters.mode);
  return out;
}

TimeBound ComputeTimeBound(const DeviceBytes& bytes, double gpu_bw_gbs, double cpu_bw_gbs,
                           double link_gbs) {
  TimeBound b;
  if (bytes.gpu > 0 && gpu_bw_gbs <= 0) {
    b.note = "GPU bytes but no GPU bandwidth measured (no CUDA backend, no GPU, or --no-bw)";
    return b;
  }
  if (bytes.cpu > 0 && cpu_bw_gbs <= 0) {
    b.note = "CPU bytes but no CPU bandwidth measured (--no-bw)";
    return b;
  }
  const double gpu_s = bytes.gpu > 0 ? bytes.gpu / (gpu_bw_gbs * 1e9) : 0.0;
  const double cpu_s = bytes.cpu > 0 ? bytes.cpu / (cpu_bw_gbs * 1e9) : 0.0;
  b.computable = true;
  b.seconds = std::max(gpu_s, cpu_s);
  if (bytes.xfer <= 0) {
    b.includes_transfers = true;  // nothing to move: nothing left out
  } else if (link_gbs > 0) {
    b.seconds += bytes.xfer / (link_gbs * 1e9);
    b.includes_transfers = true;
  } else {
    b.note = "transfer time left out: the CPU-GPU link bandwidth is unknown";
  }
  return b;
}

std::string Fnv1a64Hex(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : bytes) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace pi

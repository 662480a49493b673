// The time model (common/offline/time_model.h): bytes per decoded token by device,
// recomputed here from the GGUF file's tensor sizes by name (not from
// LlamaModel's views or the placement code) for hand-made plans of every
// shape Place can give (nothing, the head only, a prefix of the layers,
// everything, all neurons hot); the no-plan case against the formula
// pi-bench used before the time model existed; the time bound on worked
// numbers; and FNV-1a 64 on its published test vectors.
#include "common/offline/time_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/synthetic_model.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

SyntheticModelOptions Llama(DType type, bool tied) {
  SyntheticModelOptions o;
  o.n_vocab = 320;
  o.n_embd = 64;
  o.n_layer = 4;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_ctx = 64;
  o.type = type;
  o.activation = "relu";
  o.down_t = true;
  o.tied = tied;
  return o;
}

SyntheticModelOptions Falcon(bool norm2) {
  SyntheticModelOptions o = Llama(DType::kF16, false);
  o.arch = "falcon";
  o.n_head_kv = 1;
  o.attn_norm_2 = norm2;
  return o;
}

// Writes the model, with a predictor (fc1 [n_embd, rank], fc2 [rank, n_ff],
// F16 zeros: only their sizes matter here) when rank > 0, and loads it.
void Load(const SyntheticModelOptions& o, int rank, const std::string& name, LlamaModel* m) {
  GgufWriter w;
  ASSERT_TRUE(AddSyntheticModel(o, &w).ok());
  const std::vector<uint8_t> zeros(2 * static_cast<size_t>(rank) * std::max(o.n_embd, o.n_ff));
  for (int l = 0; rank > 0 && l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ASSERT_TRUE(w.AddTensor(p + "fc1.weight", DType::kF16, {o.n_embd, rank}, zeros.data()).ok());
    ASSERT_TRUE(w.AddTensor(p + "fc2.weight", DType::kF16, {rank, o.n_ff}, zeros.data()).ok());
  }
  const std::string path = TempPath(name + ".gguf");
  ASSERT_TRUE(w.Write(path).ok());
  Status s = LoadLlamaModel(path, m);
  ASSERT_TRUE(s.ok()) << s.message();
}

// A tensor's bytes as the file lists them (0 when absent).
double File(const LlamaModel& m, const std::string& name) {
  const TensorInfo* t = m.file->FindTensor(name);
  return t ? static_cast<double>(t->nbytes) : 0.0;
}
double Blk(const LlamaModel& m, int l, const std::string& name) {
  return File(m, "blk." + std::to_string(l) + "." + name);
}

// The reference: each block's bytes from the file's tensor list.
struct Ref {
  const LlamaModel& m;
  const DecodeCounters& k;
  bool falcon() const { return m.config.arch == "falcon"; }
  double ff() const { return m.config.n_ff; }
  double Attention(int l) const {
    if (falcon()) {
      return Blk(m, l, "attn_norm.weight") + Blk(m, l, "attn_norm.bias") +
             Blk(m, l, "attn_qkv.weight") + Blk(m, l, "attn_output.weight") +
             Blk(m, l, "attn_norm_2.weight") + Blk(m, l, "attn_norm_2.bias");
    }
    return Blk(m, l, "attn_norm.weight") + Blk(m, l, "attn_q.weight") + Blk(m, l, "attn_k.weight") +
           Blk(m, l, "attn_v.weight") + Blk(m, l, "attn_output.weight") +
           Blk(m, l, "ffn_norm.weight");
  }
  double Predictor(int l) const {
    return k.mode == SparseMode::kPredictor ? Blk(m, l, "fc1.weight") + Blk(m, l, "fc2.weight")
                                            : 0.0;
  }
  double Kv() const {  // one layer, one token, averaged over the run
    return static_cast<double>(k.kv_cache_bytes) / k.n_ctx * (k.n_gen + 1) / 2.0 / m.config.n_layer;
  }
  double Head() const {
    return File(m, m.tied_output ? "token_embd.weight" : "output.weight") +
           File(m, "output_norm.weight") + File(m, "output_norm.bias");
  }
  double EmbeddingRow() const { return File(m, "token_embd.weight") / m.config.n_vocab; }
  double Down() const {
    return (Blk(m, 0, "ffn_down_t.weight") + Blk(m, 0, "ffn_down.weight")) / ff();
  }
  double DecideRow() const {
    return (falcon() ? Blk(m, 0, "ffn_up.weight") : Blk(m, 0, "ffn_gate.weight")) / ff();
  }
  double FiredRow() const { return (falcon() ? 0.0 : Blk(m, 0, "ffn_up.weight") / ff()) + Down(); }
  double Tokens() const { return static_cast<double>(k.reps) * k.n_gen; }
  double Total() const {
    double t = EmbeddingRow() + Head();
    for (int l = 0; l < m.config.n_layer; ++l) t += Attention(l) + Predictor(l) + Kv();
    return t + k.gate_rows / Tokens() * DecideRow() + k.ffn_neurons / Tokens() * FiredRow();
  }
};

// pi-bench's DecodeBytesPerToken before it moved to common/offline/time_model.cpp,
// verbatim: the no-plan bytes must not change.
double OldDecodeBytesPerToken(const LlamaModel& model, SparseMode mode, int ng,
                              int64_t kv_cache_bytes, int n_ctx, double ffn_neurons,
                              double gate_rows, int reps) {
  const LlamaConfig& c = model.config;
  double bytes = static_cast<double>(model.DecodeWeightBytes());
  bytes += static_cast<double>(kv_cache_bytes) / n_ctx * (ng + 1) / 2.0;
  const double all = static_cast<double>(reps) * ng * c.n_layer * c.n_ff;
  const LlamaLayer& l0 = model.layers[0];
  const int64_t down_row =
      l0.ffn_down_t.present() ? l0.ffn_down_t.row_bytes : l0.ffn_down.nbytes() / c.n_ff;
  const bool gated = FfnIsGated(c.activation);
  const int64_t decide_row = gated ? l0.ffn_gate.row_bytes : l0.ffn_up.row_bytes;
  const int64_t fired_row = (gated ? l0.ffn_up.row_bytes : 0) + down_row;
  const double per_token = static_cast<double>(c.n_layer) * c.n_ff;
  bytes -= (1.0 - ffn_neurons / all) * per_token * static_cast<double>(fired_row) +
           (1.0 - gate_rows / all) * per_token * static_cast<double>(decide_row);
  if (mode == SparseMode::kPredictor) {
    for (const pi::LlamaLayer& l : model.layers) {
      bytes += static_cast<double>(l.fc1.nbytes() + l.fc2.nbytes());
    }
  }
  return bytes;
}

// Counters of a run of 3 x 8 tokens; `fired` and `gate` are per-token shares
// of n_layer * n_ff, `hot_fired` a per-token count.
DecodeCounters Counters(const LlamaModel& m, SparseMode mode, double fired, double gate,
                        double hot_fired = 0) {
  DecodeCounters k;
  k.mode = mode;
  k.n_gen = 8;
  k.reps = 3;
  k.n_ctx = 16;
  k.kv_cache_bytes = int64_t{2} * m.config.n_layer * k.n_ctx * m.config.kv_dim() * 2;
  const double all = 24.0 * m.config.n_layer * m.config.n_ff;
  k.ffn_neurons = fired * all;
  k.gate_rows = gate * all;
  k.hot_fired = hot_fired * 24.0;
  return k;
}

// A plan of the model's shape: the head and the first `gpu_layers` layers'
// attention (and predictors) on the GPU, `hot` neurons hot in each of those.
Placement Plan(const LlamaModel& m, bool head, int gpu_layers, int hot) {
  Placement p;
  p.n_ff = m.config.n_ff;
  p.output_on_gpu = head;
  p.layers.resize(m.config.n_layer);
  for (int l = 0; l < gpu_layers; ++l) {
    p.layers[l].attn_on_gpu = true;
    p.layers[l].kv_on_gpu = true;
    p.layers[l].predictor_on_gpu = m.layers[l].fc1.present();
    for (int i = 0; i < hot; ++i) p.layers[l].gpu_neurons.push_back(2 * i);
  }
  return p;
}

TEST(TimeModelTest, WithoutAPlanEverythingIsTheCpusAndTheBytesAreUnchanged) {
  struct Case {
    SyntheticModelOptions o;
    int rank;
  };
  const std::vector<Case> cases = {{Llama(DType::kF16, false), 0},
                                   {Llama(DType::kQ8_0, true), 32},
                                   {Llama(DType::kQ4_0, false), 64},
                                   {Falcon(false), 32},
                                   {Falcon(true), 0}};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    LlamaModel m;
    Load(cases[ci].o, cases[ci].rank, "m" + std::to_string(ci), &m);
    for (SparseMode mode : {SparseMode::kOff, SparseMode::kOracle, SparseMode::kPredictor}) {
      for (double fired : {1.0, 0.1}) {
        const double gate = fired == 1.0 ? 1.0 : (mode == SparseMode::kPredictor ? 0.2 : 1.0);
        const DecodeCounters k = Counters(m, mode, fired, gate);
        const DeviceBytes b = DecodeDeviceBytes(m, nullptr, k);
        SCOPED_TRACE(std::to_string(ci) + " " + SparseModeName(mode) + " " + std::to_string(fired));
        EXPECT_EQ(b.gpu, 0.0);
        EXPECT_EQ(b.xfer, 0.0);
        EXPECT_DOUBLE_EQ(b.cpu, OldDecodeBytesPerToken(m, mode, k.n_gen, k.kv_cache_bytes, k.n_ctx,
                                                       k.ffn_neurons, k.gate_rows, k.reps));
        EXPECT_DOUBLE_EQ(b.cpu, DecodeBytesPerToken(m, k));
        EXPECT_NEAR(b.cpu, (Ref{m, k}.Total()), 1e-9 * b.cpu);
      }
    }
  }
}

// Checks gpu, cpu and the sum against the reference for `plan`.
void ExpectSplit(const LlamaModel& m, const Placement& plan, const DecodeCounters& k,
                 double want_xfer) {
  const Ref r{m, k};
  double gpu = plan.output_on_gpu ? r.Head() : 0.0;
  double hot = 0;
  for (int l = 0; l < m.config.n_layer; ++l) {
    if (!plan.layers[l].attn_on_gpu) continue;
    gpu += r.Attention(l) + r.Kv() + (plan.layers[l].predictor_on_gpu ? r.Predictor(l) : 0.0);
    hot += static_cast<double>(plan.layers[l].gpu_neurons.size());
  }
  gpu += hot * r.DecideRow() + k.hot_fired / r.Tokens() * r.FiredRow();
  double cpu = r.EmbeddingRow() + (plan.output_on_gpu ? 0.0 : r.Head());
  for (int l = 0; l < m.config.n_layer; ++l) {
    if (plan.layers[l].attn_on_gpu) {
      if (!plan.layers[l].predictor_on_gpu) cpu += r.Predictor(l);
    } else {
      cpu += r.Attention(l) + r.Kv() + r.Predictor(l);
    }
  }
  cpu += (k.gate_rows / r.Tokens() - hot) * r.DecideRow() +
         (k.ffn_neurons - k.hot_fired) / r.Tokens() * r.FiredRow();

  const DeviceBytes b = DecodeDeviceBytes(m, &plan, k);
  EXPECT_NEAR(b.gpu, gpu, 1e-9 * r.Total());
  EXPECT_NEAR(b.cpu, cpu, 1e-9 * r.Total());
  EXPECT_NEAR(b.gpu + b.cpu, DecodeBytesPerToken(m, k), 1e-9 * r.Total());
  EXPECT_DOUBLE_EQ(b.xfer, want_xfer);
}

TEST(TimeModelTest, EverythingOnTheGpuWithHotNeurons) {
  LlamaModel m;
  Load(Llama(DType::kQ8_0, false), 32, "all", &m);
  const double e = 4.0 * m.config.n_embd, v = 4.0 * m.config.n_vocab;
  const int n_layer = m.config.n_layer;
  const Placement plan = Plan(m, true, n_layer, 40);  // 40 of 256 hot per layer
  // Oracle: every gate row read; 10 % fire, of which 30 per token are hot.
  ExpectSplit(m, plan, Counters(m, SparseMode::kOracle, 0.1, 1.0, 30),
              e + n_layer * 2 * e + v);  // embedding up, x/y per layer, logits down
  // Predictor: the predictors are GPU bytes, a 256-bit mask goes down per layer.
  const double gate = (40.0 * n_layer + 50.0) / (n_layer * 256.0);  // hot + 50 cold candidates
  ExpectSplit(m, plan, Counters(m, SparseMode::kPredictor, 0.1, gate, 30),
              e + n_layer * (2 * e + 32) + v);
}

TEST(TimeModelTest, APrefixOfLayersMovesTheResidualBothWays) {
  LlamaModel m;
  Load(Llama(DType::kQ4_0, false), 32, "prefix", &m);
  const double e = 4.0 * m.config.n_embd, v = 4.0 * m.config.n_vocab;
  // Head + layers 0, 1 of 4 (Place's partial order), no neurons: embedding up,
  // x/y in layers 0 and 1, h down for layer 2, h up for the head, logits down.
  const Placement plan = Plan(m, true, 2, 0);
  ExpectSplit(m, plan, Counters(m, SparseMode::kOff, 1.0, 1.0), e + 2 * 2 * e + e + e + v);
  // Layer 1's predictor did not fit: its bytes stay on the CPU.
  Placement short_pred = plan;
  short_pred.layers[1].predictor_on_gpu = false;
  ExpectSplit(m, short_pred, Counters(m, SparseMode::kPredictor, 0.2, 0.3),
              e + 2 * (2 * e + 32) + e + e + v);
}

TEST(TimeModelTest, TheHeadAloneOnTheGpu) {
  LlamaModel m;
  Load(Llama(DType::kF16, true), 0, "head", &m);  // tied: the head is token_embd
  const double e = 4.0 * m.config.n_embd, v = 4.0 * m.config.n_vocab;
  ExpectSplit(m, Plan(m, true, 0, 0), Counters(m, SparseMode::kOff, 1.0, 1.0), e + v);
  // And an empty plan: all on the CPU, nothing moves, as without a plan.
  const DecodeCounters k = Counters(m, SparseMode::kOff, 1.0, 1.0);
  const Placement empty = Plan(m, false, 0, 0);
  const DeviceBytes b = DecodeDeviceBytes(m, &empty, k);
  EXPECT_EQ(b.gpu, 0.0);
  EXPECT_EQ(b.xfer, 0.0);
  EXPECT_DOUBLE_EQ(b.cpu, DecodeBytesPerToken(m, k));
}

TEST(TimeModelTest, AllNeuronsHotLeavesNoColdTransfer) {
  LlamaModel m;
  Load(Llama(DType::kF16, false), 0, "allhot", &m);
  const double e = 4.0 * m.config.n_embd, v = 4.0 * m.config.n_vocab;
  Placement plan = Plan(m, true, m.config.n_layer, 0);
  for (LayerPlacement& l : plan.layers) {
    for (int i = 0; i < m.config.n_ff; ++i) l.gpu_neurons.push_back(i);
  }
  // Every neuron hot: 12 % fire, all of them on the GPU; the CPU keeps only
  // the embedding row, and only the embedding and the logits move.
  const double fired = 0.12 * m.config.n_layer * m.config.n_ff;
  const DecodeCounters k = Counters(m, SparseMode::kOracle, 0.12, 1.0, fired);
  ExpectSplit(m, plan, k, e + v);
  EXPECT_NEAR(DecodeDeviceBytes(m, &plan, k).cpu, (Ref{m, k}.EmbeddingRow()), 1e-6);
}

TEST(TimeModelTest, HotNeuronsOfCpuLayersAreCpuBytes) {
  LlamaModel m;
  Load(Llama(DType::kF16, false), 0, "cpuhot", &m);
  Placement plan = Plan(m, true, 1, 16);
  plan.layers[3].gpu_neurons = {1, 5, 9};  // layer 3's attention is on the CPU
  ExpectSplit(m, plan, Counters(m, SparseMode::kOracle, 0.1, 1.0, 4),
              4.0 * m.config.n_embd * 5 + 4.0 * m.config.n_vocab);
}

TEST(TimeModelTest, FalconCountsItsFusedQkvAndItsUpRowsAsDeciding) {
  for (bool norm2 : {false, true}) {
    LlamaModel m;
    Load(Falcon(norm2), 32, norm2 ? "f2" : "f1", &m);
    const double e = 4.0 * m.config.n_embd, v = 4.0 * m.config.n_vocab;
    ExpectSplit(m, Plan(m, true, 3, 64), Counters(m, SparseMode::kPredictor, 0.1, 0.4, 10),
                e + 3 * (2 * e + 32) + e + e + v);
  }
}

TEST(TimeModelTest, TealReadsTheKeptShareOfTheAttentionAndGateBytes) {
  LlamaModel m;
  Load(Llama(DType::kQ4_0, true), 0, "teal", &m);
  DecodeCounters k = Counters(m, SparseMode::kTeal, 0.5, 1.0);
  const double all_inputs = DecodeBytesPerToken(m, k);  // input_kept_share 1
  k.input_kept_share = 0.4;
  double column_read = 0;
  for (const LlamaLayer& l : m.layers) {
    column_read += static_cast<double>(l.wq.nbytes() + l.wk.nbytes() + l.wv.nbytes() +
                                       l.wo.nbytes() + l.ffn_gate.nbytes());
  }
  EXPECT_DOUBLE_EQ(DecodeBytesPerToken(m, k), all_inputs - 0.6 * column_read);
  // Kept whole, teal reads what cats would.
  k.input_kept_share = 1;
  k.mode = SparseMode::kCats;
  EXPECT_DOUBLE_EQ(DecodeBytesPerToken(m, k), all_inputs);
}

TEST(TimeModelTest, BoundOnWorkedNumbers) {
  // GPU 1 GB at 1000 GB/s = 1 ms; CPU 0.2 GB at 50 GB/s = 4 ms; 1 MB over a
  // 25 GB/s link = 0.04 ms.
  DeviceBytes b{1e9, 2e8, 1e6};
  TimeBound t = ComputeTimeBound(b, 1000, 50, 25);
  EXPECT_TRUE(t.computable);
  EXPECT_TRUE(t.includes_transfers);
  EXPECT_NEAR(t.seconds, 4.04e-3, 1e-12);
  EXPECT_EQ(t.note, "");
  // The GPU the slower side: 1 GB at 100 GB/s = 10 ms.
  EXPECT_NEAR(ComputeTimeBound(b, 100, 50, 25).seconds, 10.04e-3, 1e-12);

  // Link unknown: the transfers are left out, and the note says so.
  t = ComputeTimeBound(b, 1000, 50, 0);
  EXPECT_TRUE(t.computable);
  EXPECT_FALSE(t.includes_transfers);
  EXPECT_NEAR(t.seconds, 4e-3, 1e-12);
  EXPECT_NE(t.note.find("link"), std::string::npos) << t.note;
}

TEST(TimeModelTest, BoundWithoutABandwidthIsNotComputable) {
  // GPU bytes, no GPU bandwidth: no division by zero, a reason instead.
  TimeBound t = ComputeTimeBound(DeviceBytes{1e9, 2e8, 1e6}, 0, 50, 25);
  EXPECT_FALSE(t.computable);
  EXPECT_EQ(t.seconds, 0.0);
  EXPECT_NE(t.note.find("GPU"), std::string::npos) << t.note;
  t = ComputeTimeBound(DeviceBytes{1e9, 2e8, 0}, 1000, 0, 0);
  EXPECT_FALSE(t.computable);
  EXPECT_NE(t.note.find("CPU"), std::string::npos) << t.note;

  // CPU only (no plan): no GPU bandwidth needed, nothing to transfer.
  t = ComputeTimeBound(DeviceBytes{0, 2e8, 0}, 0, 50, 0);
  EXPECT_TRUE(t.computable);
  EXPECT_TRUE(t.includes_transfers);
  EXPECT_NEAR(t.seconds, 4e-3, 1e-12);
  EXPECT_EQ(t.note, "");
}

TEST(TimeModelTest, Fnv1a64OnPublishedVectors) {
  // Test vectors of the FNV reference (Fowler, Noll, Vo).
  EXPECT_EQ(Fnv1a64Hex(""), "cbf29ce484222325");
  EXPECT_EQ(Fnv1a64Hex("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(Fnv1a64Hex("foobar"), "85944171f73967e8");
  EXPECT_EQ(Fnv1a64Hex(std::string("\0", 1)), "af63bd4c8601b7df");
}

}  // namespace
}  // namespace pi

// Placement: budgets are never exceeded (bytes recomputed here from the GGUF
// tensor sizes, not by the placement code), placement only grows with the
// budget, the hottest neurons go first, stats reach the right layer even when
// the stats file lists layers in lexicographic order (PowerInfer #247), a
// too-small budget is refused, and the plan and PowerInfer's gpuidx round trip
// and are never reused for another budget, context, group, model or stats.
#include "common/plan/placement.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/base/memory_limits.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/gpu_index.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Opts(int n_layer, DType type, bool down_t, bool tied, uint64_t seed = 1) {
  SyntheticModelOptions o;
  o.n_vocab = 96;
  o.n_embd = 64;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_ctx = 128;
  o.type = type;
  o.activation = "relu";
  o.down_t = down_t;
  o.tied = tied;
  o.seed = seed;
  return o;
}

void LoadSynthetic(const SyntheticModelOptions& o, const std::string& name, LlamaModel* m) {
  const std::string path = TempPath(name + ".gguf");
  Status s = WriteSyntheticModel(o, path);
  ASSERT_TRUE(s.ok()) << s.message();
  s = LoadLlamaModel(path, m);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Counts in [0, n_tokens], differently skewed per layer, with ties.
void FillStats(const LlamaModel& m, uint64_t salt, ActivationStats* st) {
  InitActivationStatsFor(m, st);
  st->set_n_tokens(1000);
  for (int il = 0; il < st->n_layer(); ++il) {
    int64_t* c = st->mutable_counts(il);
    for (int i = 0; i < st->n_ff(); ++i) {
      const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u + il * 97 + salt) % 1009;
      c[i] = static_cast<int64_t>(h * h / 1019) % 1001 / (1 + il % 3);
    }
  }
}

int64_t FileBytes(const LlamaModel& m, const std::string& name) {
  const TensorInfo* t = m.file->FindTensor(name);
  return t ? static_cast<int64_t>(t->nbytes) : 0;
}

// Bytes of `p` recomputed from the file's tensor sizes and the KV formula.
int64_t IndependentBytes(const LlamaModel& m, const SyntheticModelOptions& o, const Placement& p) {
  int64_t b = 0;
  if (p.output_on_gpu) {
    b += FileBytes(m, o.tied ? "token_embd.weight" : "output.weight") +
         FileBytes(m, "output_norm.weight");
  }
  const int64_t kv_dim = int64_t{o.n_head_kv} * (o.n_embd / o.n_head);
  for (int il = 0; il < o.n_layer; ++il) {
    const std::string pre = "blk." + std::to_string(il) + ".";
    const LayerPlacement& l = p.layers[il];
    if (l.attn_on_gpu) {
      for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"}) {
        b += FileBytes(m, pre + n + ".weight");
      }
    }
    if (l.kv_on_gpu) b += 2 * int64_t{p.n_ctx} * kv_dim * 2;  // K and V rows, f16 by default
    const int64_t per_neuron =
        (FileBytes(m, pre + "ffn_gate.weight") + FileBytes(m, pre + "ffn_up.weight") +
         FileBytes(m, pre + (o.down_t ? "ffn_down_t.weight" : "ffn_down.weight"))) /
        o.n_ff;
    b += per_neuron * static_cast<int64_t>(l.gpu_neurons.size());
  }
  return b;
}

bool IsSubset(const std::vector<int32_t>& small, const std::vector<int32_t>& big) {
  return std::includes(big.begin(), big.end(), small.begin(), small.end());
}

struct Variant {
  const char* name;
  DType type;
  bool down_t;
  bool tied;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.name;
}

class PlacementSweep : public ::testing::TestWithParam<Variant> {};

TEST_P(PlacementSweep, NeverOverBudgetAndGrowsWithBudget) {
  const Variant v = GetParam();
  const SyntheticModelOptions o = Opts(3, v.type, v.down_t, v.tied);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, v.name, &m));
  ActivationStats st;
  FillStats(m, 7, &st);
  PlacementOptions opt;
  opt.n_ctx = 100;
  opt.group = 32;
  const int64_t dense = DenseBytes(m, opt);
  int64_t all_neurons = 0, max_neuron = 0;
  for (int il = 0; il < o.n_layer; ++il) {
    all_neurons += NeuronBytes(m, il) * o.n_ff;
    max_neuron = std::max(max_neuron, NeuronBytes(m, il));
  }
  Placement prev;
  bool have_prev = false;
  for (int step = 0; step <= 60; ++step) {
    opt.vram_budget = dense + (all_neurons + 5000) * step / 57 + (step % 7) * 13;
    Placement p;
    Status s = Place(m, st, opt, &p);
    ASSERT_TRUE(s.ok()) << s.message();
    const int64_t indep = IndependentBytes(m, o, p);
    EXPECT_EQ(indep, p.used_bytes()) << "budget " << opt.vram_budget;
    EXPECT_LE(indep, opt.vram_budget);
    EXPECT_TRUE(p.dense_complete);
    int64_t placed = 0;
    for (const LayerPlacement& l : p.layers) {
      EXPECT_TRUE(l.attn_on_gpu && l.kv_on_gpu);
      EXPECT_TRUE(std::is_sorted(l.gpu_neurons.begin(), l.gpu_neurons.end()));
      placed += static_cast<int64_t>(l.gpu_neurons.size());
    }
    // Greedy fills the budget: what is left is less than one group.
    if (placed < int64_t{o.n_layer} * o.n_ff) {
      EXPECT_LT(opt.vram_budget - indep, max_neuron * opt.group) << "budget " << opt.vram_budget;
    }
    if (have_prev) {
      for (int il = 0; il < o.n_layer; ++il) {
        EXPECT_TRUE(IsSubset(prev.layers[il].gpu_neurons, p.layers[il].gpu_neurons))
            << "layer " << il << " budget " << opt.vram_budget;
      }
    }
    prev = p;
    have_prev = true;
  }
  // The last budget holds everything: whole layers on the GPU.
  for (const LayerPlacement& l : prev.layers) {
    EXPECT_EQ(static_cast<int>(l.gpu_neurons.size()), o.n_ff);
    EXPECT_DOUBLE_EQ(l.firing_share, 1.0);
  }
}

// The regime budgets (pi-place's "budgets at -c N" line), against plans made
// at them and their bytes recomputed from the file's tensor sizes: at
// `dense` every dense block and no neuron; at `everything` every neuron,
// the budget used to the byte; at `dense_and_quarter_ffn` every dense block
// and neurons of a quarter of the FFN's bytes, to within a group per layer.
TEST_P(PlacementSweep, RegimeBudgetsMarkDenseQuarterAndEverything) {
  const Variant v = GetParam();
  const SyntheticModelOptions o = Opts(3, v.type, v.down_t, v.tied);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, std::string(v.name) + "_regimes", &m));
  ActivationStats st;
  FillStats(m, 5, &st);
  PlacementOptions opt;
  opt.n_ctx = 64;
  opt.group = 32;
  const RegimeBudgets b = GetRegimeBudgets(m, opt);
  ASSERT_LT(b.dense, b.dense_and_quarter_ffn);
  ASSERT_LT(b.dense_and_quarter_ffn, b.everything);
  int64_t max_neuron = 0;
  for (int il = 0; il < o.n_layer; ++il) max_neuron = std::max(max_neuron, NeuronBytes(m, il));
  auto place = [&](int64_t budget, Placement* p, int64_t* neurons) {
    opt.vram_budget = budget;
    const Status s = Place(m, st, opt, p);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(p->dense_complete) << budget;
    EXPECT_EQ(IndependentBytes(m, o, *p), p->used_bytes()) << budget;
    *neurons = 0;
    for (const LayerPlacement& l : p->layers)
      *neurons += static_cast<int64_t>(l.gpu_neurons.size());
  };
  Placement p;
  int64_t neurons = 0;
  ASSERT_NO_FATAL_FAILURE(place(b.dense, &p, &neurons));
  EXPECT_EQ(neurons, 0);
  EXPECT_EQ(p.used_bytes(), b.dense);
  ASSERT_NO_FATAL_FAILURE(place(b.everything, &p, &neurons));
  EXPECT_EQ(neurons, int64_t{o.n_layer} * o.n_ff);
  EXPECT_EQ(p.used_bytes(), b.everything);
  const int64_t ffn = b.everything - b.dense;
  ASSERT_NO_FATAL_FAILURE(place(b.dense_and_quarter_ffn, &p, &neurons));
  EXPECT_LE(p.used_bytes(), b.dense_and_quarter_ffn);
  EXPECT_GT(p.neuron_bytes, ffn / 4 - int64_t{o.n_layer} * opt.group * max_neuron);
  EXPECT_NE(RegimeBudgetsString(b).find("with a quarter of the FFN " +
                                        HumanBytes(b.dense_and_quarter_ffn)),
            std::string::npos);
}

// Two devices (PlaceOnDevices, --gpus): over a grid of budget pairs, equal
// and not, from below one layer's dense blocks to everything, each device's
// bytes (recomputed from the file's tensor sizes for its own layers and
// head) stay within its budget, the ranges cover the GPU layers in order,
// the plan file keeps the devices, and one device is Place.
TEST_P(PlacementSweep, TwoDevicesNeverOverEitherBudget) {
  const Variant v = GetParam();
  const SyntheticModelOptions o = Opts(5, v.type, v.down_t, v.tied);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, std::string(v.name) + "_2dev", &m));
  ActivationStats st;
  FillStats(m, 11, &st);
  PlacementOptions opt;
  opt.n_ctx = 100;
  opt.group = 32;
  opt.allow_partial_dense = true;
  const int64_t dense = DenseBytes(m, opt);
  int64_t all_neurons = 0;
  for (int il = 0; il < o.n_layer; ++il) all_neurons += NeuronBytes(m, il) * o.n_ff;
  const int64_t whole = dense + all_neurons;
  int complete = 0, partial = 0;
  for (int i = 0; i <= 12; ++i) {
    for (int j = 0; j <= 12; ++j) {
      opt.device_budgets = {whole * i / 16 + i * 7, whole * j / 9 + j * 3};
      Placement p;
      const Status s = PlaceOnDevices(m, st, opt, &p);
      ASSERT_TRUE(s.ok()) << s.message();
      SCOPED_TRACE("budgets " + std::to_string(opt.device_budgets[0]) + ", " +
                   std::to_string(opt.device_budgets[1]));
      ASSERT_EQ(p.device_budgets, opt.device_budgets);
      ASSERT_EQ(p.device_layers.size(), 2u);
      int first = 0, gpu_layers = 0;
      for (const LayerPlacement& l : p.layers) gpu_layers += l.attn_on_gpu ? 1 : 0;
      EXPECT_EQ(p.device_layers[0] + p.device_layers[1], gpu_layers);
      int64_t sum = 0;
      for (int k = 0; k < 2; ++k) {
        Placement mine = p;  // only device k's layers and head
        for (int il = 0; il < o.n_layer; ++il) {
          if (il < first || il >= first + p.device_layers[k]) mine.layers[il] = LayerPlacement();
        }
        mine.output_on_gpu = p.output_device == k;
        const int64_t bytes = IndependentBytes(m, o, mine);
        EXPECT_LE(bytes, opt.device_budgets[k]) << "device " << k;
        EXPECT_EQ(bytes, DeviceUsedBytes(p, m, k)) << "device " << k;
        sum += bytes;
        first += p.device_layers[k];
      }
      EXPECT_EQ(sum, p.used_bytes());
      for (int il = 0; il < o.n_layer; ++il) {
        const LayerPlacement& l = p.layers[il];
        EXPECT_EQ(l.attn_on_gpu, il < gpu_layers) << "layer " << il;  // a prefix
        if (!l.attn_on_gpu) {
          EXPECT_TRUE(l.gpu_neurons.empty()) << "layer " << il;
        }
      }
      if (p.dense_complete) {
        ++complete;
        EXPECT_TRUE(p.output_on_gpu);
      } else {
        ++partial;
        EXPECT_EQ(p.neuron_bytes, 0);
      }
      if (i == 6 && j == 5) {  // the plan file keeps the devices
        const std::string path = TempPath(std::string(v.name) + "_2dev.plan.gguf");
        ASSERT_TRUE(WritePlan(p, path).ok());
        Placement back;
        const Status r = ReadPlan(path, &back);
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_EQ(back.device_budgets, p.device_budgets);
        EXPECT_EQ(back.device_layers, p.device_layers);
        EXPECT_EQ(back.output_device, p.output_device);
        EXPECT_TRUE(CheckPlanMatches(back, m, st, opt).ok());
        PlacementOptions other = opt;
        other.device_budgets = {opt.device_budgets[1], opt.device_budgets[0]};
        EXPECT_THAT(CheckPlanMatches(back, m, st, other).message(),
                    HasSubstr("made for VRAM budgets of"));
        std::remove(path.c_str());
      }
    }
  }
  EXPECT_GT(complete, 20);
  EXPECT_GT(partial, 5);
  // Equal budgets holding every dense block: the layers split evenly, and
  // each device has room left for its layers' hot neurons.
  opt.device_budgets = {dense / 2 + all_neurons / 4, dense / 2 + all_neurons / 4};
  Placement even;
  ASSERT_TRUE(PlaceOnDevices(m, st, opt, &even).ok());
  EXPECT_TRUE(even.dense_complete);
  EXPECT_LE(std::abs(even.device_layers[0] - even.device_layers[1]), 1);
  for (int il = 0; il < o.n_layer; ++il) {
    EXPECT_GT(even.layers[il].gpu_neurons.size(), 0u) << "layer " << il;
  }
  // Unequal: the larger budget takes more layers.
  opt.device_budgets = {dense / 4 + all_neurons / 8, 3 * dense / 4 + all_neurons / 3};
  Placement uneven;
  ASSERT_TRUE(PlaceOnDevices(m, st, opt, &uneven).ok());
  EXPECT_TRUE(uneven.dense_complete);
  EXPECT_LT(uneven.device_layers[0], uneven.device_layers[1]);
  // One device is Place.
  opt.device_budgets = {dense + all_neurons / 3};
  Placement a, b;
  ASSERT_TRUE(PlaceOnDevices(m, st, opt, &a).ok());
  opt.vram_budget = opt.device_budgets[0];
  opt.device_budgets.clear();
  ASSERT_TRUE(Place(m, st, opt, &b).ok());
  EXPECT_EQ(a.used_bytes(), b.used_bytes());
  for (int il = 0; il < o.n_layer; ++il)
    EXPECT_EQ(a.layers[il].gpu_neurons, b.layers[il].gpu_neurons);
  EXPECT_EQ(a.device_layers, std::vector<int32_t>{o.n_layer});
}

INSTANTIATE_TEST_SUITE_P(Types, PlacementSweep,
                         ::testing::Values(Variant{"f32_down_t", DType::kF32, true, false},
                                           Variant{"q8_0_down", DType::kQ8_0, false, false},
                                           Variant{"q4_0_down_t_tied", DType::kQ4_0, true, true},
                                           Variant{"f16_down_tied", DType::kF16, false, true}),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });

TEST(Placement, HottestNeuronsOfALayerGoFirst) {
  const SyntheticModelOptions o = Opts(3, DType::kQ8_0, true, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ActivationStats st;
  FillStats(m, 3, &st);
  PlacementOptions opt;
  opt.n_ctx = 64;
  opt.group = 16;
  opt.vram_budget = DenseBytes(m, opt) + NeuronBytes(m, 0) * o.n_ff;  // about a third
  Placement p;
  ASSERT_TRUE(Place(m, st, opt, &p).ok());
  int64_t total = 0;
  for (int il = 0; il < o.n_layer; ++il) {
    const std::vector<int32_t>& ids = p.layers[il].gpu_neurons;
    total += static_cast<int64_t>(ids.size());
    EXPECT_EQ(ids.size() % opt.group, 0u) << "whole groups only (n_ff is a multiple)";
    const std::set<int32_t> on(ids.begin(), ids.end());
    int64_t min_on = 1 << 30, max_off = -1, fired_on = 0, fired = 0;
    for (int i = 0; i < o.n_ff; ++i) {
      const int64_t c = st.counts(il)[i];
      fired += c;
      if (on.count(i)) {
        min_on = std::min(min_on, c);
        fired_on += c;
      } else {
        max_off = std::max(max_off, c);
      }
    }
    if (!ids.empty()) {
      EXPECT_GE(min_on, max_off) << "layer " << il;
    }
    EXPECT_DOUBLE_EQ(p.layers[il].firing_share, static_cast<double>(fired_on) / fired);
  }
  EXPECT_GT(total, 0);
  EXPECT_LT(total, int64_t{o.n_layer} * o.n_ff);
}

// A stats file whose tensors are in lexicographic order (blk.0, blk.1,
// blk.10, blk.11, blk.2, ...), as PowerInfer's export_split.py read them.
void WriteLexicographicStats(const ActivationStats& st, const std::string& path) {
  std::vector<std::string> names;
  for (int il = 0; il < st.n_layer(); ++il) names.push_back(std::to_string(il));
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names[2], "10");
  GgufWriter w;
  w.Set("pi.stats.version", GgufValue::U32(1));
  w.Set("pi.stats.model_name", GgufValue::String(st.model_name));
  w.Set("pi.stats.model_fingerprint", GgufValue::String(FingerprintHex(st.model_fingerprint)));
  w.Set("pi.stats.n_layer", GgufValue::U32(st.n_layer()));
  w.Set("pi.stats.n_ff", GgufValue::U32(st.n_ff()));
  w.Set("pi.stats.n_tokens", GgufValue::U64(st.n_tokens()));
  w.Set("pi.stats.activation", GgufValue::String("relu"));
  w.Set("pi.stats.corpus", GgufValue::String("test"));
  for (const std::string& n : names) {
    const int il = std::stoi(n);
    std::vector<int32_t> row(st.counts(il), st.counts(il) + st.n_ff());
    ASSERT_TRUE(
        w.AddTensor("blk." + n + ".ffn_fire_count", DType::kI32, {st.n_ff()}, row.data()).ok());
  }
  Status s = w.Write(path);
  ASSERT_TRUE(s.ok()) << s.message();
}

TEST(Placement, StatsAreMatchedToLayersByNumber) {
  const SyntheticModelOptions o = Opts(12, DType::kF16, true, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m12", &m));
  ActivationStats st;
  InitActivationStatsFor(m, &st);
  st.set_n_tokens(500);
  // Layer L: neurons 17*L .. 17*L+31 (mod n_ff) fire on every token, the rest
  // on a few; so every layer's hot set is different.
  auto hot = [&](int il) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 32; ++k) ids.push_back((17 * il + k) % o.n_ff);
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  for (int il = 0; il < o.n_layer; ++il) {
    int64_t* c = st.mutable_counts(il);
    for (int i = 0; i < o.n_ff; ++i) c[i] = i % 5;
    for (int32_t id : hot(il)) c[id] = 500;
  }
  const std::string path = TempPath("lex.stats.gguf");
  ASSERT_NO_FATAL_FAILURE(WriteLexicographicStats(st, path));
  ActivationStats read;
  Status s = ReadActivationStats(path, &read);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(CheckStatsMatchModel(read, m).ok());

  PlacementOptions opt;
  opt.n_ctx = 32;
  opt.group = 32;
  opt.vram_budget = DenseBytes(m, opt);
  for (int il = 0; il < o.n_layer; ++il) opt.vram_budget += 32 * NeuronBytes(m, il);
  Placement p;
  s = Place(m, read, opt, &p);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int il = 0; il < o.n_layer; ++il) {
    EXPECT_EQ(p.layers[il].gpu_neurons, hot(il)) << "layer " << il;
    EXPECT_NEAR(p.layers[il].firing_share, 32.0 * 500 / (32 * 500 + 2.0 * 224), 0.01);
  }
  EXPECT_NE(p.layers[10].gpu_neurons, p.layers[1].gpu_neurons);
  EXPECT_NE(p.layers[2].gpu_neurons, p.layers[10].gpu_neurons);
}

TEST(Placement, TooSmallBudgetNamesTheBytesNeeded) {
  const SyntheticModelOptions o = Opts(2, DType::kF32, true, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ActivationStats st;
  FillStats(m, 1, &st);
  PlacementOptions opt;
  opt.n_ctx = 128;
  const int64_t dense = DenseBytes(m, opt);
  // Independently: output + output_norm + 2 layers' attention + KV cache.
  int64_t expect = FileBytes(m, "output.weight") + FileBytes(m, "output_norm.weight");
  for (int il = 0; il < 2; ++il) {
    const std::string pre = "blk." + std::to_string(il) + ".";
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"}) {
      expect += FileBytes(m, pre + n + ".weight");
    }
    expect += 2 * 128 * 32 * 2;  // K and V, kv_dim = 2 heads x 16, f16 (the default)
  }
  EXPECT_EQ(dense, expect);
  Placement p;
  for (int64_t budget : {int64_t{0}, dense / 2, dense - 1}) {
    opt.vram_budget = budget;
    Status s = Place(m, st, opt, &p);
    ASSERT_FALSE(s.ok()) << budget;
    EXPECT_THAT(s.message(), HasSubstr(std::to_string(dense) + " bytes"));
    EXPECT_THAT(s.message(), HasSubstr("too small"));
  }
  opt.vram_budget = dense;
  ASSERT_TRUE(Place(m, st, opt, &p).ok());
  EXPECT_EQ(p.used_bytes(), dense);
  EXPECT_TRUE(p.layers[0].gpu_neurons.empty());

  // With partial dense: a prefix of the priority order, no neurons.
  opt.allow_partial_dense = true;
  opt.vram_budget = dense - 1;
  ASSERT_TRUE(Place(m, st, opt, &p).ok());
  EXPECT_FALSE(p.dense_complete);
  // Attention and its KV cache are one block: the last layer's does not fit.
  EXPECT_TRUE(p.output_on_gpu && p.layers[0].attn_on_gpu && p.layers[0].kv_on_gpu);
  EXPECT_FALSE(p.layers.back().attn_on_gpu || p.layers.back().kv_on_gpu);
  EXPECT_EQ(IndependentBytes(m, o, p), p.used_bytes());
  EXPECT_LE(p.used_bytes(), opt.vram_budget);
  EXPECT_EQ(p.neuron_bytes, 0);
  opt.vram_budget = FileBytes(m, "output.weight");  // output_norm does not fit with it
  ASSERT_TRUE(Place(m, st, opt, &p).ok());
  EXPECT_FALSE(p.output_on_gpu);
  EXPECT_FALSE(p.layers[0].attn_on_gpu) << "a prefix: nothing after the first block that fails";
  EXPECT_EQ(p.used_bytes(), 0);
}

// A placement with some empty layers, some partial and (maybe) some full.
void MakePlan(const LlamaModel& m, const ActivationStats& st, int64_t extra, Placement* p) {
  PlacementOptions opt;
  opt.n_ctx = 77;
  opt.group = 8;
  opt.vram_budget = DenseBytes(m, opt) + extra;
  Status s = Place(m, st, opt, p);
  ASSERT_TRUE(s.ok()) << s.message();
}

TEST(Placement, PlanRoundTripAndRejection) {
  const SyntheticModelOptions o = Opts(3, DType::kQ8_0, false, false);
  LlamaModel m, other;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Opts(3, DType::kQ8_0, false, false, 2), "other", &other));
  ActivationStats st;
  FillStats(m, 5, &st);
  for (int i = 0; i < o.n_ff; ++i) st.mutable_counts(2)[i] = 0;  // layer 2 never fires: empty
  Placement p;
  ASSERT_NO_FATAL_FAILURE(MakePlan(m, st, 300 * NeuronBytes(m, 0), &p));
  ASSERT_TRUE(p.layers[2].gpu_neurons.empty());
  ASSERT_FALSE(p.layers[0].gpu_neurons.empty());

  const std::string path = TempPath("plan.gguf");
  Status s = WritePlan(p, path);
  ASSERT_TRUE(s.ok()) << s.message();
  Placement r;
  s = ReadPlan(path, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.vram_budget, p.vram_budget);
  EXPECT_EQ(r.n_ctx, 77);
  EXPECT_EQ(r.cache_type_k, DType::kF16);
  EXPECT_EQ(r.cache_type_v, DType::kF16);
  EXPECT_EQ(r.group, 8);
  EXPECT_EQ(r.n_ff, o.n_ff);
  EXPECT_EQ(r.model_fingerprint, ModelFingerprint(*m.file));
  EXPECT_EQ(r.stats_n_tokens, 1000u);
  EXPECT_EQ(r.dense_bytes, p.dense_bytes);
  EXPECT_EQ(r.neuron_bytes, p.neuron_bytes);
  EXPECT_TRUE(r.output_on_gpu && r.dense_complete);
  ASSERT_EQ(r.layers.size(), 3u);
  for (int il = 0; il < 3; ++il) {
    EXPECT_EQ(r.layers[il].gpu_neurons, p.layers[il].gpu_neurons);
    EXPECT_TRUE(r.layers[il].attn_on_gpu && r.layers[il].kv_on_gpu);
    EXPECT_FALSE(r.layers[il].predictor_on_gpu);
  }

  PlacementOptions opt;
  opt.n_ctx = 77;
  opt.group = 8;
  opt.vram_budget = p.vram_budget;
  EXPECT_TRUE(CheckPlanMatches(r, m, st, opt).ok());
  PlacementOptions bad = opt;
  bad.vram_budget += 1024;
  EXPECT_THAT(CheckPlanMatches(r, m, st, bad).message(), HasSubstr("VRAM budget"));
  bad = opt;
  bad.n_ctx = 78;
  EXPECT_THAT(CheckPlanMatches(r, m, st, bad).message(), HasSubstr("KV cache"));
  bad = opt;
  bad.cache_type_v = DType::kF32;  // the plan's cache is f16 / f16
  EXPECT_THAT(CheckPlanMatches(r, m, st, bad).message(),
              HasSubstr("KV cache of f16 keys and f16 values, not f16 and f32"));
  bad = opt;
  bad.group = 32;
  EXPECT_THAT(CheckPlanMatches(r, m, st, bad).message(), HasSubstr("groups"));
  ActivationStats st2 = st;
  st2.mutable_counts(1)[3] += 1;
  EXPECT_THAT(CheckPlanMatches(r, m, st2, opt).message(), HasSubstr("other statistics"));
  ActivationStats st3 = st;
  st3.set_n_tokens(1001);
  EXPECT_FALSE(CheckPlanMatches(r, m, st3, opt).ok());
  EXPECT_THAT(CheckPlanMatches(r, other, st, opt).message(), HasSubstr("not this model"));
}

// Eight processes making the same plan at once (the first use of one
// --vram-budget by eight tools): every write succeeds and one whole, valid
// plan results, with no temporary left beside it.
TEST(Placement, ConcurrentPlanWritersAllSucceed) {
  const SyntheticModelOptions o = Opts(3, DType::kQ8_0, false, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ActivationStats st;
  FillStats(m, 5, &st);
  Placement p;
  ASSERT_NO_FATAL_FAILURE(MakePlan(m, st, 300 * NeuronBytes(m, 0), &p));
  const std::string dir = TempPath("plans");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string path = dir + "/m.plan-1M.gguf";
  for (int round = 0; round < 3; ++round) {
    std::vector<pid_t> pids;
    for (int w = 0; w < 8; ++w) {
      const pid_t pid = fork();
      if (pid == 0) _exit(WritePlan(p, path).ok() ? 0 : 1);
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    Placement r;
    const Status s = ReadPlan(path, &r);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(r.used_bytes(), p.used_bytes());
    int entries = 0;
    DIR* d = opendir(dir.c_str());
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      entries += n != "." && n != "..";  // temporaries start with '.' too
    }
    closedir(d);
    EXPECT_EQ(entries, 1) << "a temporary was left behind";
  }
}

TEST(Placement, PlanReaderRejectsBadFiles) {
  const SyntheticModelOptions o = Opts(2, DType::kF32, true, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ActivationStats st;
  FillStats(m, 5, &st);
  Placement p;
  ASSERT_NO_FATAL_FAILURE(MakePlan(m, st, 40 * NeuronBytes(m, 0), &p));
  ASSERT_FALSE(p.layers[0].gpu_neurons.empty());
  const std::string path = TempPath("bad.gguf");
  Placement r;

  Placement q = p;
  std::swap(q.layers[0].gpu_neurons.front(), q.layers[0].gpu_neurons.back());  // unsorted
  ASSERT_TRUE(WritePlan(q, path).ok());
  EXPECT_THAT(ReadPlan(path, &r).message(), HasSubstr("blk.0.gpu_neurons"));
  q = p;
  q.layers[0].gpu_neurons.back() = o.n_ff;  // out of range
  ASSERT_TRUE(WritePlan(q, path).ok());
  EXPECT_THAT(ReadPlan(path, &r).message(), HasSubstr("out of range"));
  q = p;
  q.neuron_bytes = q.vram_budget;  // more than the budget
  ASSERT_TRUE(WritePlan(q, path).ok());
  EXPECT_THAT(ReadPlan(path, &r).message(), HasSubstr("inconsistent"));
  // A stats file is not a plan.
  ASSERT_TRUE(WriteActivationStats(st, path).ok());
  EXPECT_THAT(ReadPlan(path, &r).message(), HasSubstr("pi.plan.version"));
}

TEST(GpuIndex, RoundTripInPowerInfersLayout) {
  const SyntheticModelOptions o = Opts(3, DType::kF16, true, false);
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "m", &m));
  ActivationStats st;
  FillStats(m, 9, &st);
  for (int i = 0; i < o.n_ff; ++i) st.mutable_counts(1)[i] = 0;     // layer 1: empty
  for (int i = 0; i < o.n_ff; ++i) st.mutable_counts(0)[i] = 1000;  // layer 0: all on GPU
  Placement p;
  ASSERT_NO_FATAL_FAILURE(MakePlan(m, st, 300 * NeuronBytes(m, 0), &p));
  ASSERT_EQ(static_cast<int>(p.layers[0].gpu_neurons.size()), o.n_ff);
  ASSERT_TRUE(p.layers[1].gpu_neurons.empty());
  ASSERT_FALSE(p.layers[2].gpu_neurons.empty());

  const std::string path = TempPath("model.gguf.generated.gpuidx");
  const GpuIndex g = GpuIndexFromPlacement(p);
  Status s = WriteGpuIndex(g, path);
  ASSERT_TRUE(s.ok()) << s.message();

  // The layout, parsed here by hand from the GGUF v3 spec rather than by
  // GgufFile, which the reader under test uses.
  std::vector<uint8_t> bytes;
  {
    FILE* fp = fopen(path.c_str(), "rb");
    ASSERT_NE(fp, nullptr);
    int ch;
    while ((ch = fgetc(fp)) != EOF) bytes.push_back(static_cast<uint8_t>(ch));
    fclose(fp);
  }
  size_t pos = 0;
  auto u32 = [&]() {
    uint32_t v = 0;
    if (pos + 4 <= bytes.size()) memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto u64 = [&]() {
    uint64_t v = 0;
    if (pos + 8 <= bytes.size()) memcpy(&v, bytes.data() + pos, 8);
    pos += 8;
    return v;
  };
  auto str = [&]() {
    const uint64_t n = u64();
    std::string v;
    if (pos + n <= bytes.size()) v.assign(reinterpret_cast<const char*>(bytes.data() + pos), n);
    pos += n;
    return v;
  };
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 4), "PWRI");
  pos = 4;
  EXPECT_EQ(u32(), 3u);  // version
  EXPECT_EQ(u64(), 6u);  // tensors
  EXPECT_EQ(u64(), 3u);  // metadata pairs
  EXPECT_EQ(str(), "general.architecture");
  EXPECT_EQ(u32(), 8u);  // string
  EXPECT_EQ(str(), "generic.gpu_index");
  EXPECT_EQ(str(), "generic.gpu_index.block_count");
  EXPECT_EQ(u32(), 4u);  // u32
  EXPECT_EQ(u32(), 3u);
  EXPECT_EQ(str(), "split.vram_capacity");
  EXPECT_EQ(u32(), 10u);  // u64
  EXPECT_EQ(u64(), static_cast<uint64_t>(p.vram_budget));
  std::vector<uint64_t> offsets, lengths;
  for (int il = 0; il < 3; ++il) {
    for (const char* kind : {".gpu_idx", ".gpu_bucket"}) {
      EXPECT_EQ(str(), "blk." + std::to_string(il) + kind);
      EXPECT_EQ(u32(), 1u);  // n_dims
      lengths.push_back(u64());
      EXPECT_EQ(u32(), 26u);  // GGML_TYPE_I32
      offsets.push_back(u64());
    }
  }
  const size_t data = (pos + 31) / 32 * 32;
  for (int il = 0; il < 3; ++il) {
    const std::vector<int32_t>& ids = p.layers[il].gpu_neurons;
    const std::set<int32_t> on(ids.begin(), ids.end());
    ASSERT_EQ(lengths[2 * il], static_cast<uint64_t>(o.n_ff));
    ASSERT_EQ(lengths[2 * il + 1], ids.size());
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(offsets[2 * il + k] % 32, 0u);
      ASSERT_LE(data + offsets[2 * il + k] + 4 * lengths[2 * il + k], bytes.size());
    }
    for (int i = 0; i < o.n_ff; ++i) {
      int32_t v;
      memcpy(&v, bytes.data() + data + offsets[2 * il] + 4 * i, 4);
      EXPECT_EQ(v, on.count(i) ? 1 : 0);
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      int32_t v;
      memcpy(&v, bytes.data() + data + offsets[2 * il + 1] + 4 * k, 4);
      EXPECT_EQ(v, ids[k]);
    }
  }

  GpuIndex r;
  s = ReadGpuIndex(path, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.vram_capacity, g.vram_capacity);
  EXPECT_EQ(r.n_ff, o.n_ff);
  EXPECT_EQ(r.gpu_neurons, g.gpu_neurons);
}

TEST(GpuIndex, RejectsInconsistentFiles) {
  const std::string path = TempPath("bad.gpuidx");
  GpuIndex r;
  auto write = [&](const std::vector<int32_t>& idx, const std::vector<int32_t>& bucket,
                   const std::string& bucket_name) {
    GgufWriter w;
    w.SetSparseMagic(true);
    w.Set("general.architecture", GgufValue::String("generic.gpu_index"));
    w.Set("generic.gpu_index.block_count", GgufValue::U32(1));
    w.Set("split.vram_capacity", GgufValue::U64(1 << 30));
    ASSERT_TRUE(w.AddTensor("blk.0.gpu_idx", DType::kI32, {4}, idx.data()).ok());
    ASSERT_TRUE(
        w.AddTensor(bucket_name, DType::kI32, {static_cast<int64_t>(bucket.size())}, bucket.data())
            .ok());
    ASSERT_TRUE(w.Write(path).ok());
  };
  write({0, 1, 1, 0}, {1, 2}, "blk.0.gpu_bucket");
  Status s = ReadGpuIndex(path, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.vram_capacity, 1u << 30);
  EXPECT_EQ(r.gpu_neurons[0], (std::vector<int32_t>{1, 2}));
  write({0, 1, 1, 0}, {2, 1}, "blk.0.gpu_bucket");
  EXPECT_THAT(ReadGpuIndex(path, &r).message(), HasSubstr("blk.0.gpu_bucket"));
  write({0, 2, 1, 0}, {1, 2}, "blk.0.gpu_bucket");
  EXPECT_THAT(ReadGpuIndex(path, &r).message(), HasSubstr("0 or 1"));
  write({0, 1, 1, 1}, {1, 2}, "blk.0.gpu_bucket");
  EXPECT_THAT(ReadGpuIndex(path, &r).message(), HasSubstr("marks 3"));
  write({0, 1, 1, 0}, {1, 2}, "blk.1.gpu_bucket");
  EXPECT_THAT(ReadGpuIndex(path, &r).message(), HasSubstr("expected 'blk.0.gpu_idx'"));

  GpuIndex g;
  g.n_ff = 4;
  g.gpu_neurons = {{3, 1}};
  EXPECT_FALSE(WriteGpuIndex(g, path).ok());
  g.gpu_neurons = {{4}};
  EXPECT_FALSE(WriteGpuIndex(g, path).ok());
}

// Truncated and corrupted index files give errors, never a crash or an
// out-of-bounds read (run under -fsanitize=address to see the latter).
TEST(GpuIndex, SurvivesTruncationAndCorruption) {
  GpuIndex g;
  g.vram_capacity = 12345;
  g.n_ff = 40;
  g.gpu_neurons = {{0, 5, 39}, {}, {1, 2, 3, 4}};
  const std::string path = TempPath("good.gpuidx");
  ASSERT_TRUE(WriteGpuIndex(g, path).ok());
  std::vector<uint8_t> bytes;
  {
    FILE* fp = fopen(path.c_str(), "rb");
    ASSERT_NE(fp, nullptr);
    int ch;
    while ((ch = fgetc(fp)) != EOF) bytes.push_back(static_cast<uint8_t>(ch));
    fclose(fp);
  }
  const std::string bad = TempPath("bad.gpuidx");
  auto write = [&](const std::vector<uint8_t>& b) {
    FILE* fp = fopen(bad.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    const size_t written = b.empty() ? 0 : fwrite(b.data(), 1, b.size(), fp);
    fclose(fp);
    ASSERT_EQ(written, b.size());
  };
  GpuIndex r;
  // The last tensor's data ends 4 * 4 bytes into the final 32-byte block.
  const size_t data_end = bytes.size() - 32 + 16;
  for (size_t n = 0; n < data_end; ++n) {
    ASSERT_NO_FATAL_FAILURE(write(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n)));
    EXPECT_FALSE(ReadGpuIndex(bad, &r).ok()) << "truncated to " << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> b = bytes;
      b[i] ^= x;
      ASSERT_NO_FATAL_FAILURE(write(b));
      ReadGpuIndex(bad, &r);  // any result but a crash
    }
  }
  ASSERT_TRUE(ReadGpuIndex(path, &r).ok());
  EXPECT_EQ(r.gpu_neurons, g.gpu_neurons);
}

TEST(Placement, BudgetString) {
  EXPECT_EQ(BudgetString(int64_t{11} << 30), "11G");
  EXPECT_EQ(BudgetString(int64_t{1536} << 20), "1536M");
  EXPECT_EQ(BudgetString(int64_t{2} << 40), "2T");
  EXPECT_EQ(BudgetString(1000), "1000");
  EXPECT_EQ(BudgetString(0), "0");
}

}  // namespace
}  // namespace pi

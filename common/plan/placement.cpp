#include "common/plan/placement.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "common/base/memory_limits.h"
#include "common/format/fingerprint.h"
#include "common/format/gguf.h"
#include "common/format/side_files.h"
#include "common/model/kv_cache.h"

namespace pi {
namespace {

// 2: KV cache row types; 3: attention + KV cache per layer; 4: several devices
constexpr uint32_t kPlanVersion = 4;
constexpr uint32_t kMaxDevices = 64;
constexpr uint32_t kMaxLayers = 1u << 16;
constexpr uint32_t kMaxFf = 1u << 24;

int64_t Bytes(const Tensor& t) {
  return t.present() ? t.nbytes() : 0;
}

int64_t OutputBytes(const LlamaModel& m) {
  return Bytes(m.output) + Bytes(m.output_norm) + Bytes(m.output_norm_b);
}

// One stage-2 candidate: neurons [begin, end) of a layer's frequency order.
struct Group {
  int layer;
  int index;  // within the layer
  int begin, end;
  int64_t firings;
  int64_t bytes;
};

// a before b: more firings per byte first (exact, by cross-multiplication),
// then lower layer, then lower group index.
bool Before(const Group& a, const Group& b) {
  const __int128 lhs = static_cast<__int128>(a.firings) * b.bytes;
  const __int128 rhs = static_cast<__int128>(b.firings) * a.bytes;
  if (lhs != rhs) return lhs > rhs;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.index < b.index;
}

std::string LayerTensorName(int layer) {
  return "blk." + std::to_string(layer) + ".gpu_neurons";
}

bool ParseHex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *out = std::stoull(s, nullptr, 16);
  return true;
}

// A metadata array of `n` integers (any integer element type).
Status GetIntArray(const GgufFile& f, const std::string& key, uint32_t n,
                   std::vector<int64_t>* out) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return Status::Error("key '%s' is missing", key.c_str());
  if (v->type != GgufType::kArray) return Status::Error("key '%s' is not an array", key.c_str());
  if (v->array.size() != n) {
    return Status::Error("key '%s' has %zu elements, expected %u (one per layer)", key.c_str(),
                         v->array.size(), n);
  }
  out->clear();
  for (const GgufValue& e : v->array) {
    if (!e.is_integer()) return Status::Error("key '%s' holds a non-integer", key.c_str());
    out->push_back(e.type == GgufType::kI8 || e.type == GgufType::kI16 ||
                           e.type == GgufType::kI32 || e.type == GgufType::kI64
                       ? e.i
                       : static_cast<int64_t>(e.u));
  }
  return Status::Ok();
}

GgufValue FlagArray(const std::vector<LayerPlacement>& layers, bool LayerPlacement::*flag) {
  std::vector<GgufValue> v;
  for (const LayerPlacement& l : layers) v.push_back(GgufValue::U8(l.*flag ? 1 : 0));
  return GgufValue::Array(GgufType::kU8, std::move(v));
}

}  // namespace

namespace {

// Stage 2 over layers [first, end): their neurons in groups of `group` by
// firing count, ranked by firings per byte (Before), placed as a prefix of
// that ranking while they fit in *left.
void PlaceGroups(const LlamaModel& model, const ActivationStats& stats, int group, int first,
                 int end, int64_t* left, Placement* p) {
  const int n_ff = model.config.n_ff;
  std::vector<std::vector<int32_t>> order(model.config.n_layer);
  std::vector<Group> groups;
  for (int il = first; il < end; ++il) {
    const int64_t* counts = stats.counts(il);
    std::vector<int32_t>& ord = order[il];
    ord.resize(n_ff);
    std::iota(ord.begin(), ord.end(), 0);
    std::sort(ord.begin(), ord.end(), [counts](int32_t a, int32_t b) {
      return counts[a] != counts[b] ? counts[a] > counts[b] : a < b;
    });
    const int64_t nb = NeuronBytes(model, il);
    p->layers[il].neuron_bytes = nb;
    for (int b = 0, g = 0; b < n_ff; b += group, ++g) {
      Group gr{il, g, b, std::min(n_ff, b + group), 0, 0};
      for (int i = gr.begin; i < gr.end; ++i) gr.firings += counts[ord[i]];
      gr.bytes = nb * (gr.end - gr.begin);
      groups.push_back(gr);
    }
  }
  std::sort(groups.begin(), groups.end(), Before);
  for (const Group& g : groups) {
    if (g.bytes > *left) break;
    *left -= g.bytes;
    p->neuron_bytes += g.bytes;
    std::vector<int32_t>& ids = p->layers[g.layer].gpu_neurons;
    ids.insert(ids.end(), order[g.layer].begin() + g.begin, order[g.layer].begin() + g.end);
  }
}

// Each layer's neuron bytes, sorted ids and firing share.
void FinishLayers(const LlamaModel& model, const ActivationStats& stats, Placement* p) {
  for (int il = 0; il < model.config.n_layer; ++il) {
    LayerPlacement& lp = p->layers[il];
    if (lp.neuron_bytes == 0) lp.neuron_bytes = NeuronBytes(model, il);
    std::sort(lp.gpu_neurons.begin(), lp.gpu_neurons.end());
    lp.firing_share = FiringShare(stats, il, lp.gpu_neurons);
  }
}

}  // namespace

int64_t AttentionBytes(const LlamaLayer& l) {
  // Falcon: wq, wk and wv are row ranges of attn_qkv (together its bytes), the
  // norms have biases, and without attn_norm_2 the FFN norm is attn_norm itself.
  const bool shared_norm = l.ffn_norm.data == l.attn_norm.data;
  return Bytes(l.attn_norm) + Bytes(l.attn_norm_b) + Bytes(l.wq) + Bytes(l.wk) + Bytes(l.wv) +
         Bytes(l.wo) + (shared_norm ? 0 : Bytes(l.ffn_norm) + Bytes(l.ffn_norm_b));
}

int64_t PredictorBytes(const LlamaLayer& l) {
  return Bytes(l.fc1) + Bytes(l.fc2);
}

double FiringShare(const ActivationStats& stats, int layer, const std::vector<int32_t>& neurons) {
  const int64_t* counts = stats.counts(layer);
  int64_t total = 0, share = 0;
  for (int64_t i = 0; i < stats.n_ff(); ++i) total += counts[i];
  for (int32_t id : neurons) share += counts[id];
  return total > 0 ? static_cast<double>(share) / static_cast<double>(total) : 0.0;
}

int64_t NeuronBytes(const LlamaModel& model, int layer) {
  const LlamaLayer& l = model.layers[layer];
  int64_t down = 0;
  if (l.ffn_down_t.present()) {
    down = l.ffn_down_t.row_bytes;
  } else if (l.ffn_down.present()) {
    // A column of ffn_down: n_embd elements of its type, rounded up to whole
    // blocks (a transposed copy stores it as one row).
    const DTypeInfo dt = GetDTypeInfo(static_cast<uint32_t>(l.ffn_down.type));
    const int64_t n = model.config.n_embd;
    down = (n + dt.block_elems - 1) / dt.block_elems * dt.block_bytes;
  }
  return (l.ffn_gate.present() ? l.ffn_gate.row_bytes : 0) +
         (l.ffn_up.present() ? l.ffn_up.row_bytes : 0) + down;
}

int64_t KvCacheBytes(const LlamaConfig& c, const PlacementOptions& opt) {
  return int64_t{opt.n_ctx} * c.n_head_kv *
         (RowBytes(opt.cache_type_k, c.head_dim) + RowBytes(opt.cache_type_v, c.head_dim));
}

std::string PartialDenseNote(const Placement& p, const LlamaModel& model) {
  PlacementOptions opt;
  opt.n_ctx = p.n_ctx;
  opt.cache_type_k = p.cache_type_k;
  opt.cache_type_v = p.cache_type_v;
  const int64_t needed = DenseBytes(model, opt);
  int layers = 0;
  for (const LayerPlacement& l : p.layers) layers += l.attn_on_gpu ? 1 : 0;
  char buf[768];
  snprintf(buf, sizeof buf,
           "a VRAM budget of %s holds the dense blocks of %d of %zu layers%s (%s of the %" PRId64
           " bytes they need: output + output_norm, attention, KV cache for %d positions), no "
           "FFN neuron; raise --vram-budget for hot neurons or lower -c (at this context: %s)",
           HumanBytes(p.vram_budget).c_str(), layers, p.layers.size(),
           p.output_on_gpu ? " and the output head" : "", HumanBytes(p.dense_bytes).c_str(), needed,
           p.n_ctx, RegimeBudgetsString(GetRegimeBudgets(model, opt)).c_str());
  return buf;
}

RegimeBudgets GetRegimeBudgets(const LlamaModel& model, const PlacementOptions& opt) {
  RegimeBudgets b;
  b.dense = DenseBytes(model, opt);
  int64_t ffn = 0;
  for (int il = 0; il < model.config.n_layer; ++il) {
    ffn += NeuronBytes(model, il) * model.config.n_ff;
  }
  b.dense_and_quarter_ffn = b.dense + ffn / 4;
  b.everything = b.dense + ffn;
  return b;
}

std::string RegimeBudgetsString(const RegimeBudgets& b) {
  return "dense blocks " + HumanBytes(b.dense) + ", with a quarter of the FFN " +
         HumanBytes(b.dense_and_quarter_ffn) + ", everything " + HumanBytes(b.everything);
}

int64_t DenseBytes(const LlamaModel& model, const PlacementOptions& opt) {
  int64_t total = OutputBytes(model);
  for (const LlamaLayer& l : model.layers) {
    total += AttentionBytes(l) + PredictorBytes(l) + KvCacheBytes(model.config, opt);
  }
  return total;
}

uint64_t StatsFingerprint(const ActivationStats& stats) {
  Fnv1a64 h;
  h.AddU64(static_cast<uint64_t>(stats.n_layer()));
  h.AddU64(static_cast<uint64_t>(stats.n_ff()));
  h.AddU64(static_cast<uint64_t>(stats.n_tokens()));
  for (int il = 0; il < stats.n_layer(); ++il) {
    const int64_t* c = stats.counts(il);
    for (int i = 0; i < stats.n_ff(); ++i) h.AddU64(static_cast<uint64_t>(c[i]));
  }
  return h.value();
}

Status Place(const LlamaModel& model, const ActivationStats& stats, const PlacementOptions& opt,
             Placement* out) {
  const LlamaConfig& c = model.config;
  if (opt.vram_budget < 0) return Status::Error("the VRAM budget is negative");
  if (opt.n_ctx < 1) return Status::Error("the KV cache context must be >= 1, got %d", opt.n_ctx);
  PI_RETURN_IF_ERROR(CheckKvCacheType(opt.cache_type_k, c.head_dim));
  PI_RETURN_IF_ERROR(CheckKvCacheType(opt.cache_type_v, c.head_dim));
  if (opt.group < 1 || opt.group > c.n_ff) {
    return Status::Error("the neuron group size must be in [1, n_ff = %d], got %d", c.n_ff,
                         opt.group);
  }
  if (stats.n_layer() != c.n_layer || stats.n_ff() != c.n_ff ||
      static_cast<int>(model.layers.size()) != c.n_layer) {
    return Status::Error("the stats are for %d layers x %d neurons; the model has %d x %d",
                         stats.n_layer(), stats.n_ff(), c.n_layer, c.n_ff);
  }

  Placement p;
  p.vram_budget = opt.vram_budget;
  p.n_ctx = opt.n_ctx;
  p.cache_type_k = opt.cache_type_k;
  p.cache_type_v = opt.cache_type_v;
  p.group = opt.group;
  p.n_ff = c.n_ff;
  p.model_fingerprint = ModelFingerprint(*model.file);
  p.stats_fingerprint = StatsFingerprint(stats);
  p.stats_n_tokens = stats.n_tokens();
  p.layers.resize(c.n_layer);

  // Stage 1: a prefix of the priority order.
  const int64_t dense_needed = DenseBytes(model, opt);
  int64_t left = opt.vram_budget;
  bool full = true;
  auto take = [&](int64_t bytes, bool* flag) {
    if (!full || bytes > left) {
      full = false;
      return;
    }
    left -= bytes;
    p.dense_bytes += bytes;
    *flag = true;
  };
  take(OutputBytes(model), &p.output_on_gpu);
  for (int il = 0; il < c.n_layer; ++il) {
    // A layer's attention weights and its KV cache go together: attention
    // runs where its cache is, so one without the other would be VRAM spent
    // for nothing.
    LayerPlacement& lp = p.layers[il];
    bool attention = false;
    take(AttentionBytes(model.layers[il]) + KvCacheBytes(c, opt), &attention);
    lp.attn_on_gpu = lp.kv_on_gpu = attention;
    if (PredictorBytes(model.layers[il]) > 0) {
      take(PredictorBytes(model.layers[il]), &lp.predictor_on_gpu);
    }
  }
  p.dense_complete = full;
  if (!full && !opt.allow_partial_dense) {
    return Status::Error(
        "a VRAM budget of %" PRId64
        " bytes (%s) is too small for the dense blocks: they need "
        "%" PRId64
        " bytes (%s: output + output_norm, attention%s, KV cache for %d positions) "
        "before any FFN neuron; raise --vram-budget or lower -c",
        opt.vram_budget, HumanBytes(opt.vram_budget).c_str(), dense_needed,
        HumanBytes(dense_needed).c_str(),
        c.n_layer > 0 && PredictorBytes(model.layers[0]) > 0 ? " and predictors" : "", opt.n_ctx);
  }

  // Stage 2: groups of hot neurons, only after the whole stage 1.
  if (full) PlaceGroups(model, stats, opt.group, 0, c.n_layer, &left, &p);
  int n_gpu_layers = 0;
  while (n_gpu_layers < c.n_layer && p.layers[n_gpu_layers].attn_on_gpu) ++n_gpu_layers;
  p.device_budgets = {opt.vram_budget};
  p.device_layers = {n_gpu_layers};
  p.output_device = p.output_on_gpu ? 0 : -1;
  FinishLayers(model, stats, &p);
  *out = std::move(p);
  return Status::Ok();
}

namespace {

// Stage 1 of PlaceOnDevices: layers [0, n) in order onto the devices —
// `proportional`: device k takes a layer while its dense bytes fit and the
// weight so far (`weight`: what one device of all the budgets would hold of
// each layer, dense and hot; the head's counted too, as it sits on a later
// device) stays within device k's share of the budgets; else while the
// dense bytes fit. used[k] starts with what the device holds already (the
// head). Returns how many layers were placed; device_of[il] says where.
int AssignLayers(const std::vector<int64_t>& dense, const std::vector<int64_t>& weight,
                 int64_t head, const std::vector<int64_t>& budgets, bool proportional,
                 std::vector<int64_t>* used, std::vector<int>* device_of) {
  auto sum = [](const std::vector<int64_t>& v) {
    double s = 0;
    for (int64_t x : v) s += static_cast<double>(x);
    return s;
  };
  const int n_dev = static_cast<int>(budgets.size());
  const double total_budget = sum(budgets);
  const double total_weight = static_cast<double>(head) + sum(weight);
  double budget_upto = static_cast<double>(budgets[0]), placed = 0;
  int k = 0, il = 0;
  for (; il < static_cast<int>(dense.size()); ++il) {
    while (k < n_dev) {
      const bool fits = (*used)[k] + dense[il] <= budgets[k];
      const bool in_share = !proportional || k == n_dev - 1 || total_budget <= 0 ||
                            placed + weight[il] / 2.0 <= total_weight * budget_upto / total_budget;
      if (fits && in_share) break;
      if (++k < n_dev) budget_upto += static_cast<double>(budgets[k]);
    }
    if (k == n_dev) break;
    (*device_of)[il] = k;
    (*used)[k] += dense[il];
    placed += static_cast<double>(weight[il]);
  }
  return il;
}

}  // namespace

Status PlaceOnDevices(const LlamaModel& model, const ActivationStats& stats,
                      const PlacementOptions& opt, Placement* out) {
  const std::vector<int64_t>& budgets = opt.device_budgets;
  if (budgets.size() < 2) {
    PlacementOptions one = opt;
    if (budgets.size() == 1) one.vram_budget = budgets[0];
    one.device_budgets.clear();
    return Place(model, stats, one, out);
  }
  int64_t total = 0;
  for (int64_t b : budgets) {
    if (b < 0) return Status::Error("a device's VRAM budget is negative");
    if (b > INT64_MAX - total) return Status::Error("the devices' VRAM budgets overflow");
    total += b;
  }
  // Place with a budget of 0 checks the options and names the dense bytes.
  PlacementOptions check = opt;
  check.vram_budget = 0;
  check.device_budgets.clear();
  check.allow_partial_dense = true;
  Placement p;
  PI_RETURN_IF_ERROR(Place(model, stats, check, &p));
  const LlamaConfig& c = model.config;
  const int n_dev = static_cast<int>(budgets.size());
  p.vram_budget = total;
  p.dense_bytes = 0;
  p.output_on_gpu = false;
  for (LayerPlacement& lp : p.layers) lp = LayerPlacement();
  std::vector<int64_t> used(n_dev, 0);
  // The head on the last device that holds it; without it, nothing (Place's prefix).
  const int64_t head = OutputBytes(model);
  for (int k = n_dev - 1; k >= 0 && p.output_device < 0; --k) {
    if (head <= budgets[k]) p.output_device = k;
  }
  p.device_budgets = budgets;
  p.device_layers.assign(n_dev, 0);
  int placed = 0;
  std::vector<int> device_of(c.n_layer, -1);
  if (p.output_device >= 0) {
    p.output_on_gpu = true;
    used[p.output_device] = head;
    std::vector<int64_t> dense(c.n_layer), weight(c.n_layer);
    for (int il = 0; il < c.n_layer; ++il) {
      dense[il] = AttentionBytes(model.layers[il]) + KvCacheBytes(c, opt) +
                  PredictorBytes(model.layers[il]);
    }
    // What one device of all the budgets would hold of each layer: the split
    // follows it, so each device gets room for about the hot neurons that
    // one would give its layers.
    PlacementOptions one = check;
    one.vram_budget = total;
    Placement global;
    PI_RETURN_IF_ERROR(Place(model, stats, one, &global));
    for (int il = 0; il < c.n_layer; ++il) {
      weight[il] = dense[il] + NeuronBytes(model, il) *
                                   static_cast<int64_t>(global.layers[il].gpu_neurons.size());
    }
    const std::vector<int64_t> head_only = used;
    placed = AssignLayers(dense, weight, head, budgets, true, &used, &device_of);
    if (placed < c.n_layer) {
      used = head_only;
      std::fill(device_of.begin(), device_of.end(), -1);
      placed = AssignLayers(dense, weight, head, budgets, false, &used, &device_of);
    }
  }
  for (int il = 0; il < placed; ++il) {
    LayerPlacement& lp = p.layers[il];
    lp.attn_on_gpu = lp.kv_on_gpu = true;
    lp.predictor_on_gpu = PredictorBytes(model.layers[il]) > 0;
    ++p.device_layers[device_of[il]];
  }
  for (int64_t u : used) p.dense_bytes += u;
  p.dense_complete = placed == c.n_layer && p.output_on_gpu;
  if (!p.dense_complete && !opt.allow_partial_dense) {
    return Status::Error(
        "VRAM budgets of %s in all are too small for the dense blocks: they need %s (output, "
        "attention, KV cache for %d positions) before any FFN neuron; raise --vram-budget or "
        "lower -c",
        HumanBytes(total).c_str(), HumanBytes(DenseBytes(model, opt)).c_str(), opt.n_ctx);
  }
  if (p.dense_complete) {
    for (int k = 0, first = 0; k < n_dev; first += p.device_layers[k], ++k) {
      int64_t left = budgets[k] - used[k];
      PlaceGroups(model, stats, opt.group, first, first + p.device_layers[k], &left, &p);
    }
  }
  FinishLayers(model, stats, &p);
  *out = std::move(p);
  return Status::Ok();
}

int64_t DeviceUsedBytes(const Placement& plan, const LlamaModel& model, int k) {
  PlacementOptions opt;
  opt.n_ctx = plan.n_ctx;
  opt.cache_type_k = plan.cache_type_k;
  opt.cache_type_v = plan.cache_type_v;
  int64_t bytes = plan.output_device == k ? OutputBytes(model) : 0;
  int first = 0;
  for (int j = 0; j < k; ++j) first += plan.device_layers[j];
  for (int il = first; il < first + plan.device_layers[k]; ++il) {
    const LayerPlacement& lp = plan.layers[il];
    bytes += AttentionBytes(model.layers[il]) + KvCacheBytes(model.config, opt) +
             (lp.predictor_on_gpu ? PredictorBytes(model.layers[il]) : 0) +
             NeuronBytes(model, il) * static_cast<int64_t>(lp.gpu_neurons.size());
  }
  return bytes;
}

Status WritePlan(const Placement& plan, const std::string& path) {
  GgufWriter w;
  const uint32_t n_layer = static_cast<uint32_t>(plan.layers.size());
  w.Set("pi.plan.version", GgufValue::U32(kPlanVersion));
  w.Set("pi.plan.vram_budget", GgufValue::U64(static_cast<uint64_t>(plan.vram_budget)));
  w.Set("pi.plan.n_ctx", GgufValue::U32(static_cast<uint32_t>(plan.n_ctx)));
  w.Set("pi.plan.cache_type_k", GgufValue::U32(static_cast<uint32_t>(plan.cache_type_k)));
  w.Set("pi.plan.cache_type_v", GgufValue::U32(static_cast<uint32_t>(plan.cache_type_v)));
  w.Set("pi.plan.group", GgufValue::U32(static_cast<uint32_t>(plan.group)));
  w.Set("pi.plan.n_layer", GgufValue::U32(n_layer));
  w.Set("pi.plan.n_ff", GgufValue::U32(static_cast<uint32_t>(plan.n_ff)));
  w.Set("pi.plan.model_fingerprint", GgufValue::String(FingerprintHex(plan.model_fingerprint)));
  w.Set("pi.plan.stats_fingerprint", GgufValue::String(FingerprintHex(plan.stats_fingerprint)));
  w.Set("pi.plan.stats_n_tokens", GgufValue::U64(plan.stats_n_tokens));
  w.Set("pi.plan.output_on_gpu", GgufValue::Bool(plan.output_on_gpu));
  w.Set("pi.plan.dense_complete", GgufValue::Bool(plan.dense_complete));
  w.Set("pi.plan.attn_on_gpu", FlagArray(plan.layers, &LayerPlacement::attn_on_gpu));
  w.Set("pi.plan.predictor_on_gpu", FlagArray(plan.layers, &LayerPlacement::predictor_on_gpu));
  w.Set("pi.plan.kv_on_gpu", FlagArray(plan.layers, &LayerPlacement::kv_on_gpu));
  std::vector<int32_t> counts;
  for (const LayerPlacement& l : plan.layers) {
    counts.push_back(static_cast<int32_t>(l.gpu_neurons.size()));
  }
  w.Set("pi.plan.gpu_neuron_count", GgufValue::I32Array(counts));
  w.Set("pi.plan.dense_bytes", GgufValue::U64(static_cast<uint64_t>(plan.dense_bytes)));
  w.Set("pi.plan.neuron_bytes", GgufValue::U64(static_cast<uint64_t>(plan.neuron_bytes)));
  std::vector<GgufValue> budgets, layers;
  for (int64_t b : plan.device_budgets) budgets.push_back(GgufValue::U64(static_cast<uint64_t>(b)));
  for (int32_t n : plan.device_layers) layers.push_back(GgufValue::U32(static_cast<uint32_t>(n)));
  w.Set("pi.plan.device_budgets", GgufValue::Array(GgufType::kU64, std::move(budgets)));
  w.Set("pi.plan.device_layers", GgufValue::Array(GgufType::kU32, std::move(layers)));
  w.Set("pi.plan.output_device", GgufValue::I32(plan.output_device));
  for (uint32_t il = 0; il < n_layer; ++il) {
    const std::vector<int32_t>& ids = plan.layers[il].gpu_neurons;
    if (ids.empty()) continue;
    PI_RETURN_IF_ERROR(w.AddTensor(LayerTensorName(static_cast<int>(il)), DType::kI32,
                                   {static_cast<int64_t>(ids.size())}, ids.data()));
  }
  return w.Write(path).WithContext("writing plan " + path);
}

namespace {

// The devices of a plan read so far (version 3: one, holding the GPU's
// layers): budgets that add up to vram_budget, layer counts that add up to
// the layers with attention on a GPU (a prefix), the head's device.
Status ReadDevices(const GgufFile& f, uint32_t version, Placement* p) {
  int n_gpu_layers = 0;
  while (n_gpu_layers < static_cast<int>(p->layers.size()) && p->layers[n_gpu_layers].attn_on_gpu)
    ++n_gpu_layers;
  for (size_t il = n_gpu_layers; il < p->layers.size(); ++il) {
    if (p->layers[il].attn_on_gpu) {
      return Status::Error("pi.plan.attn_on_gpu: layer %zu on a GPU after a layer that is not", il);
    }
  }
  if (version == 3) {
    p->device_budgets = {p->vram_budget};
    p->device_layers = {n_gpu_layers};
    p->output_device = p->output_on_gpu ? 0 : -1;
    return Status::Ok();
  }
  const GgufValue* budgets = f.Find("pi.plan.device_budgets");
  const GgufValue* layers = f.Find("pi.plan.device_layers");
  const GgufValue* head = f.Find("pi.plan.output_device");
  if (!head || head->type != GgufType::kI32) {
    return Status::Error("pi.plan.output_device is missing or not an i32");
  }
  const int64_t output_device = head->i;
  if (!budgets || !layers || budgets->type != GgufType::kArray ||
      layers->type != GgufType::kArray || budgets->array.empty() ||
      budgets->array.size() > kMaxDevices || budgets->array.size() != layers->array.size()) {
    return Status::Error(
        "pi.plan.device_budgets and device_layers must be arrays of one entry "
        "per device (1 to %u)",
        kMaxDevices);
  }
  int64_t budget_sum = 0, layer_sum = 0;
  for (size_t k = 0; k < budgets->array.size(); ++k) {
    const GgufValue& b = budgets->array[k];
    const GgufValue& n = layers->array[k];
    if (b.type != GgufType::kU64 || n.type != GgufType::kU32 ||
        b.u > static_cast<uint64_t>(p->vram_budget) || n.u > p->layers.size()) {
      return Status::Error("pi.plan.device_budgets/device_layers[%zu] are not a device's", k);
    }
    budget_sum += static_cast<int64_t>(b.u);
    layer_sum += static_cast<int64_t>(n.u);
    p->device_budgets.push_back(static_cast<int64_t>(b.u));
    p->device_layers.push_back(static_cast<int32_t>(n.u));
  }
  if (budget_sum != p->vram_budget || layer_sum != n_gpu_layers || output_device < -1 ||
      output_device >= static_cast<int32_t>(p->device_budgets.size()) ||
      (output_device >= 0) != p->output_on_gpu) {
    return Status::Error("pi.plan's devices (budgets adding up to %" PRId64 " of %" PRId64
                         ", %" PRId64 " of %d GPU layers, the head on %" PRId64
                         ") do not match the plan",
                         budget_sum, p->vram_budget, layer_sum, n_gpu_layers, output_device);
  }
  p->output_device = static_cast<int>(output_device);
  return Status::Ok();
}

}  // namespace

Status ReadPlan(const GgufFile& f, Placement* out) {
  uint32_t version = 0, n_ctx = 0, group = 0, n_layer = 0, n_ff = 0;
  uint64_t budget = 0, n_tokens = 0, dense = 0, neurons = 0;
  std::string mfp, sfp;
  Placement p;
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.version", &version));
  if (version != kPlanVersion && version != 3) {
    return Status::Error("pi.plan.version is %u, this build reads versions 3 and %u", version,
                         kPlanVersion);
  }
  PI_RETURN_IF_ERROR(f.GetU64("pi.plan.vram_budget", &budget));
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.n_ctx", &n_ctx));
  uint32_t type_k = 0, type_v = 0;
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.cache_type_k", &type_k));
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.cache_type_v", &type_v));
  if (!IsValidDType(type_k) || !IsValidDType(type_v)) {
    return Status::Error("pi.plan.cache_type_k/v: %u/%u are not ggml types", type_k, type_v);
  }
  p.cache_type_k = static_cast<DType>(type_k);
  p.cache_type_v = static_cast<DType>(type_v);
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.group", &group));
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.n_layer", &n_layer));
  PI_RETURN_IF_ERROR(f.GetU32("pi.plan.n_ff", &n_ff));
  PI_RETURN_IF_ERROR(f.GetString("pi.plan.model_fingerprint", &mfp));
  PI_RETURN_IF_ERROR(f.GetString("pi.plan.stats_fingerprint", &sfp));
  PI_RETURN_IF_ERROR(f.GetU64("pi.plan.stats_n_tokens", &n_tokens));
  PI_RETURN_IF_ERROR(f.GetBool("pi.plan.output_on_gpu", &p.output_on_gpu));
  PI_RETURN_IF_ERROR(f.GetBool("pi.plan.dense_complete", &p.dense_complete));
  PI_RETURN_IF_ERROR(f.GetU64("pi.plan.dense_bytes", &dense));
  PI_RETURN_IF_ERROR(f.GetU64("pi.plan.neuron_bytes", &neurons));
  if (n_layer < 1 || n_layer > kMaxLayers) {
    return Status::Error("pi.plan.n_layer %u out of range [1, %u]", n_layer, kMaxLayers);
  }
  if (n_ff < 1 || n_ff > kMaxFf) {
    return Status::Error("pi.plan.n_ff %u out of range [1, %u]", n_ff, kMaxFf);
  }
  if (budget > static_cast<uint64_t>(INT64_MAX) || n_ctx > INT32_MAX || group > INT32_MAX ||
      dense > budget || neurons > budget - dense) {
    return Status::Error("pi.plan byte counts are inconsistent (budget %" PRIu64 ", dense %" PRIu64
                         ", neurons %" PRIu64 ")",
                         budget, dense, neurons);
  }
  if (!ParseHex64(mfp, &p.model_fingerprint)) {
    return Status::Error("pi.plan.model_fingerprint '%s' is not 16 lower-case hex digits",
                         mfp.c_str());
  }
  if (!ParseHex64(sfp, &p.stats_fingerprint)) {
    return Status::Error("pi.plan.stats_fingerprint '%s' is not 16 lower-case hex digits",
                         sfp.c_str());
  }
  std::vector<int64_t> attn, pred, kv, counts;
  PI_RETURN_IF_ERROR(GetIntArray(f, "pi.plan.attn_on_gpu", n_layer, &attn));
  PI_RETURN_IF_ERROR(GetIntArray(f, "pi.plan.predictor_on_gpu", n_layer, &pred));
  PI_RETURN_IF_ERROR(GetIntArray(f, "pi.plan.kv_on_gpu", n_layer, &kv));
  PI_RETURN_IF_ERROR(GetIntArray(f, "pi.plan.gpu_neuron_count", n_layer, &counts));
  p.vram_budget = static_cast<int64_t>(budget);
  p.n_ctx = static_cast<int>(n_ctx);
  p.group = static_cast<int>(group);
  p.n_ff = static_cast<int>(n_ff);
  p.stats_n_tokens = n_tokens;
  p.dense_bytes = static_cast<int64_t>(dense);
  p.neuron_bytes = static_cast<int64_t>(neurons);
  p.layers.resize(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    LayerPlacement& l = p.layers[il];
    l.attn_on_gpu = attn[il] != 0;
    l.predictor_on_gpu = pred[il] != 0;
    l.kv_on_gpu = kv[il] != 0;
    const std::string name = LayerTensorName(static_cast<int>(il));
    const TensorInfo* t = f.FindTensor(name);
    if (counts[il] < 0 || counts[il] > n_ff) {
      return Status::Error("pi.plan.gpu_neuron_count[%u] = %" PRId64 " outside [0, n_ff = %u]", il,
                           counts[il], n_ff);
    }
    if (counts[il] == 0) {
      if (t != nullptr) {
        return Status::Error("tensor '%s' present but pi.plan.gpu_neuron_count[%u] is 0",
                             name.c_str(), il);
      }
      continue;
    }
    if (t == nullptr) {
      return Status::Error("tensor '%s' is missing (pi.plan.gpu_neuron_count[%u] = %" PRId64 ")",
                           name.c_str(), il, counts[il]);
    }
    if (t->type != DType::kI32 || t->n_dims != 1 || t->ne[0] != counts[il]) {
      return Status::Error("tensor '%s' is %s %s, expected i32 [%" PRId64 "]", name.c_str(),
                           DTypeName(t->type), t->ShapeString().c_str(), counts[il]);
    }
    l.gpu_neurons.resize(static_cast<size_t>(counts[il]));
    memcpy(l.gpu_neurons.data(), t->data, l.gpu_neurons.size() * sizeof(int32_t));
    for (size_t i = 0; i < l.gpu_neurons.size(); ++i) {
      const int32_t id = l.gpu_neurons[i];
      if (id < 0 || static_cast<uint32_t>(id) >= n_ff || (i > 0 && id <= l.gpu_neurons[i - 1])) {
        return Status::Error(
            "tensor '%s' element %zu: id %d is out of range [0, %u) or not "
            "strictly increasing",
            name.c_str(), i, id, n_ff);
      }
    }
  }
  PI_RETURN_IF_ERROR(ReadDevices(f, version, &p));
  *out = std::move(p);
  return Status::Ok();
}

Status ReadPlan(const std::string& path, Placement* plan) {
  std::unique_ptr<GgufFile> f;
  Status s = GgufFile::Open(path, &f);
  if (s.ok()) s = ReadPlan(*f, plan);
  return s.ok() ? s : s.WithContext("plan " + path);
}

Status CheckPlanMatches(const Placement& plan, const LlamaModel& model,
                        const ActivationStats& stats, const PlacementOptions& opt) {
  const uint64_t mfp = ModelFingerprint(*model.file);
  if (plan.model_fingerprint != mfp ||
      static_cast<int>(plan.layers.size()) != model.config.n_layer ||
      plan.n_ff != model.config.n_ff) {
    return Status::Error(
        "the plan was made for model %s (%zu layers, n_ff %d), not this model %s "
        "(%d layers, n_ff %d)",
        FingerprintHex(plan.model_fingerprint).c_str(), plan.layers.size(), plan.n_ff,
        FingerprintHex(mfp).c_str(), model.config.n_layer, model.config.n_ff);
  }
  const uint64_t sfp = StatsFingerprint(stats);
  if (plan.stats_fingerprint != sfp || plan.stats_n_tokens != stats.n_tokens()) {
    return Status::Error("the plan was made from other statistics (%s over %" PRIu64
                         " tokens), not these (%s over %" PRIu64 " tokens)",
                         FingerprintHex(plan.stats_fingerprint).c_str(), plan.stats_n_tokens,
                         FingerprintHex(sfp).c_str(), stats.n_tokens());
  }
  const std::vector<int64_t> budgets =
      opt.device_budgets.empty() ? std::vector<int64_t>{opt.vram_budget} : opt.device_budgets;
  if (plan.device_budgets != budgets) {
    std::string was, is;
    for (int64_t b : plan.device_budgets) was += (was.empty() ? "" : ",") + std::to_string(b);
    for (int64_t b : budgets) is += (is.empty() ? "" : ",") + std::to_string(b);
    return Status::Error("the plan was made for VRAM budgets of %s bytes, not %s", was.c_str(),
                         is.c_str());
  }
  if (plan.n_ctx != opt.n_ctx) {
    return Status::Error("the plan reserves a KV cache for %d positions, not %d", plan.n_ctx,
                         opt.n_ctx);
  }
  if (plan.cache_type_k != opt.cache_type_k || plan.cache_type_v != opt.cache_type_v) {
    return Status::Error("the plan reserves a KV cache of %s keys and %s values, not %s and %s",
                         DTypeName(plan.cache_type_k), DTypeName(plan.cache_type_v),
                         DTypeName(opt.cache_type_k), DTypeName(opt.cache_type_v));
  }
  if (plan.group != opt.group) {
    return Status::Error("the plan uses neuron groups of %d, not %d", plan.group, opt.group);
  }
  return Status::Ok();
}

std::string BudgetString(int64_t bytes) {
  static const char kSuffix[] = {'T', 'G', 'M', 'K'};
  for (int i = 0; i < 4; ++i) {
    const int64_t unit = int64_t{1} << (10 * (4 - i));
    if (bytes > 0 && bytes % unit == 0) return std::to_string(bytes / unit) + kSuffix[i];
  }
  return std::to_string(bytes);
}

std::string DefaultPlanPath(const std::string& model_path, int64_t budget, int n_ctx,
                            DType cache_type_k, DType cache_type_v, int n_gpus) {
  const std::string suffix = ".plan-" + BudgetString(budget) + "-c" + std::to_string(n_ctx) + "-" +
                             DTypeName(cache_type_k) + "-" + DTypeName(cache_type_v) + "-g" +
                             std::to_string(n_gpus) + ".gguf";
  return SideFileForRead(model_path, suffix);
}

}  // namespace pi

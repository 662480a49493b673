#include "common/plan/activation_stats.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

namespace pi {

namespace {

constexpr uint32_t kStatsVersion = 1;
// Generous bounds for a file claiming its sizes: they keep a corrupt header
// from asking for a huge allocation (the counts must also be in the file).
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxFf = 1u << 24;

constexpr char kFireCountSuffix[] = ".ffn_fire_count";
constexpr char kGateQuantilesSuffix[] = ".ffn_gate_quantiles";
// ActivationStats::input_quantiles' tensors, by ProjectionInput.
constexpr const char* kInputQuantilesSuffix[kProjectionInputs] = {
    ".attn_in_quantiles", ".attn_out_quantiles", ".ffn_in_quantiles"};
// Their RMS magnitudes, F32 [1] per layer.
constexpr char kGateRmsSuffix[] = ".ffn_gate_rms";
constexpr const char* kInputRmsSuffix[kProjectionInputs] = {".attn_in_rms", ".attn_out_rms",
                                                            ".ffn_in_rms"};

std::string LayerTensorName(int layer, const char* suffix) {
  return "blk." + std::to_string(layer) + suffix;
}

// "blk.N<suffix>" -> N (decimal digits only, no sign, no leading zero unless
// N is 0). False for any other name.
bool ParseLayerTensorName(const std::string& name, const std::string& suffix, int64_t* layer) {
  static const char kPrefix[] = "blk.";
  const size_t np = sizeof(kPrefix) - 1, ns = suffix.size();
  if (name.size() <= np + ns || name.compare(0, np, kPrefix) != 0 ||
      name.compare(name.size() - ns, ns, suffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(np, name.size() - np - ns);
  if (digits.empty() || digits.size() > 9) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  int64_t v = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
  }
  *layer = v;
  return true;
}

// One tensor per layer named blk.N<suffix>, each `type` [n]: into by_layer
// (entries stay null for layers without one; two for a layer is an error).
Status FindLayerTensors(const GgufFile& f, const char* suffix, DType type, uint32_t n,
                        uint32_t n_layer, std::vector<const TensorInfo*>* by_layer) {
  by_layer->assign(n_layer, nullptr);
  for (const TensorInfo& t : f.tensors()) {
    int64_t layer = -1;
    if (!ParseLayerTensorName(t.name, suffix, &layer)) continue;  // unknown tensors are ignored
    if (layer >= n_layer) {
      return Status::Error("tensor '%s' is for layer %" PRId64 ", but pi.stats.n_layer is %u",
                           t.name.c_str(), layer, n_layer);
    }
    if ((*by_layer)[layer] != nullptr) {
      return Status::Error("layer %" PRId64 " has two %s tensors ('%s', '%s')", layer, suffix + 1,
                           (*by_layer)[layer]->name.c_str(), t.name.c_str());
    }
    if (t.type != type || t.n_dims != 1 || t.ne[0] != n) {
      return Status::Error("tensor '%s' is %s %s, expected %s [%u]", t.name.c_str(),
                           DTypeName(t.type), t.ShapeString().c_str(), DTypeName(type), n);
    }
    (*by_layer)[layer] = &t;
  }
  return Status::Ok();
}

}  // namespace

double FiringConcentration(const int64_t* counts, int n, double share) {
  if (n <= 0) return 0.0;
  std::vector<int64_t> sorted(counts, counts + n);
  std::sort(sorted.begin(), sorted.end(), std::greater<int64_t>());
  int64_t total = 0;
  for (int64_t c : sorted) total += c;
  if (total <= 0) return 0.0;
  const double target = share * static_cast<double>(total);
  int64_t sum = 0;
  for (int k = 0; k < n; ++k) {
    sum += sorted[k];
    if (static_cast<double>(sum) >= target) return static_cast<double>(k + 1) / n;
  }
  return 1.0;
}

void ActivationStats::Init(int n_layer, int n_ff) {
  n_layer_ = n_layer;
  n_ff_ = n_ff;
  n_tokens_ = 0;
  counts_.assign(static_cast<size_t>(n_layer) * n_ff, 0);
  gate_quantiles.clear();
  gates_ = GateHistogram();
  for (int k = 0; k < kProjectionInputs; ++k) {
    input_quantiles[k].clear();
    inputs_[k] = GateHistogram();
  }
}

void ActivationStats::OnProjectionInput(int layer, ProjectionInput which, int batch, const float* x,
                                        int width) {
  if (layer < 0 || layer >= n_layer_ || !pass_thresholds_.empty()) return;
  GateHistogram& h = inputs_[static_cast<int>(which)];
  if (h.empty()) h.Init(n_layer_);
  h.Add(layer, x, static_cast<int64_t>(batch) * width);
}

void ActivationStats::OnGate(int layer, int batch, const float* a) {
  if (layer < 0 || layer >= n_layer_) return;
  if (!pass_thresholds_.empty()) {
    const float t = pass_thresholds_[layer];
    int64_t* c = mutable_counts(layer);
    for (int b = 0; b < batch; ++b) {
      const float* row = a + static_cast<int64_t>(b) * n_ff_;
      for (int i = 0; i < n_ff_; ++i) c[i] += std::fabs(row[i]) > t;
    }
    return;
  }
  if (gates_.empty()) gates_.Init(n_layer_);
  gates_.Add(layer, a, static_cast<int64_t>(batch) * n_ff_);
}

void ActivationStats::CountGatePasses(const std::vector<float>& thresholds, double target) {
  pass_thresholds_ = thresholds;
  pass_target = target;
  std::fill(counts_.begin(), counts_.end(), 0);
  n_tokens_ = 0;
}

void ActivationStats::FinishGateQuantiles() {
  auto finish = [this](const GateHistogram& h, std::vector<float>* table, std::vector<float>* rms) {
    if (h.empty()) return;
    table->assign(static_cast<size_t>(n_layer_) * kGateQuantilePoints, 0.0f);
    rms->assign(n_layer_, 0.0f);
    for (int l = 0; l < n_layer_; ++l) {
      h.Quantiles(l, table->data() + static_cast<int64_t>(l) * kGateQuantilePoints);
      (*rms)[l] = static_cast<float>(h.Rms(l));
    }
  };
  finish(gates_, &gate_quantiles, &gate_rms);
  for (int k = 0; k < kProjectionInputs; ++k) {
    finish(inputs_[k], &input_quantiles[k], &input_rms[k]);
  }
}

void ActivationStats::OnFfn(int layer, int batch, const float* act) {
  if (layer < 0 || layer >= n_layer_) return;
  if (!pass_thresholds_.empty()) {  // OnGate counts
    if (layer == 0) n_tokens_ += batch;
    return;
  }
  int64_t* c = mutable_counts(layer);
  for (int b = 0; b < batch; ++b) {
    const float* row = act + static_cast<int64_t>(b) * n_ff_;
    for (int i = 0; i < n_ff_; ++i) c[i] += row[i] != 0.0f;
  }
  if (layer == 0) n_tokens_ += batch;
}

double ActivationStats::Sparsity(int layer) const {
  if (n_tokens_ == 0 || n_ff_ == 0) return 0.0;
  const int64_t* c = counts(layer);
  double fired = 0;
  for (int i = 0; i < n_ff_; ++i) fired += static_cast<double>(c[i]);
  return 1.0 - fired / (static_cast<double>(n_tokens_) * n_ff_);
}

void InitActivationStatsFor(const LlamaModel& model, ActivationStats* stats) {
  stats->Init(model.config.n_layer, model.config.n_ff);
  stats->model_name = model.config.name;
  stats->model_fingerprint = ModelFingerprint(*model.file);
  stats->shape_fingerprint = ShapeFingerprint(*model.file);
  stats->weight_signs = WeightSigns(*model.file);
  stats->activation = FfnActivationName(model.config.activation);
}

namespace {

// A [n_layer][kGateQuantilePoints] table as one tensor per layer (none when
// empty).
Status AddQuantileTable(const std::vector<float>& table, const std::vector<float>& rms,
                        const char* suffix, const char* rms_suffix, int n_layer,
                        const std::string& path, GgufWriter* w) {
  if (table.empty()) return Status::Ok();
  if (table.size() != static_cast<size_t>(n_layer) * kGateQuantilePoints ||
      (!rms.empty() && rms.size() != static_cast<size_t>(n_layer))) {
    return Status::Error("writing %s: %zu quantiles and %zu RMS values (%s) for %d layers",
                         path.c_str(), table.size(), rms.size(), suffix, n_layer);
  }
  for (int il = 0; il < n_layer; ++il) {
    PI_RETURN_IF_ERROR(w->AddTensor(LayerTensorName(il, suffix), DType::kF32, {kGateQuantilePoints},
                                    table.data() + static_cast<int64_t>(il) * kGateQuantilePoints));
    if (!rms.empty()) {
      PI_RETURN_IF_ERROR(w->AddTensor(LayerTensorName(il, rms_suffix), DType::kF32, {1}, &rms[il]));
    }
  }
  return Status::Ok();
}

// A per-layer F32 table of `width` values a layer, read back: every layer's
// tensor or none (*out empty), each layer's values checked by `check(values,
// layer, tensor)`.
template <class Check>
Status ReadLayerTable(const GgufFile& f, const char* suffix, uint32_t n_layer, uint32_t width,
                      Check check, std::vector<float>* out) {
  std::vector<const TensorInfo*> by_layer;
  PI_RETURN_IF_ERROR(FindLayerTensors(f, suffix, DType::kF32, width, n_layer, &by_layer));
  out->clear();
  if (std::none_of(by_layer.begin(), by_layer.end(), [](const TensorInfo* t) { return t; })) {
    return Status::Ok();
  }
  out->resize(static_cast<size_t>(n_layer) * width);
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (by_layer[il] == nullptr) {  // all layers or none
      return Status::Error("tensor '%s' is missing (other layers have theirs)",
                           LayerTensorName(static_cast<int>(il), suffix).c_str());
    }
    float* v = out->data() + static_cast<int64_t>(il) * width;
    memcpy(v, by_layer[il]->data, sizeof(float) * width);
    PI_RETURN_IF_ERROR(check(v, static_cast<int>(il), *by_layer[il]));
  }
  return Status::Ok();
}

// A quantile table (finite, >= 0, not decreasing).
Status ReadQuantileTable(const GgufFile& f, const char* suffix, uint32_t n_layer,
                         std::vector<float>* out) {
  auto check = [](const float* q, int layer, const TensorInfo&) {
    return CheckGateQuantiles(q, layer);
  };
  return ReadLayerTable(f, suffix, n_layer, kGateQuantilePoints, check, out);
}

// A table's RMS values (each finite and >= 0).
Status ReadRmsTable(const GgufFile& f, const char* suffix, uint32_t n_layer,
                    std::vector<float>* out) {
  auto check = [](const float* v, int, const TensorInfo& t) {
    return std::isfinite(*v) && *v >= 0
               ? Status::Ok()
               : Status::Error("tensor '%s' holds %g, not a finite RMS >= 0", t.name.c_str(), *v);
  };
  return ReadLayerTable(f, suffix, n_layer, 1, check, out);
}

}  // namespace

Status WriteActivationStats(const ActivationStats& stats, const std::string& path) {
  GgufWriter w;
  w.Set("pi.stats.version", GgufValue::U32(kStatsVersion));
  w.Set("pi.stats.model_name", GgufValue::String(stats.model_name));
  w.Set("pi.stats.model_fingerprint", GgufValue::String(FingerprintHex(stats.model_fingerprint)));
  if (stats.shape_fingerprint != 0 && !stats.weight_signs.empty()) {
    w.Set("pi.stats.shape_fingerprint", GgufValue::String(FingerprintHex(stats.shape_fingerprint)));
    w.Set("pi.stats.weight_signs", GgufValue::String(stats.weight_signs));
  }
  w.Set("pi.stats.n_layer", GgufValue::U32(static_cast<uint32_t>(stats.n_layer())));
  w.Set("pi.stats.n_ff", GgufValue::U32(static_cast<uint32_t>(stats.n_ff())));
  w.Set("pi.stats.n_tokens", GgufValue::U64(stats.n_tokens()));
  w.Set("pi.stats.activation", GgufValue::String(stats.activation));
  w.Set("pi.stats.corpus", GgufValue::String(stats.corpus));
  w.Set("pi.stats.n_ctx", GgufValue::U32(static_cast<uint32_t>(std::max(0, stats.n_ctx))));
  if (stats.pass_target >= 0) {
    w.Set("pi.stats.pass_target", GgufValue::F32(static_cast<float>(stats.pass_target)));
  }
  std::vector<int32_t> row(stats.n_ff());
  for (int il = 0; il < stats.n_layer(); ++il) {
    const int64_t* c = stats.counts(il);
    for (int i = 0; i < stats.n_ff(); ++i) {
      if (c[i] < 0 || c[i] > std::numeric_limits<int32_t>::max()) {
        return Status::Error("writing %s: layer %d neuron %d count %" PRId64
                             " does not fit the file's I32 (profile fewer tokens)",
                             path.c_str(), il, i, c[i]);
      }
      row[i] = static_cast<int32_t>(c[i]);
    }
    PI_RETURN_IF_ERROR(w.AddTensor(LayerTensorName(il, kFireCountSuffix), DType::kI32,
                                   {stats.n_ff()}, row.data()));
  }
  PI_RETURN_IF_ERROR(AddQuantileTable(stats.gate_quantiles, stats.gate_rms, kGateQuantilesSuffix,
                                      kGateRmsSuffix, stats.n_layer(), path, &w));
  for (int k = 0; k < kProjectionInputs; ++k) {
    PI_RETURN_IF_ERROR(AddQuantileTable(stats.input_quantiles[k], stats.input_rms[k],
                                        kInputQuantilesSuffix[k], kInputRmsSuffix[k],
                                        stats.n_layer(), path, &w));
  }
  return w.Write(path);
}

Status ReadActivationStats(const GgufFile& f, ActivationStats* stats) {
  uint32_t version = 0, n_layer = 0, n_ff = 0, n_ctx = 0;
  uint64_t n_tokens = 0;
  std::string name, fp, shape_fp, signs, activation, corpus;
  PI_RETURN_IF_ERROR(f.GetU32("pi.stats.version", &version));
  if (version != kStatsVersion) {
    return Status::Error("pi.stats.version is %u, this build reads version %u", version,
                         kStatsVersion);
  }
  PI_RETURN_IF_ERROR(f.GetString("pi.stats.model_name", &name));
  PI_RETURN_IF_ERROR(f.GetString("pi.stats.model_fingerprint", &fp));
  PI_RETURN_IF_ERROR(f.GetU32("pi.stats.n_layer", &n_layer));
  PI_RETURN_IF_ERROR(f.GetU32("pi.stats.n_ff", &n_ff));
  PI_RETURN_IF_ERROR(f.GetU64("pi.stats.n_tokens", &n_tokens));
  PI_RETURN_IF_ERROR(f.GetString("pi.stats.activation", &activation));
  PI_RETURN_IF_ERROR(f.GetString("pi.stats.corpus", &corpus));
  PI_RETURN_IF_ERROR(f.GetU32Opt("pi.stats.n_ctx", &n_ctx));
  float pass_target = -1.0f;
  PI_RETURN_IF_ERROR(f.GetF32Opt("pi.stats.pass_target", &pass_target));
  if (pass_target != -1.0f && !(pass_target >= 0 && pass_target < 1)) {
    return Status::Error("pi.stats.pass_target %g is not a share in [0, 1)", pass_target);
  }
  PI_RETURN_IF_ERROR(f.GetStringOpt("pi.stats.shape_fingerprint", &shape_fp));
  PI_RETURN_IF_ERROR(f.GetStringOpt("pi.stats.weight_signs", &signs));
  if (!signs.empty() &&
      (signs.size() != 64 || signs.find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return Status::Error("pi.stats.weight_signs is not 64 lower-case hex digits");
  }
  if (n_layer < 1 || n_layer > kMaxLayers) {
    return Status::Error("pi.stats.n_layer %u out of range [1, %u]", n_layer, kMaxLayers);
  }
  if (n_ff < 1 || n_ff > kMaxFf) {
    return Status::Error("pi.stats.n_ff %u out of range [1, %u]", n_ff, kMaxFf);
  }
  uint64_t fingerprint = 0;
  if (fp.size() != 16 || fp.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Status::Error("pi.stats.model_fingerprint '%s' is not 16 lower-case hex digits",
                         fp.c_str());
  }
  fingerprint = std::stoull(fp, nullptr, 16);
  uint64_t shape_fingerprint = 0;
  if (!shape_fp.empty()) {
    if (shape_fp.size() != 16 ||
        shape_fp.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return Status::Error("pi.stats.shape_fingerprint '%s' is not 16 lower-case hex digits",
                           shape_fp.c_str());
    }
    shape_fingerprint = std::stoull(shape_fp, nullptr, 16);
  }

  // Every layer's tensor must be in the file before counts are allocated.
  std::vector<const TensorInfo*> by_layer, quantiles;
  PI_RETURN_IF_ERROR(FindLayerTensors(f, kFireCountSuffix, DType::kI32, n_ff, n_layer, &by_layer));
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (by_layer[il] == nullptr) {
      return Status::Error("tensor '%s' is missing (pi.stats.n_layer is %u)",
                           LayerTensorName(static_cast<int>(il), kFireCountSuffix).c_str(),
                           n_layer);
    }
  }
  std::vector<float> gate_table, input_tables[kProjectionInputs];
  std::vector<float> gate_rms, input_rms[kProjectionInputs];
  PI_RETURN_IF_ERROR(ReadQuantileTable(f, kGateQuantilesSuffix, n_layer, &gate_table));
  PI_RETURN_IF_ERROR(ReadRmsTable(f, kGateRmsSuffix, n_layer, &gate_rms));
  for (int k = 0; k < kProjectionInputs; ++k) {
    PI_RETURN_IF_ERROR(ReadQuantileTable(f, kInputQuantilesSuffix[k], n_layer, &input_tables[k]));
    PI_RETURN_IF_ERROR(ReadRmsTable(f, kInputRmsSuffix[k], n_layer, &input_rms[k]));
  }

  ActivationStats s;
  s.Init(static_cast<int>(n_layer), static_cast<int>(n_ff));
  for (uint32_t il = 0; il < n_layer; ++il) {
    const TensorInfo& t = *by_layer[il];
    int64_t* c = s.mutable_counts(static_cast<int>(il));
    for (uint32_t i = 0; i < n_ff; ++i) {
      int32_t v;
      memcpy(&v, t.data + 4 * static_cast<size_t>(i), 4);
      if (v < 0 || static_cast<uint64_t>(v) > n_tokens) {
        return Status::Error("tensor '%s' neuron %u: count %d outside [0, n_tokens = %" PRIu64 "]",
                             t.name.c_str(), i, v, n_tokens);
      }
      c[i] = v;
    }
  }
  s.gate_quantiles = std::move(gate_table);
  s.gate_rms = std::move(gate_rms);
  for (int k = 0; k < kProjectionInputs; ++k) {
    s.input_quantiles[k] = std::move(input_tables[k]);
    s.input_rms[k] = std::move(input_rms[k]);
  }
  s.set_n_tokens(n_tokens);
  s.model_name = name;
  s.model_fingerprint = fingerprint;
  s.shape_fingerprint = shape_fingerprint;
  s.weight_signs = signs;
  s.activation = activation;
  s.corpus = corpus;
  s.n_ctx = static_cast<int>(n_ctx);
  s.pass_target = pass_target;
  *stats = std::move(s);
  return Status::Ok();
}

Status ReadActivationStats(const std::string& path, ActivationStats* stats) {
  std::unique_ptr<GgufFile> f;
  Status s = GgufFile::Open(path, &f);
  if (s.ok()) s = ReadActivationStats(*f, stats);
  return s.ok() ? s : s.WithContext("activation stats " + path);
}

Status CheckStatsMatchModel(const ActivationStats& stats, const LlamaModel& model,
                            std::string* note) {
  const LlamaConfig& c = model.config;
  const std::string made_from = "the stats were made from model '" + stats.model_name + "' (" +
                                FingerprintHex(stats.model_fingerprint) + ")";
  if (stats.n_layer() != c.n_layer) {
    return Status::Error("%s with %d layers; this model has %d layers", made_from.c_str(),
                         stats.n_layer(), c.n_layer);
  }
  if (stats.n_ff() != c.n_ff) {
    return Status::Error("%s with n_ff %d; this model has n_ff %d", made_from.c_str(), stats.n_ff(),
                         c.n_ff);
  }
  const uint64_t fp = ModelFingerprint(*model.file);
  // At most 1 in 16 signs may flip (values tied at a block's maximum after
  // requantization); other weights flip about half.
  const int differ = SignsDiffer(stats.weight_signs, WeightSigns(*model.file));
  if (fp != stats.model_fingerprint && stats.shape_fingerprint != 0 &&
      stats.shape_fingerprint == ShapeFingerprint(*model.file) && differ >= 0 && differ <= 16) {
    // Another copy of the same weights (a Q4_0 of the F16 profiled): the
    // firing counts carry over.
    if (note) {
      *note = made_from +
              ", another file of this architecture, shapes and vocabulary (a copy "
              "in other types?): reused; run pi-profile on this file if it holds other weights";
    }
    return Status::Ok();
  }
  if (fp != stats.model_fingerprint) {
    return Status::Error(
        "%s, not this model '%s' (fingerprint %s): same shape but different tensors or "
        "file; profile this model with pi-profile",
        made_from.c_str(), c.name.c_str(), FingerprintHex(fp).c_str());
  }
  return Status::Ok();
}

std::string DefaultStatsPath(const std::string& model_path) {
  return SideFileForRead(model_path, ".stats.gguf");
}

std::string DefaultStatsWritePath(const std::string& model_path) {
  return SideFileForWrite(model_path, ".stats.gguf");
}

}  // namespace pi

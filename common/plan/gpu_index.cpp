#include "common/plan/gpu_index.h"

#include <cinttypes>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/format/gguf.h"

namespace pi {
namespace {

constexpr const char* kArchitecture = "generic.gpu_index";
constexpr const char* kBlockCountKey = "generic.gpu_index.block_count";
constexpr const char* kCapacityKey = "split.vram_capacity";
// Bounds on what an index may describe, so a crafted header cannot make the
// reader allocate much: no model has more layers or neurons per layer.
constexpr uint64_t kMaxLayers = uint64_t{1} << 16;
constexpr int64_t kMaxNeurons = int64_t{1} << 24;

std::string IdxName(size_t layer) {
  return "blk." + std::to_string(layer) + ".gpu_idx";
}
std::string BucketName(size_t layer) {
  return "blk." + std::to_string(layer) + ".gpu_bucket";
}

Status CheckIds(const std::vector<int32_t>& ids, int n_ff, size_t layer) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_ff || (i > 0 && ids[i] <= ids[i - 1])) {
      return Status::Error(
          "layer %zu element %zu: id %d out of range [0, %d) or not strictly "
          "increasing",
          layer, i, ids[i], n_ff);
    }
  }
  return Status::Ok();
}

// The original writes u32 and u64 here; a signed or narrower key would mean
// another writer whose file we do not know, so only those two are accepted.
Status GetUnsignedKey(const GgufFile& f, const char* key, uint64_t* out) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return Status::Error("key '%s' is missing", key);
  if (v->type != GgufType::kU32 && v->type != GgufType::kU64) {
    return Status::Error("key '%s' has type %s, expected u32 or u64", key, GgufTypeName(v->type));
  }
  *out = v->u;
  return Status::Ok();
}

// A 1-D I32 tensor ([n] or [n, 1, ...]) of at most kMaxNeurons elements.
bool IsI32Vector(const TensorInfo& t) {
  return t.type == DType::kI32 && t.n_dims >= 1 && t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1 &&
         t.ne[0] <= kMaxNeurons;
}

int32_t I32At(const TensorInfo& t, size_t i) {
  int32_t v;
  memcpy(&v, t.data + 4 * i, 4);  // the mapping gives no alignment guarantee
  return v;
}

// Checks an opened gpuidx file against PowerInfer's layout and reads it.
}  // namespace

GpuIndex GpuIndexFromPlacement(const Placement& plan) {
  GpuIndex g;
  g.vram_capacity = static_cast<uint64_t>(plan.vram_budget);
  g.n_ff = plan.n_ff;
  for (const LayerPlacement& l : plan.layers) g.gpu_neurons.push_back(l.gpu_neurons);
  return g;
}

Status WriteGpuIndex(const GpuIndex& index, const std::string& path) {
  const size_t n_layer = index.gpu_neurons.size();
  if (index.n_ff < 1 || index.n_ff > kMaxNeurons || n_layer < 1 || n_layer > kMaxLayers) {
    return Status::Error("writing gpu index %s: n_ff %d and %zu layers (must be in [1, %" PRId64
                         "] and [1, %" PRIu64 "])",
                         path.c_str(), index.n_ff, n_layer, kMaxNeurons, kMaxLayers);
  }
  for (size_t il = 0; il < n_layer; ++il) {
    PI_RETURN_IF_ERROR(
        CheckIds(index.gpu_neurons[il], index.n_ff, il).WithContext("writing gpu index " + path));
  }
  // Exactly the original's keys, in its order, and no general.alignment (the
  // default 32 applies).
  GgufWriter w;
  w.SetSparseMagic(true);
  w.Set("general.architecture", GgufValue::String(kArchitecture));
  w.Set(kBlockCountKey, GgufValue::U32(static_cast<uint32_t>(n_layer)));
  w.Set(kCapacityKey, GgufValue::U64(index.vram_capacity));
  for (size_t il = 0; il < n_layer; ++il) {
    const std::vector<int32_t>& ids = index.gpu_neurons[il];
    std::vector<int32_t> idx(static_cast<size_t>(index.n_ff), 0);
    for (int32_t id : ids) idx[static_cast<size_t>(id)] = 1;
    // An all-CPU layer has an empty gpu_bucket (ne = [0], no data), as in
    // the original.
    Status s = w.AddTensor(IdxName(il), DType::kI32, {index.n_ff}, idx.data());
    if (s.ok()) {
      s = w.AddTensor(BucketName(il), DType::kI32, {static_cast<int64_t>(ids.size())}, ids.data());
    }
    PI_RETURN_IF_ERROR(s.WithContext("writing gpu index " + path));
  }
  return w.Write(path).WithContext("writing gpu index");
}

Status ReadGpuIndex(const GgufFile& f, GpuIndex* out) {
  std::string arch;
  PI_RETURN_IF_ERROR(f.GetString("general.architecture", &arch));
  if (arch != kArchitecture) {
    return Status::Error("general.architecture is '%s', expected '%s'", arch.c_str(),
                         kArchitecture);
  }
  uint64_t n_layer = 0, capacity = 0;
  PI_RETURN_IF_ERROR(GetUnsignedKey(f, kBlockCountKey, &n_layer));
  PI_RETURN_IF_ERROR(GetUnsignedKey(f, kCapacityKey, &capacity));
  if (n_layer < 1 || n_layer > kMaxLayers) {
    return Status::Error("%s %" PRIu64 " out of range [1, %" PRIu64 "]", kBlockCountKey, n_layer,
                         kMaxLayers);
  }
  const std::vector<TensorInfo>& ts = f.tensors();
  if (ts.size() != 2 * n_layer) {
    return Status::Error("%zu tensors; %s %" PRIu64 " needs exactly %" PRIu64, ts.size(),
                         kBlockCountKey, n_layer, 2 * n_layer);
  }

  // Layer 0's gpu_idx fixes n_ff; every layer must agree.
  if (!IsI32Vector(ts[0]) || ts[0].ne[0] < 1) {
    return Status::Error("tensor '%s' is %s %s, expected i32 [n_ff] with 1 <= n_ff <= %" PRId64,
                         ts[0].name.c_str(), DTypeName(ts[0].type), ts[0].ShapeString().c_str(),
                         kMaxNeurons);
  }
  GpuIndex g;
  g.vram_capacity = capacity;
  g.n_ff = static_cast<int>(ts[0].ne[0]);
  g.gpu_neurons.resize(n_layer);
  for (size_t il = 0; il < n_layer; ++il) {
    // The original's loader takes tensors 2i and 2i+1 by position, not name.
    const TensorInfo& idx = ts[2 * il];
    const TensorInfo& bucket = ts[2 * il + 1];
    if (idx.name != IdxName(il) || bucket.name != BucketName(il)) {
      return Status::Error("tensors %zu and %zu are '%s' and '%s', expected '%s' and '%s'", 2 * il,
                           2 * il + 1, idx.name.c_str(), bucket.name.c_str(), IdxName(il).c_str(),
                           BucketName(il).c_str());
    }
    if (!IsI32Vector(idx) || idx.ne[0] != g.n_ff) {
      return Status::Error("tensor '%s' is %s %s, expected i32 [%d] (n_ff of layer 0)",
                           idx.name.c_str(), DTypeName(idx.type), idx.ShapeString().c_str(),
                           g.n_ff);
    }
    if (!IsI32Vector(bucket) || bucket.ne[0] > g.n_ff) {
      return Status::Error("tensor '%s' is %s %s, expected i32 [k <= %d]", bucket.name.c_str(),
                           DTypeName(bucket.type), bucket.ShapeString().c_str(), g.n_ff);
    }
    std::vector<int32_t>& ids = g.gpu_neurons[il];
    for (int j = 0; j < g.n_ff; ++j) {
      const int32_t v = I32At(idx, static_cast<size_t>(j));
      if (v != 0 && v != 1) {
        return Status::Error("tensor '%s' element %d is %d, expected 0 or 1", idx.name.c_str(), j,
                             v);
      }
      if (v == 1) ids.push_back(j);
    }
    if (static_cast<uint64_t>(bucket.ne[0]) != ids.size()) {
      return Status::Error("tensor '%s' has %" PRId64 " ids but '%s' marks %zu neurons",
                           bucket.name.c_str(), bucket.ne[0], idx.name.c_str(), ids.size());
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const int32_t v = I32At(bucket, k);
      if (v != ids[k]) {
        return Status::Error("tensor '%s' element %zu is %d; the sorted ids marked in '%s' give %d",
                             bucket.name.c_str(), k, v, idx.name.c_str(), ids[k]);
      }
    }
  }
  *out = std::move(g);
  return Status::Ok();
}

Status ReadGpuIndex(const std::string& path, GpuIndex* index) {
  std::unique_ptr<GgufFile> f;
  // Open's errors already name the file.
  PI_RETURN_IF_ERROR(GgufFile::Open(path, &f).WithContext("gpu index"));
  Status s = ReadGpuIndex(*f, index);
  return s.ok() ? s : s.WithContext("gpu index " + path);
}

Status ApplyGpuIndex(const GpuIndex& index, const LlamaModel& model, const ActivationStats& stats,
                     Placement* plan) {
  const LlamaConfig& c = model.config;
  if (index.gpu_neurons.size() != static_cast<size_t>(c.n_layer) || index.n_ff != c.n_ff) {
    return Status::Error("it is for %zu layers of %d neurons, the model has %d of %d",
                         index.gpu_neurons.size(), index.n_ff, c.n_layer, c.n_ff);
  }
  if (index.vram_capacity != static_cast<uint64_t>(plan->vram_budget)) {
    return Status::Error("it was solved for a budget of %" PRIu64 " bytes, not %" PRId64,
                         index.vram_capacity, plan->vram_budget);
  }
  if (!plan->dense_complete) {
    return Status::Error("the budget does not hold the dense blocks, so no neuron goes to the GPU");
  }
  int64_t bytes = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    bytes += NeuronBytes(model, il) * static_cast<int64_t>(index.gpu_neurons[il].size());
  }
  if (plan->dense_bytes + bytes > plan->vram_budget) {
    return Status::Error("its neurons take %" PRId64 " bytes of these types, %" PRId64
                         " are left beside the dense blocks",
                         bytes, plan->vram_budget - plan->dense_bytes);
  }
  plan->neuron_bytes = bytes;
  for (int il = 0; il < c.n_layer; ++il) {
    LayerPlacement& lp = plan->layers[il];
    lp.gpu_neurons = index.gpu_neurons[il];
    lp.neuron_bytes = NeuronBytes(model, il);
    lp.firing_share = FiringShare(stats, il, lp.gpu_neurons);
  }
  return Status::Ok();
}

}  // namespace pi

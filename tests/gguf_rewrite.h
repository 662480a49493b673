// Test helpers for model files made by rewriting another: scratch files
// removed at the end of a test, a GGUF copied with keys and tensors dropped
// or added, and the status of loading one.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/llama_model.h"

namespace pi {

// Removes scratch files when a test ends, passed or not.
struct RemoveOnExit {
  std::vector<std::string> paths;
  ~RemoveOnExit() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};

// Rewrites `src` into `dst`: metadata without `drop_keys` (then `set` applied),
// tensors without `drop_tensors`, plus `extra` tensors (F32, 1-D, zeros).
inline Status Rewrite(const std::string& src, const std::string& dst,
                      const std::set<std::string>& drop_keys,
                      const std::set<std::string>& drop_tensors,
                      const std::function<void(GgufWriter*)>& set = nullptr,
                      const std::vector<std::pair<std::string, int64_t>>& extra = {}) {
  std::unique_ptr<GgufFile> f;
  PI_RETURN_IF_ERROR(GgufFile::Open(src, &f));
  GgufWriter w;
  w.SetSparseMagic(f->is_sparse_magic());
  for (const auto& kv : f->metadata()) {
    if (!drop_keys.count(kv.first)) w.Set(kv.first, kv.second);
  }
  if (set) set(&w);
  for (const TensorInfo& t : f->tensors()) {
    if (drop_tensors.count(t.name)) continue;
    PI_RETURN_IF_ERROR(
        w.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data));
  }
  for (const auto& e : extra) {
    std::vector<float> zeros(static_cast<size_t>(e.second), 0.0f);
    PI_RETURN_IF_ERROR(w.AddTensor(e.first, DType::kF32, {e.second}, zeros.data()));
  }
  return w.Write(dst);
}

inline Status LoadError(const std::string& path) {
  LlamaModel m;
  return LoadLlamaModel(path, &m);
}

}  // namespace pi

#include "common/kv_cache.h"

#include <cstddef>

namespace pi {

void KvCache::Init(int n_layer, int n_ctx, int kv_dim) {
  n_ctx_ = n_ctx;
  kv_dim_ = kv_dim;
  const size_t n = static_cast<size_t>(n_layer) * n_ctx * kv_dim;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

}  // namespace pi

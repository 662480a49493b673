#include "cli/cache_type_flags.h"

#include "common/model/kv_cache.h"

namespace pi {

const char* const kCacheTypeUsage =
    "  -ctk, --cache-type-k T  KV cache key rows: f16 (default), f32 (exact) or q8_0\n"
    "  -ctv, --cache-type-v T  KV cache value rows: f16 (default), f32 or q8_0\n";

bool ParseCacheTypeFlag(const std::string& flag, ArgReader* args, DType* k_type, DType* v_type) {
  DType* out = nullptr;
  if (flag == "-ctk" || flag == "--cache-type-k") {
    out = k_type;
  } else if (flag == "-ctv" || flag == "--cache-type-v") {
    out = v_type;
  } else {
    return false;
  }
  const std::string value = args->String(flag);
  if (args->failed()) return true;
  Status s = ParseKvCacheType(value, out);
  if (!s.ok()) args->Fail(flag + ": " + s.message());
  return true;
}

}  // namespace pi

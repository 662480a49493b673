// DType: the element types of ggml/GGUF tensors, with ggml's numeric ids and
// block geometry. Ids and sizes match ggml's `ggml_type` so files interoperate
// with llama.cpp. The reader needs the geometry of every id (to bound-check a
// tensor it cannot compute with); the kernels compute only the supported ones.
#pragma once

#include <cstdint>

namespace pi {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Geometry of one type: `block_elems` weights are stored in `block_bytes` bytes.
struct DTypeInfo {
  const char* name;  // ggml's spelling, e.g. "q4_0"
  int block_elems;   // 0 for ids that ggml removed or never assigned
  int block_bytes;
};

// Returns the geometry of a raw type id; block_elems == 0 means "not a valid type".
DTypeInfo GetDTypeInfo(uint32_t id);

inline bool IsValidDType(uint32_t id) {
  return GetDTypeInfo(id).block_elems != 0;
}
inline const char* DTypeName(DType t) {
  return GetDTypeInfo(static_cast<uint32_t>(t)).name;
}

// True for the types our kernels compute with: F32, F16, BF16, Q8_0, Q4_0,
// and (on the scalar path, kernels/cpu/kquant.h) Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K.
bool IsComputeDType(DType t);

// Bytes of one row of `n` elements. `n` must be a multiple of the block size.
inline int64_t RowBytes(DType t, int64_t n) {
  DTypeInfo info = GetDTypeInfo(static_cast<uint32_t>(t));
  return n / info.block_elems * info.block_bytes;
}

}  // namespace pi

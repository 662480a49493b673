#include "kernels/dtype.h"

namespace pi {

DTypeInfo GetDTypeInfo(uint32_t id) {
  switch (static_cast<DType>(id)) {
    case DType::kF32:
      return {"f32", 1, 4};
    case DType::kF16:
      return {"f16", 1, 2};
    case DType::kQ4_0:
      return {"q4_0", 32, 18};
    case DType::kQ4_1:
      return {"q4_1", 32, 20};
    case DType::kQ5_0:
      return {"q5_0", 32, 22};
    case DType::kQ5_1:
      return {"q5_1", 32, 24};
    case DType::kQ8_0:
      return {"q8_0", 32, 34};
    case DType::kQ8_1:
      return {"q8_1", 32, 36};
    case DType::kQ2_K:
      return {"q2_K", 256, 84};
    case DType::kQ3_K:
      return {"q3_K", 256, 110};
    case DType::kQ4_K:
      return {"q4_K", 256, 144};
    case DType::kQ5_K:
      return {"q5_K", 256, 176};
    case DType::kQ6_K:
      return {"q6_K", 256, 210};
    case DType::kQ8_K:
      return {"q8_K", 256, 292};
    case DType::kIQ2_XXS:
      return {"iq2_xxs", 256, 66};
    case DType::kIQ2_XS:
      return {"iq2_xs", 256, 74};
    case DType::kIQ3_XXS:
      return {"iq3_xxs", 256, 98};
    case DType::kIQ1_S:
      return {"iq1_s", 256, 50};
    case DType::kIQ4_NL:
      return {"iq4_nl", 32, 18};
    case DType::kIQ3_S:
      return {"iq3_s", 256, 110};
    case DType::kIQ2_S:
      return {"iq2_s", 256, 82};
    case DType::kIQ4_XS:
      return {"iq4_xs", 256, 136};
    case DType::kI8:
      return {"i8", 1, 1};
    case DType::kI16:
      return {"i16", 1, 2};
    case DType::kI32:
      return {"i32", 1, 4};
    case DType::kI64:
      return {"i64", 1, 8};
    case DType::kF64:
      return {"f64", 1, 8};
    case DType::kIQ1_M:
      return {"iq1_m", 256, 56};
    case DType::kBF16:
      return {"bf16", 1, 2};
    case DType::kTQ1_0:
      return {"tq1_0", 256, 54};
    case DType::kTQ2_0:
      return {"tq2_0", 256, 66};
    case DType::kMXFP4:
      return {"mxfp4", 32, 17};
  }
  return {"invalid", 0, 0};
}

bool IsComputeDType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
         t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

}  // namespace pi

#include "common/format/tensor_check.h"

#include <cinttypes>
#include <cmath>
#include <memory>
#include <vector>

#include "common/base/progress.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant.h"

namespace pi {

Status CheckTensorValues(const GgufFile& file, bool show_progress) {
  uint64_t total = 0;
  for (const TensorInfo& t : file.tensors()) total += t.nbytes;
  std::unique_ptr<ProgressBar> progress;
  if (show_progress) {
    progress =
        std::make_unique<ProgressBar>("checking tensors", static_cast<int64_t>(total >> 20), "MiB");
  }
  std::vector<float> row;
  uint64_t done = 0;
  for (const TensorInfo& t : file.tensors()) {
    if (t.type != DType::kF32 && t.type != DType::kF16 && t.type != DType::kBF16 &&
        t.type != DType::kQ8_0 && t.type != DType::kQ4_0 && !IsBlockDequantDType(t.type)) {
      return Status::Error("tensor '%s' has type %s, which --check-tensors cannot read",
                           t.name.c_str(), DTypeName(t.type));
    }
    if (t.ne[0] > 0 && row.size() < static_cast<size_t>(t.ne[0])) row.resize(t.ne[0]);
    const int64_t row_bytes = t.row_bytes();
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      DequantizeRow(t.type, t.data + r * row_bytes, row.data(), t.ne[0]);
      for (int64_t i = 0; i < t.ne[0]; ++i) {
        if (!std::isfinite(row[i])) {
          return Status::Error("tensor '%s' %s: row %" PRId64 ", element %" PRId64
                               " is %s (a corrupt or badly converted file)",
                               t.name.c_str(), t.ShapeString().c_str(), r, i,
                               std::isnan(row[i]) ? "NaN" : "infinite");
        }
      }
    }
    done += t.nbytes;
    if (progress) progress->Update(static_cast<int64_t>(done >> 20));
  }
  if (progress) progress->Finish();
  return Status::Ok();
}

}  // namespace pi

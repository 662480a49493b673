#include "common/format/transpose_tensor.h"

#include <vector>

#include "kernels/cpu/quant.h"

namespace pi {

void TransposeTensor(const TensorInfo& t, DType to, uint8_t* dst) {
  const int64_t in_cols = t.ne[0], in_rows = t.ne[1];
  std::vector<float> all(static_cast<size_t>(in_cols * in_rows));
  for (int64_t r = 0; r < in_rows; ++r) {
    DequantizeRow(t.type, t.data + r * t.row_bytes(), all.data() + r * in_cols, in_cols);
  }
  std::vector<float> row(static_cast<size_t>(in_rows));
  const int64_t dst_row = RowBytes(to, in_rows);
  for (int64_t i = 0; i < in_cols; ++i) {
    for (int64_t r = 0; r < in_rows; ++r) row[r] = all[r * in_cols + i];
    QuantizeRow(to, row.data(), dst + i * dst_row, in_rows);
  }
}

}  // namespace pi

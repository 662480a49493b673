#include "common/model/weight_transpose.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/base/memory_limits.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

// The type a copy of a `from` matrix is kept in: the one the column-sparse
// product reads fastest at about its size. The float types, Q8_0 and Q4_0
// keep their own; the K-quants' axpy dequantizes at about a third of
// Q4_0's speed (docs/sparse-execution.md), so the 2- to 4-bit ones become
// Q4_0 (the same 4.5 bits for Q4_K) and the 5- and 6-bit ones Q8_0.
DType FastCopyType(DType from) {
  switch (from) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
      return DType::kQ4_0;
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_0;
    default:
      return from;
  }
}

// The copy's type: FastCopyType where a row of n_out (one input's weights)
// is whole blocks of it, else F16.
DType CopyType(const Tensor& w) {
  const DType to = FastCopyType(w.type);
  const int64_t block = GetDTypeInfo(static_cast<uint32_t>(to)).block_elems;
  return w.rows % block == 0 ? to : DType::kF16;
}

int64_t CopyBytes(const Tensor& w) {
  return w.cols * RowBytes(CopyType(w), w.rows);
}

// w^T into dst as a Tensor view: rows = w.cols inputs, cols = w.rows outputs.
// A task takes a band of inputs (whole blocks of w's type, so each output
// row's part of it dequantizes on its own) and writes their rows; a band's
// floats are its width times the outputs (256 x 28672 x 4 bytes for a 70B
// FFN), whatever the matrix.
Tensor Transpose(const Tensor& w, uint8_t* dst, ThreadPool* pool) {
  const DType to = CopyType(w);
  const int64_t n_in = w.cols, n_out = w.rows;
  const int64_t out_row = RowBytes(to, n_out);
  const int64_t band =
      std::max<int64_t>(256, GetDTypeInfo(static_cast<uint32_t>(w.type)).block_elems);
  const int64_t n_bands = (n_in + band - 1) / band;
  pool->ParallelFor(n_bands, [&](int64_t b, int) {
    const int64_t j0 = b * band, j1 = std::min(n_in, j0 + band), width = j1 - j0;
    std::vector<float> part(static_cast<size_t>(width)), cols(static_cast<size_t>(width * n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      DequantizeRow(w.type, w.row(r) + RowBytes(w.type, j0), part.data(), width);
      for (int64_t j = 0; j < width; ++j) cols[j * n_out + r] = part[j];
    }
    for (int64_t j = 0; j < width; ++j) {
      QuantizeRow(to, cols.data() + j * n_out, dst + (j0 + j) * out_row, n_out);
    }
  });
  Tensor t;
  t.data = dst;
  t.type = to;
  t.rows = n_in;
  t.cols = n_out;
  t.row_bytes = out_row;
  return t;
}

}  // namespace

Status AddTransposedCopies(LlamaModel* model, ThreadPool* pool, int64_t* bytes) {
  *bytes = 0;
  for (const LlamaLayer& l : model->layers) {
    for (const Tensor* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate}) {
      if (w->present()) *bytes += CopyBytes(*w);
    }
  }
  PI_RETURN_IF_ERROR(CheckMemory("--sparse teal's transposed copies", *bytes));
  for (LlamaLayer& l : model->layers) {
    int64_t layer_bytes = 0;
    for (const Tensor* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate}) {
      if (w->present()) layer_bytes += CopyBytes(*w);
    }
    uint8_t* buf = static_cast<uint8_t*>(std::malloc(static_cast<size_t>(layer_bytes)));
    if (!buf)
      return Status::Error("--sparse teal: cannot allocate %lld bytes",
                           static_cast<long long>(layer_bytes));
    model->repacked.emplace_back(buf);
    const std::pair<const Tensor*, Tensor*> jobs[] = {{&l.wq, &l.wq_t},
                                                      {&l.wk, &l.wk_t},
                                                      {&l.wv, &l.wv_t},
                                                      {&l.wo, &l.wo_t},
                                                      {&l.ffn_gate, &l.ffn_gate_t}};
    for (const auto& [w, t] : jobs) {
      if (!w->present()) continue;
      *t = Transpose(*w, buf, pool);
      buf += CopyBytes(*w);
    }
  }
  return Status::Ok();
}

}  // namespace pi

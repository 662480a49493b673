// TransposeTensor: a 2-D tensor rewritten with its axes swapped, in another
// type if asked — how a dense-layout ffn_down [n_ff, n_embd] becomes
// PowerInfer's ffn_down_t [n_embd, n_ff] (row i = neuron i's outputs), in
// pi-quantize --down-t and pi-train-predictor.
#pragma once

#include <cstdint>

#include "common/format/gguf.h"
#include "kernels/dtype.h"

namespace pi {

// Writes `t` (ne = {cols, rows}) transposed — ne = {rows, cols}, row i of the
// result is column i of `t` — as `to` into dst (cols * RowBytes(to, rows)
// bytes). `rows` must be whole blocks of `to`. Goes through f32 (the whole
// tensor is dequantized once).
void TransposeTensor(const TensorInfo& t, DType to, uint8_t* dst);

}  // namespace pi

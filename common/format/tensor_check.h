// CheckTensorValues: every weight of a model file read once and checked to
// be finite (llama.cpp's --check-tensors). A NaN or infinity in a weight, or
// in a quantized block's scale, would otherwise only show up as NaN logits
// many layers later.
#pragma once

#include "common/base/status.h"
#include "common/format/gguf.h"

namespace pi {

// OK when every value of every tensor dequantizes to a finite number;
// otherwise an error naming the first bad tensor, row and element. Types
// the engine cannot read are an error. Shows progress on stderr when
// `show_progress` (it reads the whole file).
Status CheckTensorValues(const GgufFile& file, bool show_progress);

}  // namespace pi

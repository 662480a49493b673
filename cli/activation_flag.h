// --ffn-activation relu|silu|drelu|gelu: the FFN activation a tool runs a
// model with, instead of the one its file names (or, without the key,
// implies: llama.cpp's converter writes none, so a ReLU model read as SiLU).
// `pi-quantize --set-activation` fixes a file once instead.
#pragma once

#include <string>

#include "cli/args.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"

namespace pi {

// The flag's help lines (a macro so that usage literals can embed it).
#define PI_FFN_ACTIVATION_USAGE                                                                 \
  "  --ffn-activation A      run the FFN with relu | silu | drelu | gelu instead of what the\n" \
  "                          file says (pi-quantize --set-activation fixes a file once)\n"
extern const char kFfnActivationUsage[];

// Consumes --ffn-activation (already read by args->Next()).
bool ParseFfnActivationFlag(const std::string& flag, ArgReader* args, std::string* value);

// Applies a non-empty `value` to the loaded model; says so on stderr when it
// replaces what the file said.
Status ApplyFfnActivationFlag(const char* tool, const std::string& value, LlamaModel* model);

}  // namespace pi

// llama.cpp's KV cache type flags, shared by the tools that run the engine:
//   -ctk, --cache-type-k TYPE   key rows: f16 (default), f32 or q8_0
//   -ctv, --cache-type-v TYPE   value rows: likewise
#pragma once

#include <string>

#include "cli/args.h"
#include "kernels/dtype.h"

namespace pi {

// Help lines for the two flags.
extern const char* const kCacheTypeUsage;

// Consumes `flag` (already read by args->Next()) when it is one of the two
// flags, failing `args` on a bad type; returns false for any other flag.
bool ParseCacheTypeFlag(const std::string& flag, ArgReader* args, DType* k_type, DType* v_type);

}  // namespace pi

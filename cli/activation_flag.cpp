#include "cli/activation_flag.h"

#include <cstdio>

namespace pi {

const char kFfnActivationUsage[] = PI_FFN_ACTIVATION_USAGE;

bool ParseFfnActivationFlag(const std::string& flag, ArgReader* args, std::string* value) {
  if (flag != "--ffn-activation") return false;
  *value = args->String(flag);
  if (!args->failed() && *value != "relu" && *value != "silu" && *value != "drelu" &&
      *value != "gelu") {
    args->Fail("--ffn-activation expects relu, silu, drelu or gelu, got '" + *value + "'");
  }
  return true;
}

Status ApplyFfnActivationFlag(const char* tool, const std::string& value, LlamaModel* model) {
  if (value.empty()) return Status::Ok();
  FfnActivation previous;
  PI_RETURN_IF_ERROR(OverrideFfnActivation(value, model, &previous));
  if (previous != model->config.activation) {
    fprintf(stderr, "%s: warning: --ffn-activation %s overrides the file's %s\n", tool,
            value.c_str(), FfnActivationName(previous));
  }
  return Status::Ok();
}

}  // namespace pi

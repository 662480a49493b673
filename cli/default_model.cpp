#include "cli/default_model.h"

#include <unistd.h>

#include "common/base/executable_path.h"

namespace pi {

std::string DefaultModelPath() {
  std::string p = PI_DEFAULT_MODEL;
  if (access(p.c_str(), R_OK) == 0) return p;
  const std::string alt = PathNextToExecutable("../share/pi/models/" + p.substr(p.rfind('/') + 1));
  if (access(alt.c_str(), R_OK) == 0) return alt;
  return p;
}

}  // namespace pi

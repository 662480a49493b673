#include "cli/default_model.h"

#include <unistd.h>

namespace pi {

std::string DefaultModelPath() {
  std::string p = PI_DEFAULT_MODEL;
  if (access(p.c_str(), R_OK) == 0) return p;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    const std::string alt = dir + "/../share/pi/models/" + p.substr(p.rfind('/') + 1);
    if (access(alt.c_str(), R_OK) == 0) return alt;
  }
  return p;
}

}  // namespace pi

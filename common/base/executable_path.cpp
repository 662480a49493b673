#include "common/base/executable_path.h"

#include <unistd.h>

namespace pi {

std::string PathNextToExecutable(const std::string& name) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return name;
  const std::string path(self, static_cast<size_t>(len));
  return path.substr(0, path.rfind('/') + 1) + name;
}

}  // namespace pi

// The committed fuzz regressions (tests/fuzz/regressions): gguf_fuzz's plain
// *.gguf files and model_fuzz's model-*.gguf, for the tests that replay them.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

namespace pi {

// Paths of the *.gguf regressions whose names start with "model-" (model
// true) or do not (model false), sorted.
inline std::vector<std::string> FuzzRegressionFiles(bool model) {
  const std::string dir = std::string(PI_SOURCE_DIR) + "/tests/fuzz/regressions";
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() < 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) continue;
      if ((name.rfind("model-", 0) == 0) == model) out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pi

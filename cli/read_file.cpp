#include "cli/read_file.h"

#include <fstream>
#include <sstream>

namespace pi {

Status ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read '%s'", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Error("cannot read '%s'", path.c_str());
  *out = ss.str();
  return Status::Ok();
}

}  // namespace pi

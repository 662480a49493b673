// What the fuzz targets' seed writers share: the one argument (the corpus
// folder) and writing a seed file through the project's safe writer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/base/atomic_file.h"

namespace pi {

// The seed folder from `prog OUT_DIR`; false (after the usage line) otherwise.
inline bool SeedDirFromArgs(int argc, char** argv, std::string* dir) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return false;
  }
  *dir = argv[1];
  return true;
}

inline bool WriteSeedFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  const Status s = WriteFileAtomically(
      path, [&bytes](AtomicFile* f) { return f->Write(bytes.data(), bytes.size()); });
  if (!s.ok()) fprintf(stderr, "seed writer: %s\n", s.message().c_str());
  return s.ok();
}

}  // namespace pi

// Safetensors: Hugging Face's tensor files, read in place. A file is an
// 8-byte little-endian header length, a JSON header
//
//   {"NAME": {"dtype": "F16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"format": "pt"}}
//
// and the tensors' bytes (row-major, little-endian), offsets relative to the
// end of the header. A large model comes as shards with an index,
// model.safetensors.index.json: {"weight_map": {"NAME": "shard file"}}.
//
// Everything is checked before a byte of data is trusted: the header length
// against the file, the JSON, every dtype, shape (element count against its
// byte range, no overflow) and range (inside the data, no overlaps).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/base/mapped_files.h"
#include "common/base/status.h"
#include "kernels/dtype.h"

namespace pi {

struct SafeTensor {
  std::string name;
  std::string dtype;      // as written: "F32", "F16", "BF16", "I64", ...
  bool is_float = false;  // F32, F16 or BF16: `type` says which
  DType type = DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t n_elements() const;
};

// Parses a whole safetensors file held in [data, data + size): tensors in
// header order, pointing into `data`.
Status ParseSafetensors(const uint8_t* data, size_t size, std::vector<SafeTensor>* out);

// The tensors of a Hugging Face model folder: model.safetensors, or the
// shards model.safetensors.index.json lists (each mapped read-only).
class SafetensorsSet {
 public:
  Status Open(const std::string& dir);
  // Null when no file has `name`.
  const SafeTensor* Find(const std::string& name) const;
  const std::vector<SafeTensor>& tensors() const { return tensors_; }

 private:
  Status AddFile(const std::string& path);

  std::vector<std::unique_ptr<MappedRegion>> files_;
  std::vector<SafeTensor> tensors_;
  std::vector<std::string> file_of_;  // [tensors] the file each came from
  std::map<std::string, size_t> index_;
};

}  // namespace pi

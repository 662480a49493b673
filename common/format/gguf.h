// GGUF: llama.cpp's model container (ggml's docs/gguf.md).
//
// GgufFile maps a file read-only and validates everything before handing out
// a view: header, metadata, tensor infos and tensor data bounds. Tensor data is
// never copied: TensorInfo::data points into the mapping. Both magics are
// accepted: "GGUF" and PowerInfer's "PWRI" (a sparse model; is_sparse_magic()).
//
// GgufWriter builds a file in memory (metadata + tensors) and writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/base/mapped_files.h"
#include "common/base/status.h"
#include "kernels/dtype.h"

namespace pi {

// The largest general.alignment accepted, read or written. Files use 32 (or
// 64); ggml takes any power of two, but beyond this a value only wastes
// bytes: a 61-byte file claiming 1 GiB made pi-quantize write a 1 GiB file.
inline constexpr uint32_t kGgufMaxAlignment = 1u << 16;
// The GGUF specification's floor (a multiple of 8): below it f32 tensors
// could start at addresses a float load may not use.
inline constexpr uint32_t kGgufMinAlignment = 8;

// Metadata value types, ggml's `gguf_type` ids.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* GgufTypeName(GgufType t);

// One metadata value. Scalars are widened into the matching field; arrays
// hold their element type and elements (nested arrays are allowed).
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;   // kU8/kU16/kU32/kU64/kBool
  int64_t i = 0;    // kI8/kI16/kI32/kI64
  double f = 0;     // kF32/kF64
  std::string str;  // kString
  GgufType array_type = GgufType::kU8;
  std::vector<GgufValue> array;  // kArray

  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue Array(GgufType elem_type, std::vector<GgufValue> elems);
  static GgufValue StringArray(const std::vector<std::string>& v);
  static GgufValue F32Array(const std::vector<float>& v);
  static GgufValue I32Array(const std::vector<int32_t>& v);

  bool is_integer() const;  // any integer width (or bool)
  bool is_float() const;
};

// A tensor as described in the file. ne[0] is the contiguous axis (ggml order).
struct TensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const { return RowBytes(type, ne[0]); }
  // Rows of ne[0] elements (0 for an empty tensor, which may have ne[0] == 0).
  int64_t n_rows() const { return ne[0] == 0 ? 0 : n_elements() / ne[0]; }
  std::string ShapeString() const;  // "[4096, 11008]"
};

class GgufFile {
 public:
  GgufFile() = default;
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Maps and validates `path`. On error, the message names the problem and the
  // byte offset where it was found. A model split by llama.cpp's gguf-split
  // (`NAME-00001-of-00003.gguf`: split.no, split.count, split.tensors.count)
  // is opened from its first part: the others are found beside it by name
  // and their tensors join the first's (each part validated alone; a
  // missing, foreign or out-of-order part is an error naming it).
  static Status Open(const std::string& path, std::unique_ptr<GgufFile>* out);
  // Same over a caller-owned buffer (used by the fuzzer and tests); the buffer
  // must outlive the GgufFile.
  static Status OpenBuffer(const uint8_t* data, size_t size, std::unique_ptr<GgufFile>* out);
  // Reads `path` whole into memory the file owns (--no-mmap: the weights
  // in anonymous memory, not mapped from the page cache), checked against
  // the memory available first; then validates it as Open does.
  static Status Read(const std::string& path, std::unique_ptr<GgufFile>* out);

  // Locks the file's bytes in RAM (--mlock) so they are never paged out;
  // the error names the limit (ulimit -l) when the kernel refuses.
  Status LockInMemory() const;

  uint32_t version() const { return version_; }
  bool is_sparse_magic() const { return sparse_magic_; }  // "PWRI"
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }  // (a split model's first part)
  size_t file_size() const;                          // (a split model's parts together)
  int n_parts() const { return 1 + static_cast<int>(parts_.size()); }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(const std::string& key) const;

  // Typed getters. They fail (with the key in the message) when the key is
  // missing or has an incompatible type. Integer getters accept any integer
  // width whose value fits.
  Status GetU32(const std::string& key, uint32_t* out) const;
  Status GetU64(const std::string& key, uint64_t* out) const;
  Status GetF32(const std::string& key, float* out) const;
  Status GetBool(const std::string& key, bool* out) const;
  Status GetString(const std::string& key, std::string* out) const;
  // Optional variants: leave *out untouched when the key is absent.
  Status GetU32Opt(const std::string& key, uint32_t* out) const;
  Status GetF32Opt(const std::string& key, float* out) const;
  Status GetBoolOpt(const std::string& key, bool* out) const;
  Status GetStringOpt(const std::string& key, std::string* out) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(const std::string& name) const;

 private:
  Status Parse();
  // One file mapped (or read whole) and parsed, nothing joined.
  static Status Load(const std::string& path, bool read, std::unique_ptr<GgufFile>* out);
  // The parts after the first of a split model (Open's or Read's way).
  Status JoinSplitParts(bool read);

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<MappedRegion> region_;  // Open's mapping (OpenBuffer: none)
  struct FreeBytes {
    void operator()(uint8_t* p) const { free(p); }
  };
  std::unique_ptr<uint8_t, FreeBytes> owned_;  // Read's copy
  uint32_t version_ = 0;
  bool sparse_magic_ = false;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::vector<std::unique_ptr<GgufFile>> parts_;  // a split model's other parts
};

// Builds a GGUF v3 file. Tensors are added either as bytes (copied into the
// writer; for tools and tests, not the decode path) or as a fill callback that
// produces each tensor's bytes while the file is written, so a large model can
// be streamed out with one tensor in memory at a time.
class GgufWriter {
 public:
  // Writes a tensor's bytes into `dst` (exactly the tensor's byte size).
  using FillFn = std::function<Status(void* dst)>;

  void SetSparseMagic(bool pwri) { sparse_magic_ = pwri; }  // write "PWRI"
  // A power of two from kGgufMinAlignment to kGgufMaxAlignment; also sets general.alignment
  // (removed again for the default, 32).
  Status SetAlignment(uint32_t alignment);
  // Replaces an existing key (keeping its position). Setting general.alignment
  // to a valid u32 also changes the alignment used for the data.
  void Set(const std::string& key, GgufValue value);
  // ne in ggml order (1..4 dims; none for a scalar); `data` holds
  // RowBytes(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes.
  Status AddTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                   const void* data);
  // Same, but the bytes come from `fill`, called once during Write/Serialize.
  Status AddTensorFill(const std::string& name, DType type, const std::vector<int64_t>& ne,
                       FillFn fill);
  // Writes `path` through an AtomicFile (atomic_file.h). Fails on
  // inconsistent metadata (e.g. an array element whose type differs from the
  // array's element type) and on a fill callback's error.
  Status Write(const std::string& path) const;
  // The whole file as bytes (tests, fuzzer seeds). Returns an empty vector
  // when the writer's contents are invalid (see Write).
  std::vector<uint8_t> Serialize() const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t nbytes = 0;
    std::vector<uint8_t> data;  // used when fill is empty
    FillFn fill;
  };
  // Receives the file's bytes in order (a memory buffer or a file).
  using AppendFn = std::function<Status(const void* data, size_t n)>;
  Status Validate() const;
  Status WriteTo(const AppendFn& append) const;
  Status CheckTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                     uint64_t* nbytes) const;

  bool sparse_magic_ = false;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;  // key -> position in kv_
  std::vector<PendingTensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
};

}  // namespace pi

// GgufFile: maps a GGUF file and validates all of it before anything is used.
//
// Every length and count read from the file is checked against the bytes that
// remain BEFORE anything is allocated, so a hostile header (a 2^60 array
// count) fails with a message instead of an allocation. Errors name the
// problem and the byte offset where it was found.
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/base/mapped_files.h"
#include "common/base/memory_limits.h"
#include "common/format/gguf.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the GGUF reader assumes a little-endian host");

namespace pi {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
constexpr size_t kMaxTensorName = 63;  // ggml's GGML_MAX_NAME (64) minus the NUL
constexpr int kMaxDims = 4;
// Real files nest arrays at most once; the limit bounds recursion on hostile input.
constexpr int kMaxArrayDepth = 16;
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufType::kF64);
// Smallest possible encodings, used to bound counts before reserving memory.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// Names from the file go into messages clipped and with non-printables escaped,
// so a garbage key cannot flood or corrupt the message.
std::string Printable(const std::string& s) {
  constexpr size_t kMax = 80;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

// Size in the file of one element of `type`, or the smallest possible size for
// variable-length types (string: its u64 length; array: type + count).
uint64_t MinEncodedSize(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

// A bounds-checked read position in the file.
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size) : base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status Read(void* dst, size_t n, const std::string& what) {
    if (n > remaining()) {
      return Status::Error("truncated file: %s at byte %zu needs %zu bytes, only %zu left",
                           what.c_str(), pos_, n, remaining());
    }
    if (n > 0) memcpy(dst, base_ + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  Status U32(uint32_t* v, const std::string& what) { return Read(v, 4, what); }
  Status U64(uint64_t* v, const std::string& what) { return Read(v, 8, what); }

  // A GGUF string: u64 length, then bytes. The length is checked against the
  // file before the string is allocated.
  Status String(std::string* out, const std::string& what) {
    size_t at = pos_;
    uint64_t len = 0;
    PI_RETURN_IF_ERROR(U64(&len, what + " length"));
    if (len > remaining()) {
      return Status::Error("%s: string length %" PRIu64
                           " at byte %zu exceeds the %zu bytes left in the file",
                           what.c_str(), len, at, remaining());
    }
    out->assign(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

Status ReadValue(Cursor* c, GgufType type, int depth, const std::string& key, GgufValue* out) {
  out->type = type;
  const std::string what = "value of key '" + Printable(key) + "'";
  switch (type) {
    case GgufType::kU8: {
      uint8_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 1, what));
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kI8: {
      int8_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 1, what));
      out->i = v;
      return Status::Ok();
    }
    case GgufType::kU16: {
      uint16_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 2, what));
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kI16: {
      int16_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 2, what));
      out->i = v;
      return Status::Ok();
    }
    case GgufType::kU32: {
      uint32_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 4, what));
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kI32: {
      int32_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 4, what));
      out->i = v;
      return Status::Ok();
    }
    case GgufType::kU64: {
      uint64_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 8, what));
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kI64: {
      int64_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 8, what));
      out->i = v;
      return Status::Ok();
    }
    case GgufType::kF32: {
      float v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 4, what));
      out->f = v;
      return Status::Ok();
    }
    case GgufType::kF64: {
      double v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 8, what));
      out->f = v;
      return Status::Ok();
    }
    case GgufType::kBool: {
      size_t at = c->pos();
      uint8_t v = 0;
      PI_RETURN_IF_ERROR(c->Read(&v, 1, what));
      if (v > 1) {
        return Status::Error("invalid bool value %u for key '%s' at byte %zu (must be 0 or 1)", v,
                             Printable(key).c_str(), at);
      }
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kString:
      return c->String(&out->str, what);
    case GgufType::kArray: {
      size_t at = c->pos();
      if (depth >= kMaxArrayDepth) {
        return Status::Error("key '%s': arrays nested deeper than %d levels at byte %zu",
                             Printable(key).c_str(), kMaxArrayDepth, at);
      }
      uint32_t elem_type = 0;
      PI_RETURN_IF_ERROR(c->U32(&elem_type, "array element type of key '" + Printable(key) + "'"));
      if (elem_type > kMaxValueType) {
        return Status::Error("unknown array element type %u for key '%s' at byte %zu", elem_type,
                             Printable(key).c_str(), at);
      }
      size_t count_at = c->pos();
      uint64_t count = 0;
      PI_RETURN_IF_ERROR(c->U64(&count, "array length of key '" + Printable(key) + "'"));
      out->array_type = static_cast<GgufType>(elem_type);
      // Every element takes at least MinEncodedSize bytes, so a count the rest
      // of the file cannot hold is rejected before reserving memory for it.
      if (count > c->remaining() / MinEncodedSize(out->array_type)) {
        return Status::Error("key '%s': array count %" PRIu64
                             " at byte %zu exceeds what the %zu bytes left in the file can hold",
                             Printable(key).c_str(), count, count_at, c->remaining());
      }
      out->array.resize(static_cast<size_t>(count));
      for (GgufValue& elem : out->array) {
        PI_RETURN_IF_ERROR(ReadValue(c, out->array_type, depth + 1, key, &elem));
      }
      return Status::Ok();
    }
  }
  return Status::Error("unknown value type %u for key '%s'", static_cast<uint32_t>(type),
                       Printable(key).c_str());
}

bool IsPowerOfTwo(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Integer metadata as a (sign, magnitude) pair; false for non-integers.
// Bools are not integers here: a getter asking for a count should not
// silently accept a flag.
bool IntegerValue(const GgufValue& v, bool* negative, uint64_t* magnitude) {
  switch (v.type) {
    case GgufType::kU8:
    case GgufType::kU16:
    case GgufType::kU32:
    case GgufType::kU64:
      *negative = false;
      *magnitude = v.u;
      return true;
    case GgufType::kI8:
    case GgufType::kI16:
    case GgufType::kI32:
    case GgufType::kI64:
      *negative = v.i < 0;
      *magnitude = static_cast<uint64_t>(v.i);
      return true;
    default:
      return false;
  }
}

Status GetUnsigned(const GgufFile& file, const std::string& key, uint64_t max, uint64_t* out) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return Status::Error("metadata key '%s' not found", key.c_str());
  bool negative = false;
  uint64_t magnitude = 0;
  if (!IntegerValue(*v, &negative, &magnitude)) {
    return Status::Error("metadata key '%s' has type %s, expected an integer", key.c_str(),
                         GgufTypeName(v->type));
  }
  if (negative) {
    return Status::Error("metadata key '%s' = %" PRId64 " is negative", key.c_str(), v->i);
  }
  if (magnitude > max) {
    return Status::Error("metadata key '%s' = %" PRIu64 " does not fit (max %" PRIu64 ")",
                         key.c_str(), magnitude, max);
  }
  *out = magnitude;
  return Status::Ok();
}

// The header: the magic (GGUF, or PowerInfer's PWRI), the version, and the
// counts of tensors and metadata entries, each checked against the bytes left.
Status ReadHeader(Cursor* c, bool* sparse_magic, uint32_t* version, uint64_t* tensor_count,
                  uint64_t* kv_count) {
  char magic[4];
  PI_RETURN_IF_ERROR(c->Read(magic, 4, "magic"));
  if (memcmp(magic, "GGUF", 4) == 0) {
    *sparse_magic = false;
  } else if (memcmp(magic, "PWRI", 4) == 0) {
    *sparse_magic = true;
  } else {
    return Status::Error(
        "bad magic at byte 0: %02x %02x %02x %02x (\"%s\"), expected \"GGUF\" or \"PWRI\"",
        static_cast<uint8_t>(magic[0]), static_cast<uint8_t>(magic[1]),
        static_cast<uint8_t>(magic[2]), static_cast<uint8_t>(magic[3]),
        Printable(std::string(magic, 4)).c_str());
  }
  PI_RETURN_IF_ERROR(c->U32(version, "version"));
  if (*version == 1) {
    return Status::Error(
        "unsupported GGUF version 1 at byte 4: v1 files are no longer "
        "supported, re-convert the model (need version 2 or 3)");
  }
  if (*version < 2 || *version > 3) {
    // A byte-swapped small version has its low 16 bits zero.
    const bool swapped = (*version & 0xffff) == 0;
    return Status::Error("unsupported GGUF version %u at byte 4 (need 2 or 3)%s", *version,
                         swapped ? "; the file looks big-endian, which is not supported" : "");
  }
  PI_RETURN_IF_ERROR(c->U64(tensor_count, "tensor count"));
  PI_RETURN_IF_ERROR(c->U64(kv_count, "metadata count"));
  if (*kv_count > c->remaining() / kMinKvBytes) {
    return Status::Error("metadata count %" PRIu64
                         " at byte 16 exceeds what the %zu bytes left in the file can hold",
                         *kv_count, c->remaining());
  }
  if (*tensor_count > c->remaining() / kMinTensorInfoBytes) {
    return Status::Error("tensor count %" PRIu64
                         " at byte 8 exceeds what the %zu bytes left in the file can hold",
                         *tensor_count, c->remaining());
  }
  return Status::Ok();
}

// Tensor t's info: name (unique in `index`), shape, type and data offset,
// every size checked for overflow; *offset_at = where the offset field is.
Status ReadTensorInfo(Cursor* c, uint64_t t, uint32_t alignment,
                      const std::map<std::string, size_t>& index, TensorInfo* info,
                      size_t* offset_at) {
  const size_t name_at = c->pos();
  PI_RETURN_IF_ERROR(c->String(&info->name, "name of tensor " + std::to_string(t)));
  const std::string name = Printable(info->name);
  if (info->name.size() > kMaxTensorName) {
    return Status::Error("tensor name '%s' at byte %zu is %zu bytes long; the limit is %zu",
                         name.c_str(), name_at, info->name.size(), kMaxTensorName);
  }
  if (index.count(info->name) != 0) {
    return Status::Error("duplicate tensor name '%s' at byte %zu", name.c_str(), name_at);
  }
  const size_t dims_at = c->pos();
  uint32_t n_dims = 0;
  PI_RETURN_IF_ERROR(c->U32(&n_dims, "n_dims of tensor '" + name + "'"));
  if (n_dims > kMaxDims) {
    return Status::Error("tensor '%s': n_dims %u at byte %zu is more than %d", name.c_str(), n_dims,
                         dims_at, kMaxDims);
  }
  info->n_dims = static_cast<int>(n_dims);
  int64_t n_elements = 1;
  for (int d = 0; d < info->n_dims; ++d) {
    const size_t dim_at = c->pos();
    uint64_t raw = 0;
    PI_RETURN_IF_ERROR(
        c->U64(&raw, "dimension " + std::to_string(d) + " of tensor '" + name + "'"));
    const int64_t ne = static_cast<int64_t>(raw);
    if (ne < 0) {
      return Status::Error("tensor '%s': dimension %d = %" PRId64 " at byte %zu is negative",
                           name.c_str(), d, ne, dim_at);
    }
    // A zero dimension is an empty tensor, as ggml allows (PowerInfer's
    // gpuidx writes an empty gpu_bucket for a layer with no GPU neurons).
    if (ne != 0 && n_elements > std::numeric_limits<int64_t>::max() / ne) {
      return Status::Error("tensor '%s': element count overflows int64 at dimension %d (byte %zu)",
                           name.c_str(), d, dim_at);
    }
    n_elements *= ne;
    info->ne[d] = ne;
  }
  const size_t type_at = c->pos();
  uint32_t type = 0;
  PI_RETURN_IF_ERROR(c->U32(&type, "type of tensor '" + name + "'"));
  if (!IsValidDType(type)) {
    return Status::Error("tensor '%s': unknown tensor type id %u at byte %zu", name.c_str(), type,
                         type_at);
  }
  info->type = static_cast<DType>(type);
  const DTypeInfo dt = GetDTypeInfo(type);
  if (info->ne[0] % dt.block_elems != 0) {
    return Status::Error("tensor '%s': ne[0] = %" PRId64
                         " (byte %zu) is not a multiple of the %s block size %d",
                         name.c_str(), info->ne[0], dims_at + 4, dt.name, dt.block_elems);
  }
  uint64_t row_bytes = 0;
  uint64_t nbytes = 0;
  const uint64_t n_rows = static_cast<uint64_t>(info->n_rows());
  if (__builtin_mul_overflow(static_cast<uint64_t>(info->ne[0] / dt.block_elems),
                             static_cast<uint64_t>(dt.block_bytes), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, n_rows, &nbytes) ||
      // Rows are sized in int64 (TensorInfo::row_bytes): even an empty
      // tensor's row size must fit.
      row_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::Error("tensor '%s': byte size of shape %s overflows (byte %zu)", name.c_str(),
                         info->ShapeString().c_str(), dims_at);
  }
  info->nbytes = nbytes;
  *offset_at = c->pos();
  PI_RETURN_IF_ERROR(c->U64(&info->offset, "data offset of tensor '" + name + "'"));
  if (info->offset % alignment != 0) {
    return Status::Error("tensor '%s': misaligned data offset %" PRIu64
                         " at byte %zu is not a multiple of the alignment %u",
                         name.c_str(), info->offset, *offset_at, alignment);
  }
  return Status::Ok();
}

// The data section: it starts at the first multiple of the alignment after
// the infos (a file without tensors may end before that padding); every
// tensor's bytes lie inside the file and overlap no other tensor's.
Status PlaceTensorData(const uint8_t* base, size_t size, size_t infos_end, uint32_t alignment,
                       const std::vector<size_t>& offset_at, std::vector<TensorInfo>* tensors) {
  const uint64_t data_start =
      (static_cast<uint64_t>(infos_end) + alignment - 1) / alignment * alignment;
  if (!tensors->empty() && data_start > size) {
    return Status::Error("truncated file: the tensor data section starts at byte %" PRIu64
                         " but the file has %zu bytes",
                         data_start, size);
  }
  for (size_t t = 0; t < tensors->size(); ++t) {
    TensorInfo& info = (*tensors)[t];
    const uint64_t data_size = size - data_start;
    if (info.offset > data_size || info.nbytes > data_size - info.offset) {
      return Status::Error("tensor '%s': data out of file bounds: %" PRIu64
                           " bytes at data offset %" PRIu64
                           " (offset field at byte %zu, file byte %" PRIu64
                           ") run past the end of the file (%zu bytes; truncated?)",
                           Printable(info.name).c_str(), info.nbytes, info.offset, offset_at[t],
                           data_start + info.offset, size);
    }
    info.data = base + data_start + info.offset;
  }
  // Tensor data regions must not overlap (a writer bug or a crafted file that
  // would alias two weights).
  std::vector<size_t> order;  // empty tensors occupy no bytes: nothing to overlap
  for (size_t t = 0; t < tensors->size(); ++t) {
    if ((*tensors)[t].nbytes > 0) order.push_back(t);
  }
  std::sort(order.begin(), order.end(),
            [tensors](size_t a, size_t b) { return (*tensors)[a].offset < (*tensors)[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = (*tensors)[order[k - 1]];
    const TensorInfo& cur = (*tensors)[order[k]];
    if (cur.offset < prev.offset + prev.nbytes) {
      return Status::Error("tensor '%s' data [%" PRIu64 ", %" PRIu64
                           ") overlaps tensor '%s' data [%" PRIu64 ", %" PRIu64
                           ") (offset field at byte %zu)",
                           Printable(cur.name).c_str(), cur.offset, cur.offset + cur.nbytes,
                           Printable(prev.name).c_str(), prev.offset, prev.offset + prev.nbytes,
                           offset_at[order[k]]);
    }
  }
  return Status::Ok();
}

}  // namespace

GgufFile::~GgufFile() = default;

Status GgufFile::Open(const std::string& path, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> file;
  PI_RETURN_IF_ERROR(Load(path, false, &file));
  PI_RETURN_IF_ERROR(file->JoinSplitParts(false));
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::Read(const std::string& path, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> file;
  PI_RETURN_IF_ERROR(Load(path, true, &file));
  PI_RETURN_IF_ERROR(file->JoinSplitParts(true));
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::Load(const std::string& path, bool read, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  if (!read) {
    PI_RETURN_IF_ERROR(MappedRegion::Map(path, &file->region_));
    file->path_ = path;
    file->base_ = file->region_->data();
    file->size_ = file->region_->size();
    PI_RETURN_IF_ERROR(file->Parse().WithContext(path));
    *out = std::move(file);
    return Status::Ok();
  }
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return Status::Error("%s: cannot open: %s", path.c_str(), strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return Status::Error("%s: not a regular file", path.c_str());
  }
  const size_t size = static_cast<size_t>(st.st_size);
  Status s =
      CheckMemory("reading " + path + " into memory (--no-mmap)", static_cast<int64_t>(size));
  if (s.ok() && size > 0) {
    // Page-aligned, as a mapping is: tensor data keeps its alignment.
    file->owned_.reset(static_cast<uint8_t*>(aligned_alloc(4096, (size + 4095) / 4096 * 4096)));
    if (!file->owned_) s = Status::Error("%s: cannot allocate %zu bytes", path.c_str(), size);
  }
  if (s.ok() && size > 0 && fread(file->owned_.get(), 1, size, f) != size) {
    s = Status::Error("%s: read failed: %s", path.c_str(), strerror(errno));
  }
  fclose(f);
  PI_RETURN_IF_ERROR(s);
  file->path_ = path;
  file->base_ = file->owned_.get();
  file->size_ = size;
  PI_RETURN_IF_ERROR(file->Parse().WithContext(path));
  *out = std::move(file);
  return Status::Ok();
}

size_t GgufFile::file_size() const {
  size_t total = size_;
  for (const auto& p : parts_) total += p->size_;
  return total;
}

Status GgufFile::JoinSplitParts(bool read) {
  // (llama.cpp writes split.no and split.count as u16, split.tensors.count as i32.)
  uint64_t count = 0, no = 0, total = 0;
  if (!GetU64("split.count", &count).ok() || count <= 1) return Status::Ok();
  if (count > 9999) {  // (gguf-split's five-digit names hold at most 99999)
    return Status::Error("%s: split.count %" PRIu64 " is over 9999 parts", path_.c_str(), count);
  }
  const bool numbered = GetU64("split.no", &no).ok();
  // llama.cpp's names: PREFIX-00001-of-00003.gguf.
  char tail[40];
  snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", 1, static_cast<int>(count));
  const size_t cut = path_.size() >= strlen(tail) ? path_.size() - strlen(tail) : 0;
  if (!numbered || no != 0 || path_.compare(cut, std::string::npos, tail) != 0) {
    return Status::Error("%s: part %" PRIu64 " of a model split in %" PRIu64
                         ": open its first part, named PREFIX%s",
                         path_.c_str(), no + 1, count, tail);
  }
  const std::string prefix = path_.substr(0, cut);
  for (uint64_t i = 1; i < count; ++i) {
    snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", static_cast<int>(i + 1),
             static_cast<int>(count));
    const std::string part_path = prefix + tail;
    std::unique_ptr<GgufFile> part;
    PI_RETURN_IF_ERROR(Load(part_path, read, &part));
    uint64_t part_no = 0, part_count = 0;
    if (!part->GetU64("split.no", &part_no).ok() ||
        !part->GetU64("split.count", &part_count).ok() || part_no != i || part_count != count) {
      return Status::Error("%s: not part %" PRIu64 " of %" PRIu64
                           " (its split.no and split.count say otherwise)",
                           part_path.c_str(), i + 1, count);
    }
    for (TensorInfo& t : part->tensors_) {
      if (tensor_index_.count(t.name) != 0) {
        return Status::Error("%s: tensor '%s' is in an earlier part too", part_path.c_str(),
                             Printable(t.name).c_str());
      }
      tensor_index_[t.name] = tensors_.size();
      tensors_.push_back(t);
    }
    parts_.push_back(std::move(part));
  }
  if (GetU64("split.tensors.count", &total).ok() && total != tensors_.size()) {
    return Status::Error("%s: split.tensors.count says %" PRIu64 " tensors; its %" PRIu64
                         " parts hold %zu",
                         path_.c_str(), total, count, tensors_.size());
  }
  return Status::Ok();
}

Status GgufFile::LockInMemory() const {
  for (const auto& p : parts_) PI_RETURN_IF_ERROR(p->LockInMemory());
  if (size_ == 0) return Status::Ok();
  if (mlock(base_, size_) != 0) {
    return Status::Error("%s: cannot lock %zu bytes in RAM (--mlock): %s (raise ulimit -l)",
                         path_.c_str(), size_, strerror(errno));
  }
  return Status::Ok();
}

Status GgufFile::OpenBuffer(const uint8_t* data, size_t size, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->base_ = data;
  file->size_ = data == nullptr ? 0 : size;
  PI_RETURN_IF_ERROR(file->Parse());
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::Parse() {
  Cursor c(base_, size_);
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  PI_RETURN_IF_ERROR(ReadHeader(&c, &sparse_magic_, &version_, &tensor_count, &kv_count));

  // ---- metadata ----
  kv_.clear();
  kv_index_.clear();
  kv_.reserve(static_cast<size_t>(kv_count));
  size_t alignment_at = 0;  // byte offset of general.alignment's value
  for (uint64_t k = 0; k < kv_count; ++k) {
    const size_t key_at = c.pos();
    std::string key;
    PI_RETURN_IF_ERROR(c.String(&key, "key of metadata entry " + std::to_string(k)));
    if (kv_index_.count(key) != 0) {
      return Status::Error("duplicate key '%s' at byte %zu", Printable(key).c_str(), key_at);
    }
    const size_t type_at = c.pos();
    uint32_t type = 0;
    PI_RETURN_IF_ERROR(c.U32(&type, "value type of key '" + Printable(key) + "'"));
    if (type > kMaxValueType) {
      return Status::Error("unknown value type %u for key '%s' at byte %zu", type,
                           Printable(key).c_str(), type_at);
    }
    if (key == kAlignmentKey) alignment_at = c.pos();
    GgufValue value;
    PI_RETURN_IF_ERROR(ReadValue(&c, static_cast<GgufType>(type), 0, key, &value));
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(value));
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = Find(kAlignmentKey)) {
    if (a->type != GgufType::kU32) {
      return Status::Error("bad alignment: %s at byte %zu has type %s, must be u32", kAlignmentKey,
                           alignment_at, GgufTypeName(a->type));
    }
    if (!IsPowerOfTwo(a->u) || a->u < kGgufMinAlignment || a->u > kGgufMaxAlignment) {
      return Status::Error("bad alignment: %s = %" PRIu64
                           " at byte %zu is not a power of two from %u to %u",
                           kAlignmentKey, a->u, alignment_at, kGgufMinAlignment, kGgufMaxAlignment);
    }
    alignment_ = static_cast<uint32_t>(a->u);
  }

  // ---- tensor infos ----
  tensors_.clear();
  tensor_index_.clear();
  if (tensor_count > c.remaining() / kMinTensorInfoBytes) {
    return Status::Error("tensor count %" PRIu64
                         " at byte 8 exceeds what the %zu bytes left after the metadata can hold",
                         tensor_count, c.remaining());
  }
  tensors_.reserve(static_cast<size_t>(tensor_count));
  std::vector<size_t> offset_at;  // byte offset of each tensor's offset field
  offset_at.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t t = 0; t < tensor_count; ++t) {
    TensorInfo info;
    offset_at.emplace_back();
    PI_RETURN_IF_ERROR(ReadTensorInfo(&c, t, alignment_, tensor_index_, &info, &offset_at.back()));
    tensor_index_[info.name] = tensors_.size();
    tensors_.push_back(std::move(info));
  }

  return PlaceTensorData(base_, size_, c.pos(), alignment_, offset_at, &tensors_);
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::GetU32(const std::string& key, uint32_t* out) const {
  uint64_t v = 0;
  PI_RETURN_IF_ERROR(GetUnsigned(*this, key, std::numeric_limits<uint32_t>::max(), &v));
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status GgufFile::GetU64(const std::string& key, uint64_t* out) const {
  return GetUnsigned(*this, key, std::numeric_limits<uint64_t>::max(), out);
}

Status GgufFile::GetF32(const std::string& key, float* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata key '%s' not found", key.c_str());
  if (!v->is_float()) {
    return Status::Error("metadata key '%s' has type %s, expected f32 or f64", key.c_str(),
                         GgufTypeName(v->type));
  }
  *out = static_cast<float>(v->f);
  return Status::Ok();
}

Status GgufFile::GetBool(const std::string& key, bool* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata key '%s' not found", key.c_str());
  if (v->type != GgufType::kBool) {
    return Status::Error("metadata key '%s' has type %s, expected bool", key.c_str(),
                         GgufTypeName(v->type));
  }
  *out = v->u != 0;
  return Status::Ok();
}

Status GgufFile::GetString(const std::string& key, std::string* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata key '%s' not found", key.c_str());
  if (v->type != GgufType::kString) {
    return Status::Error("metadata key '%s' has type %s, expected string", key.c_str(),
                         GgufTypeName(v->type));
  }
  *out = v->str;
  return Status::Ok();
}

Status GgufFile::GetU32Opt(const std::string& key, uint32_t* out) const {
  return Find(key) == nullptr ? Status::Ok() : GetU32(key, out);
}

Status GgufFile::GetF32Opt(const std::string& key, float* out) const {
  return Find(key) == nullptr ? Status::Ok() : GetF32(key, out);
}

Status GgufFile::GetBoolOpt(const std::string& key, bool* out) const {
  return Find(key) == nullptr ? Status::Ok() : GetBool(key, out);
}

Status GgufFile::GetStringOpt(const std::string& key, std::string* out) const {
  return Find(key) == nullptr ? Status::Ok() : GetString(key, out);
}

}  // namespace pi

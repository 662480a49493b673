// GgufWriter: serializes metadata and tensors as a GGUF v3 file (layout in
// ggml's docs/gguf.md): header, metadata, tensor infos, zero
// padding to the alignment, then each tensor's data padded to the alignment.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/base/atomic_file.h"
#include "common/base/memory_limits.h"
#include "common/format/gguf.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the GGUF writer assumes a little-endian host");

namespace pi {
namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
constexpr size_t kMaxTensorName = 63;
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufType::kF64);

bool IsPowerOfTwo(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

uint64_t AlignUp(uint64_t v, uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

void Put(std::vector<uint8_t>* buf, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  buf->insert(buf->end(), b, b + n);
}
template <typename T>
void PutScalar(std::vector<uint8_t>* buf, T v) {
  Put(buf, &v, sizeof(v));
}
void PutString(std::vector<uint8_t>* buf, const std::string& s) {
  PutScalar<uint64_t>(buf, s.size());
  Put(buf, s.data(), s.size());
}

// The value's payload (without its type id, which the caller writes).
void PutValue(std::vector<uint8_t>* buf, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8:
      PutScalar<uint8_t>(buf, static_cast<uint8_t>(v.u));
      break;
    case GgufType::kI8:
      PutScalar<int8_t>(buf, static_cast<int8_t>(v.i));
      break;
    case GgufType::kU16:
      PutScalar<uint16_t>(buf, static_cast<uint16_t>(v.u));
      break;
    case GgufType::kI16:
      PutScalar<int16_t>(buf, static_cast<int16_t>(v.i));
      break;
    case GgufType::kU32:
      PutScalar<uint32_t>(buf, static_cast<uint32_t>(v.u));
      break;
    case GgufType::kI32:
      PutScalar<int32_t>(buf, static_cast<int32_t>(v.i));
      break;
    case GgufType::kU64:
      PutScalar<uint64_t>(buf, v.u);
      break;
    case GgufType::kI64:
      PutScalar<int64_t>(buf, v.i);
      break;
    case GgufType::kF32:
      PutScalar<float>(buf, static_cast<float>(v.f));
      break;
    case GgufType::kF64:
      PutScalar<double>(buf, v.f);
      break;
    case GgufType::kBool:
      PutScalar<uint8_t>(buf, v.u != 0 ? 1 : 0);
      break;
    case GgufType::kString:
      PutString(buf, v.str);
      break;
    case GgufType::kArray:
      PutScalar<uint32_t>(buf, static_cast<uint32_t>(v.array_type));
      PutScalar<uint64_t>(buf, v.array.size());
      for (const GgufValue& e : v.array) PutValue(buf, e);
      break;
  }
}

Status CheckValue(const std::string& key, const GgufValue& v) {
  if (static_cast<uint32_t>(v.type) > kMaxValueType) {
    return Status::Error("key '%s': invalid value type %u", key.c_str(),
                         static_cast<uint32_t>(v.type));
  }
  if (v.type != GgufType::kArray) return Status::Ok();
  if (static_cast<uint32_t>(v.array_type) > kMaxValueType) {
    return Status::Error("key '%s': invalid array element type %u", key.c_str(),
                         static_cast<uint32_t>(v.array_type));
  }
  for (size_t k = 0; k < v.array.size(); ++k) {
    if (v.array[k].type != v.array_type) {
      return Status::Error("key '%s': array element %zu has type %s, the array holds %s",
                           key.c_str(), k, GgufTypeName(v.array[k].type),
                           GgufTypeName(v.array_type));
    }
    PI_RETURN_IF_ERROR(CheckValue(key, v.array[k]));
  }
  return Status::Ok();
}

}  // namespace

Status GgufWriter::SetAlignment(uint32_t alignment) {
  if (!IsPowerOfTwo(alignment) || alignment < kGgufMinAlignment || alignment > kGgufMaxAlignment) {
    return Status::Error("alignment %u is not a power of two from %u to %u", alignment,
                         kGgufMinAlignment, kGgufMaxAlignment);
  }
  alignment_ = alignment;
  if (alignment == kDefaultAlignment) {
    auto it = kv_index_.find(kAlignmentKey);
    if (it != kv_index_.end()) {
      kv_.erase(kv_.begin() + static_cast<ptrdiff_t>(it->second));
      kv_index_.clear();  // positions moved
      for (size_t k = 0; k < kv_.size(); ++k) kv_index_[kv_[k].first] = k;
    }
  } else {
    Set(kAlignmentKey, GgufValue::U32(alignment));
  }
  return Status::Ok();
}

void GgufWriter::Set(const std::string& key, GgufValue value) {
  if (key == kAlignmentKey && value.type == GgufType::kU32 && IsPowerOfTwo(value.u) &&
      value.u >= kGgufMinAlignment && value.u <= kGgufMaxAlignment) {
    alignment_ = static_cast<uint32_t>(value.u);
  }
  // Indexed: a file of 100,000 keys took pi-quantize 14 s with a linear scan
  // per key.
  auto it = kv_index_.find(key);
  if (it != kv_index_.end()) {
    kv_[it->second].second = std::move(value);
    return;
  }
  kv_index_.emplace(key, kv_.size());
  kv_.emplace_back(key, std::move(value));
}

Status GgufWriter::CheckTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                               uint64_t* nbytes) const {
  if (name.size() > kMaxTensorName) {
    return Status::Error("tensor name '%s' is %zu bytes long; the limit is %zu", name.c_str(),
                         name.size(), kMaxTensorName);
  }
  if (tensor_names_.count(name)) return Status::Error("duplicate tensor name '%s'", name.c_str());
  const DTypeInfo dt = GetDTypeInfo(static_cast<uint32_t>(type));
  if (dt.block_elems == 0) {
    return Status::Error("tensor '%s': unknown tensor type id %u", name.c_str(),
                         static_cast<uint32_t>(type));
  }
  if (ne.size() > 4) {
    return Status::Error("tensor '%s': %zu dimensions, at most 4", name.c_str(), ne.size());
  }
  // No dimensions is a scalar (one element), as in ggml.
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  int64_t n_elements = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) {
      return Status::Error("tensor '%s': dimension %zu = %" PRId64 " is negative", name.c_str(), d,
                           ne[d]);
    }
    if (ne[d] != 0 && n_elements > std::numeric_limits<int64_t>::max() / ne[d]) {
      return Status::Error("tensor '%s': element count overflows int64", name.c_str());
    }
    n_elements *= ne[d];
  }
  if (ne0 % dt.block_elems != 0) {
    return Status::Error("tensor '%s': ne[0] = %" PRId64
                         " is not a multiple of the %s block size %d",
                         name.c_str(), ne0, dt.name, dt.block_elems);
  }
  uint64_t row_bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ne0 / dt.block_elems),
                             static_cast<uint64_t>(dt.block_bytes), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, static_cast<uint64_t>(ne0 == 0 ? 0 : n_elements / ne0),
                             nbytes) ||
      row_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      *nbytes > std::numeric_limits<size_t>::max() / 2) {
    return Status::Error("tensor '%s': byte size overflows", name.c_str());
  }
  return Status::Ok();
}

Status GgufWriter::AddTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                             const void* data) {
  PendingTensor t;
  PI_RETURN_IF_ERROR(CheckTensor(name, type, ne, &t.nbytes));
  if (data == nullptr && t.nbytes > 0) return Status::Error("tensor '%s': no data", name.c_str());
  t.name = name;
  t.type = type;
  t.ne = ne;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (t.nbytes > 0) t.data.assign(p, p + t.nbytes);
  tensor_names_.insert(name);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Status GgufWriter::AddTensorFill(const std::string& name, DType type,
                                 const std::vector<int64_t>& ne, FillFn fill) {
  PendingTensor t;
  PI_RETURN_IF_ERROR(CheckTensor(name, type, ne, &t.nbytes));
  if (!fill) return Status::Error("tensor '%s': no fill function", name.c_str());
  t.name = name;
  t.type = type;
  t.ne = ne;
  t.fill = std::move(fill);
  tensor_names_.insert(name);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Status GgufWriter::Validate() const {
  for (const auto& kv : kv_) {
    PI_RETURN_IF_ERROR(CheckValue(kv.first, kv.second));
    if (kv.first == kAlignmentKey &&
        (kv.second.type != GgufType::kU32 || kv.second.u != alignment_)) {
      return Status::Error("%s must be a u32 power of two from %u to %u (got %s %" PRIu64 ")",
                           kAlignmentKey, kGgufMinAlignment, kGgufMaxAlignment,
                           GgufTypeName(kv.second.type), kv.second.u);
    }
  }
  return Status::Ok();
}

Status GgufWriter::WriteTo(const AppendFn& append) const {
  PI_RETURN_IF_ERROR(Validate());
  std::vector<uint8_t> head;
  Put(&head, sparse_magic_ ? "PWRI" : "GGUF", 4);
  PutScalar<uint32_t>(&head, kGgufVersion);
  PutScalar<uint64_t>(&head, tensors_.size());
  PutScalar<uint64_t>(&head, kv_.size());
  for (const auto& kv : kv_) {
    PutString(&head, kv.first);
    PutScalar<uint32_t>(&head, static_cast<uint32_t>(kv.second.type));
    PutValue(&head, kv.second);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    PutString(&head, t.name);
    PutScalar<uint32_t>(&head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) PutScalar<uint64_t>(&head, static_cast<uint64_t>(n));
    PutScalar<uint32_t>(&head, static_cast<uint32_t>(t.type));
    PutScalar<uint64_t>(&head, offset);
    offset += AlignUp(t.nbytes, alignment_);
  }
  head.resize(AlignUp(head.size(), alignment_), 0);
  PI_RETURN_IF_ERROR(append(head.data(), head.size()));

  // Padding comes from one small block of zeros, never a buffer as large as
  // the alignment.
  static const uint8_t kZeros[4096] = {};
  auto pad = [&append](uint64_t n) -> Status {
    for (; n > 0; n -= std::min<uint64_t>(n, sizeof(kZeros))) {
      PI_RETURN_IF_ERROR(
          append(kZeros, static_cast<size_t>(std::min<uint64_t>(n, sizeof(kZeros)))));
    }
    return Status::Ok();
  };
  std::vector<uint8_t> scratch;  // one filled tensor at a time
  for (const PendingTensor& t : tensors_) {
    const uint8_t* bytes = t.data.data();
    if (t.fill) {
      if (scratch.size() < t.nbytes) {
        PI_RETURN_IF_ERROR(CheckMemory("filling tensor '" + t.name + "'", t.nbytes));
        scratch.resize(t.nbytes);
      }
      PI_RETURN_IF_ERROR(t.fill(scratch.data()).WithContext("tensor '" + t.name + "'"));
      bytes = scratch.data();
    }
    PI_RETURN_IF_ERROR(append(bytes, t.nbytes));
    PI_RETURN_IF_ERROR(pad(AlignUp(t.nbytes, alignment_) - t.nbytes));
  }
  return Status::Ok();
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  Status s = WriteTo([&out](const void* data, size_t n) {
    Put(&out, data, n);
    return Status::Ok();
  });
  if (!s.ok()) out.clear();
  return out;
}

Status GgufWriter::Write(const std::string& path) const {
  // Through AtomicFile: a failed or interrupted write never leaves a
  // truncated file that looks like a model, and writers never collide.
  return WriteFileAtomically(path, [this](AtomicFile* file) {
    uint64_t data_bytes = 0;
    for (const PendingTensor& t : tensors_) {
      if (__builtin_add_overflow(data_bytes, AlignUp(t.nbytes, alignment_), &data_bytes)) {
        data_bytes = UINT64_MAX;  // Reserve reports it as too large
        break;
      }
    }
    PI_RETURN_IF_ERROR(file->Reserve(static_cast<int64_t>(data_bytes)));
    return WriteTo([file](const void* data, size_t n) { return file->Write(data, n); });
  });
}

}  // namespace pi

// GgufValue constructors and the small type helpers shared by the reader and
// the writer.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/format/gguf.h"

namespace pi {

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "invalid";
}

GgufValue GgufValue::U8(uint8_t v) {
  GgufValue r;
  r.type = GgufType::kU8;
  r.u = v;
  return r;
}

GgufValue GgufValue::I8(int8_t v) {
  GgufValue r;
  r.type = GgufType::kI8;
  r.i = v;
  return r;
}

GgufValue GgufValue::U16(uint16_t v) {
  GgufValue r;
  r.type = GgufType::kU16;
  r.u = v;
  return r;
}

GgufValue GgufValue::I16(int16_t v) {
  GgufValue r;
  r.type = GgufType::kI16;
  r.i = v;
  return r;
}

GgufValue GgufValue::I64(int64_t v) {
  GgufValue r;
  r.type = GgufType::kI64;
  r.i = v;
  return r;
}

GgufValue GgufValue::F64(double v) {
  GgufValue r;
  r.type = GgufType::kF64;
  r.f = v;
  return r;
}

GgufValue GgufValue::U32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::kU32;
  r.u = v;
  return r;
}

GgufValue GgufValue::I32(int32_t v) {
  GgufValue r;
  r.type = GgufType::kI32;
  r.i = v;
  return r;
}

GgufValue GgufValue::U64(uint64_t v) {
  GgufValue r;
  r.type = GgufType::kU64;
  r.u = v;
  return r;
}

GgufValue GgufValue::F32(float v) {
  GgufValue r;
  r.type = GgufType::kF32;
  r.f = v;
  return r;
}

GgufValue GgufValue::Bool(bool v) {
  GgufValue r;
  r.type = GgufType::kBool;
  r.u = v ? 1 : 0;
  return r;
}

GgufValue GgufValue::String(std::string v) {
  GgufValue r;
  r.type = GgufType::kString;
  r.str = std::move(v);
  return r;
}

GgufValue GgufValue::Array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = elem_type;
  r.array = std::move(elems);
  return r;
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(String(s));
  return Array(GgufType::kString, std::move(elems));
}

GgufValue GgufValue::F32Array(const std::vector<float>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(F32(x));
  return Array(GgufType::kF32, std::move(elems));
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(I32(x));
  return Array(GgufType::kI32, std::move(elems));
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type == GgufType::kF32 || type == GgufType::kF64;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(ne[d]);
  }
  s += "]";
  return s;
}

}  // namespace pi

#include "common/offline/safetensors.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace pi {
namespace {

using json = nlohmann::json;

// The safetensors format's own bound on its header.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

// Bytes per element of the dtypes the format defines; 0: unknown.
int ElementBytes(const std::string& dtype) {
  static const std::map<std::string, int> kBytes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"U64", 8}, {"I32", 4}, {"U32", 4},  {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

// One header entry; *begin: its data's offset (checked with its size).
Status ParseEntry(const std::string& name, const json& v, uint64_t data_bytes, SafeTensor* t,
                  uint64_t* begin_out) {
  if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
      !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2) {
    return Status::Error(
        "tensor '%s': expected {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}",
        name.c_str());
  }
  t->name = name;
  t->dtype = v["dtype"].get<std::string>();
  const int elem = ElementBytes(t->dtype);
  if (elem == 0)
    return Status::Error("tensor '%s': unknown dtype '%s'", name.c_str(), t->dtype.c_str());
  t->is_float = t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16";
  t->type = t->dtype == "F16" ? DType::kF16 : t->dtype == "BF16" ? DType::kBF16 : DType::kF32;
  if (v["shape"].size() > 8)
    return Status::Error("tensor '%s': %zu dimensions", name.c_str(), v["shape"].size());
  uint64_t count = 1;
  for (const json& d : v["shape"]) {
    if (!d.is_number_unsigned()) {
      return Status::Error("tensor '%s': a dimension is not a non-negative integer", name.c_str());
    }
    const uint64_t n = d.get<uint64_t>();
    if (n > (uint64_t{1} << 40) || (n != 0 && count > (uint64_t{1} << 62) / n)) {
      return Status::Error("tensor '%s': its shape overflows", name.c_str());
    }
    count *= n;
    t->shape.push_back(static_cast<int64_t>(n));
  }
  const json& r = v["data_offsets"];
  if (!r[0].is_number_unsigned() || !r[1].is_number_unsigned()) {
    return Status::Error("tensor '%s': data_offsets are not non-negative integers", name.c_str());
  }
  const uint64_t begin = r[0].get<uint64_t>(), end = r[1].get<uint64_t>();
  if (begin > end || end > data_bytes) {
    return Status::Error("tensor '%s': bytes [%" PRIu64 ", %" PRIu64 ") are outside the %" PRIu64
                         " bytes of data (a truncated file?)",
                         name.c_str(), begin, end, data_bytes);
  }
  if (end - begin != count * static_cast<uint64_t>(elem)) {
    return Status::Error("tensor '%s': %" PRIu64 " bytes for %" PRIu64 " %s elements", name.c_str(),
                         end - begin, count, t->dtype.c_str());
  }
  t->nbytes = end - begin;
  *begin_out = begin;
  return Status::Ok();
}

}  // namespace

int64_t SafeTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status ParseSafetensors(const uint8_t* data, size_t size, std::vector<SafeTensor>* out) {
  out->clear();
  if (size < 8) return Status::Error("%zu bytes: shorter than the 8-byte header length", size);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | data[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - 8) {
    return Status::Error("a header of %" PRIu64
                         " bytes in a file of %zu (truncated, or not safetensors)",
                         header_bytes, size);
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  const json header = json::parse(text, text + header_bytes, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::Error("the header is not a JSON object");
  }
  const uint8_t* base = data + 8 + header_bytes;
  const uint64_t data_bytes = size - 8 - header_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Status::Error("__metadata__ is not an object");
      continue;
    }
    SafeTensor t;
    uint64_t begin = 0;
    PI_RETURN_IF_ERROR(ParseEntry(it.key(), it.value(), data_bytes, &t, &begin));
    if (t.nbytes > 0) ranges.emplace_back(begin, begin + t.nbytes);
    t.data = base + begin;
    out->push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Status::Error("two tensors share bytes from offset %" PRIu64, ranges[i].first);
    }
  }
  return Status::Ok();
}

Status SafetensorsSet::AddFile(const std::string& path) {
  std::unique_ptr<MappedRegion> region;
  PI_RETURN_IF_ERROR(MappedRegion::Map(path, &region));
  std::vector<SafeTensor> tensors;
  PI_RETURN_IF_ERROR(ParseSafetensors(region->data(), region->size(), &tensors).WithContext(path));
  for (SafeTensor& t : tensors) {
    if (index_.count(t.name)) {
      return Status::Error("%s: tensor '%s' is in another file too", path.c_str(), t.name.c_str());
    }
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
    file_of_.push_back(path.substr(path.find_last_of('/') + 1));
  }
  files_.push_back(std::move(region));
  return Status::Ok();
}

Status SafetensorsSet::Open(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream index_file(index_path);
  if (!index_file) {
    std::ifstream probe(single);
    if (!probe) {
      return Status::Error(
          "%s: no model.safetensors or model.safetensors.index.json (a "
          "PyTorch .bin checkpoint? save it with safetensors first)",
          dir.c_str());
    }
    return AddFile(single);
  }
  std::stringstream text;
  text << index_file.rdbuf();
  const json index = json::parse(text.str(), nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return Status::Error("%s: expected {\"weight_map\": {tensor: file}}", index_path.c_str());
  }
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      return Status::Error("%s: the file of '%s' is not a string", index_path.c_str(),
                           name.c_str());
    }
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return Status::Error("%s: shard name '%s' is not a file in the folder", index_path.c_str(),
                           f.c_str());
    }
    shards.insert(f);
  }
  for (const std::string& f : shards) PI_RETURN_IF_ERROR(AddFile(dir + "/" + f));
  for (const auto& [name, file] : index["weight_map"].items()) {
    const auto it = index_.find(name);
    if (it == index_.end() || file_of_[it->second] != file.get<std::string>()) {
      return Status::Error("%s names '%s' in %s, which does not hold it", index_path.c_str(),
                           name.c_str(), file.get<std::string>().c_str());
    }
  }
  return Status::Ok();
}

const SafeTensor* SafetensorsSet::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pi

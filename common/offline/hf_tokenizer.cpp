#include "common/offline/hf_tokenizer.h"

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/base/mapped_files.h"

namespace pi {
namespace {

using json = nlohmann::json;

// ---- the protobuf wire format (just what a ModelProto uses) ---------------

struct Field {
  uint32_t number = 0;
  int wire = 0;
  uint64_t varint = 0;
  const uint8_t* bytes = nullptr;  // length-delimited and fixed32
  size_t size = 0;
};

class Wire {
 public:
  Wire(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool done() const { return at_ >= n_; }
  Status Next(Field* f) {
    uint64_t key = 0;
    PI_RETURN_IF_ERROR(Varint(&key));
    f->number = static_cast<uint32_t>(key >> 3);
    f->wire = static_cast<int>(key & 7);
    switch (f->wire) {
      case 0:
        return Varint(&f->varint);
      case 1:
        return Bytes(8, f);
      case 2: {
        uint64_t len = 0;
        PI_RETURN_IF_ERROR(Varint(&len));
        return Bytes(len, f);
      }
      case 5:
        return Bytes(4, f);
      default:
        return Status::Error("field %u: wire type %d at byte %zu", f->number, f->wire, at_);
    }
  }

 private:
  Status Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= n_) return Status::Error("a varint runs past the end");
      const uint8_t b = p_[at_++];
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return Status::Ok();
    }
    return Status::Error("a varint longer than 10 bytes at byte %zu", at_);
  }
  Status Bytes(uint64_t len, Field* f) {
    if (len > n_ - at_) return Status::Error("field %u runs past the end", f->number);
    f->bytes = p_ + at_;
    f->size = static_cast<size_t>(len);
    at_ += static_cast<size_t>(len);
    return Status::Ok();
  }
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

Status ParsePiece(const Field& f, SpmPiece* out) {
  Wire w(f.bytes, f.size);
  while (!w.done()) {
    Field g;
    PI_RETURN_IF_ERROR(w.Next(&g));
    if (g.number == 1 && g.wire == 2) {
      out->piece.assign(reinterpret_cast<const char*>(g.bytes), g.size);
    } else if (g.number == 2 && g.wire == 5) {
      memcpy(&out->score, g.bytes, 4);
    } else if (g.number == 3 && g.wire == 0) {
      if (g.varint < 1 || g.varint > 6)
        return Status::Error("a piece of type %llu", static_cast<unsigned long long>(g.varint));
      out->type = static_cast<int>(g.varint);
    }
  }
  return Status::Ok();
}

bool Exists(const std::string& path) {
  return std::ifstream(path).good();
}

// The special ids: config.json's (generation_config.json's first), else the
// control pieces named <s> / </s>.
void SetSpecialIds(const HfConfig& c, const std::vector<std::string>& tokens,
                   const std::vector<int32_t>& types, GgufWriter* w) {
  auto find = [&](const char* text) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text && types[i] == 3) return static_cast<int>(i);
    }
    return -1;
  };
  const int bos = c.bos_token_id >= 0 ? c.bos_token_id : find("<s>");
  const int eos = c.eos_token_id >= 0 ? c.eos_token_id : find("</s>");
  if (bos >= 0 && bos < static_cast<int>(tokens.size())) {
    w->Set("tokenizer.ggml.bos_token_id", GgufValue::U32(static_cast<uint32_t>(bos)));
  }
  if (eos >= 0 && eos < static_cast<int>(tokens.size())) {
    w->Set("tokenizer.ggml.eos_token_id", GgufValue::U32(static_cast<uint32_t>(eos)));
  }
  if (c.eot_token_id >= 0 && c.eot_token_id < static_cast<int>(tokens.size())) {
    w->Set("tokenizer.ggml.eot_token_id", GgufValue::U32(static_cast<uint32_t>(c.eot_token_id)));
  }
}

Status AddSpm(const std::string& path, const HfConfig& c, GgufWriter* w) {
  std::unique_ptr<MappedRegion> region;
  PI_RETURN_IF_ERROR(MappedRegion::Map(path, &region));
  SpmModel m;
  PI_RETURN_IF_ERROR(ParseSpmModel(region->data(), region->size(), &m).WithContext(path));
  if (m.pieces.size() > static_cast<size_t>(c.vocab_size)) {
    return Status::Error("%s: %zu pieces, the model's vocab_size is %d", path.c_str(),
                         m.pieces.size(), c.vocab_size);
  }
  if (m.normalizer != "identity" && !m.normalizer.empty()) {
    fprintf(stderr, "pi-convert: note: %s normalizes text ('%s'); the tokenizer applies no rule\n",
            path.c_str(), m.normalizer.c_str());
  }
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int unk = -1;
  for (const SpmPiece& p : m.pieces) {
    if (p.type == 2 && unk < 0) unk = static_cast<int>(tokens.size());
    tokens.push_back(p.piece);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  // Embedding rows beyond the pieces (padded vocabularies) get unused tokens.
  for (int i = static_cast<int>(tokens.size()); i < c.vocab_size; ++i) {
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    scores.push_back(-1e9f);
    types.push_back(5);
  }
  w->Set("tokenizer.ggml.model", GgufValue::String("llama"));
  w->Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w->Set("tokenizer.ggml.scores", GgufValue::F32Array(scores));
  w->Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  if (unk >= 0)
    w->Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(static_cast<uint32_t>(unk)));
  SetSpecialIds(c, tokens, types, w);
  w->Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  w->Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(false));
  w->Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(m.add_dummy_prefix));
  w->Set("tokenizer.ggml.remove_extra_whitespaces", GgufValue::Bool(m.remove_extra_whitespaces));
  return Status::Ok();
}

// One merge: "a b" (older files) or ["a", "b"].
Status MergeText(const json& m, std::string* out) {
  if (m.is_string()) {
    *out = m.get<std::string>();
  } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *out = m[0].get<std::string>() + " " + m[1].get<std::string>();
  } else {
    return Status::Error("a merge is neither \"a b\" nor [\"a\", \"b\"]");
  }
  return Status::Ok();
}

}  // namespace

Status AddBpeTokenizer(const std::string& text, const std::string& config_text, const HfConfig& c,
                       GgufWriter* w) {
  const std::string path = "tokenizer.json";
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return Status::Error("%s: not a tokenizers JSON file (no \"model\")", path.c_str());
  }
  const json& model = j["model"];
  if (!model.contains("type") || model["type"] != "BPE") {
    return Status::Error("%s: a %s model; only BPE converts (or give tokenizer.model)",
                         path.c_str(),
                         model.contains("type") ? model["type"].dump().c_str() : "typeless");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return Status::Error("%s: the BPE model has no vocab object or merges list", path.c_str());
  }
  const int n = c.vocab_size;
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, 0);
  auto place = [&](const std::string& token, const json& id, int type) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n) {
      return Status::Error("%s: token '%s' has id %s outside the model's vocab_size %d",
                           path.c_str(), token.c_str(), id.dump().c_str(), n);
    }
    tokens[id.get<int64_t>()] = token;
    types[id.get<int64_t>()] = type;
    return Status::Ok();
  };
  for (const auto& [token, id] : model["vocab"].items()) PI_RETURN_IF_ERROR(place(token, id, 1));
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
          !a["content"].is_string()) {
        return Status::Error("%s: an added token without id and content", path.c_str());
      }
      const bool special =
          a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
      PI_RETURN_IF_ERROR(place(a["content"].get<std::string>(), a["id"], special ? 3 : 4));
    }
  }
  for (int i = 0; i < n; ++i) {
    if (types[i] == 0) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = 5;
    }
  }
  std::vector<std::string> merges;
  for (const json& m : model["merges"]) {
    std::string s;
    PI_RETURN_IF_ERROR(MergeText(m, &s).WithContext(path));
    merges.push_back(std::move(s));
  }
  // llama 3's split regex starts with its contractions, case-insensitive, and
  // takes digits three at a time; Qwen2's is the same with single digits.
  const std::string pre_text = j.contains("pre_tokenizer") ? j["pre_tokenizer"].dump() : "";
  std::string pre;
  const auto has = [&pre_text](const char* s) { return pre_text.find(s) != std::string::npos; };
  if (has("(?i:'s|'t|'re|'ve|'m|'ll|'d)")) {
    if (has("p{N}{1,3}")) {
      pre = "llama-bpe";
    } else if (has("p{L}+|\\\\p{N}| ?")) {
      pre = "qwen2";
    } else {
      return Status::Unsupported(
          "%s: a split pre-tokenizer this tool does not know (llama 3's and Qwen2's are): %.200s",
          path.c_str(), pre_text.c_str());
    }
  } else if (has("\"Punctuation\"")) {
    // Falcon's sequence (punctuation runs, ByteLevel, digit runs, then three
    // digits at a time) is llama.cpp's "falcon"; other punctuation-first
    // sequences (Falcon 3's single digits) would be misread as it or as gpt2.
    if (!has("ByteLevel") || !has("\"individual_digits\":false") || !has("[0-9][0-9][0-9]")) {
      return Status::Error("%s: a pre-tokenizer this tool does not know (falcon's is): %.160s",
                           path.c_str(), pre_text.c_str());
    }
    pre = "falcon";
  } else if (has("ByteLevel")) {
    pre = "gpt2";
  } else {
    return Status::Error(
        "%s: a pre-tokenizer this tool does not know (gpt2's ByteLevel, llama 3's split and "
        "falcon's sequence are): %.120s",
        path.c_str(), pre_text.c_str());
  }
  w->Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w->Set("tokenizer.ggml.pre", GgufValue::String(pre));
  w->Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w->Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w->Set("tokenizer.ggml.merges", GgufValue::StringArray(merges));
  SetSpecialIds(c, tokens, types, w);
  // add_bos: tokenizer_config.json's flag when it has one; else whether the
  // post-processor's template names the bos token.
  bool add_bos = false;
  const json tc = json::parse(config_text, nullptr, false);
  if (tc.is_object() && tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean()) {
    add_bos = tc["add_bos_token"].get<bool>();
  } else if (c.bos_token_id >= 0 && c.bos_token_id < n && j.contains("post_processor")) {
    add_bos = j["post_processor"].dump().find(tokens[c.bos_token_id]) != std::string::npos;
  }
  w->Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos));
  return Status::Ok();
}

Status ParseSpmModel(const uint8_t* data, size_t size, SpmModel* out) {
  SpmModel m;
  Wire w(data, size);
  while (!w.done()) {
    Field f;
    PI_RETURN_IF_ERROR(w.Next(&f));
    if (f.number == 1 && f.wire == 2) {
      SpmPiece p;
      PI_RETURN_IF_ERROR(ParsePiece(f, &p).WithContext("piece " + std::to_string(m.pieces.size())));
      m.pieces.push_back(std::move(p));
    } else if (f.number == 3 && f.wire == 2) {
      Wire n(f.bytes, f.size);
      while (!n.done()) {
        Field g;
        PI_RETURN_IF_ERROR(n.Next(&g));
        if (g.number == 1 && g.wire == 2)
          m.normalizer.assign(reinterpret_cast<const char*>(g.bytes), g.size);
        if (g.number == 3 && g.wire == 0) m.add_dummy_prefix = g.varint != 0;
        if (g.number == 4 && g.wire == 0) m.remove_extra_whitespaces = g.varint != 0;
      }
    }
  }
  if (m.pieces.empty()) return Status::Error("no pieces (not a sentencepiece model?)");
  *out = std::move(m);
  return Status::Ok();
}

Status AddHfTokenizer(const std::string& dir, const HfConfig& config, GgufWriter* w) {
  if (Exists(dir + "/tokenizer.model")) return AddSpm(dir + "/tokenizer.model", config, w);
  if (Exists(dir + "/tokenizer.json")) {
    std::string text, config_text;
    PI_RETURN_IF_ERROR(ReadHfFile(dir + "/tokenizer.json", &text));
    if (Exists(dir + "/tokenizer_config.json")) {
      PI_RETURN_IF_ERROR(ReadHfFile(dir + "/tokenizer_config.json", &config_text));
    }
    return AddBpeTokenizer(text, config_text, config, w).WithContext(dir);
  }
  return Status::Error("%s: no tokenizer.model or tokenizer.json", dir.c_str());
}

}  // namespace pi

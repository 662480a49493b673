// pi-tokenize: run a GGUF's tokenizer from the command line.
//
//   pi-tokenize -m model.gguf "In the beginning"       one line per token: id, text, piece
//   pi-tokenize -m model.gguf --ids-jsonl in.jsonl     one JSON string per line in, one JSON
//                                                      array of ids per line out
//   pi-tokenize -m model.gguf --decode-jsonl in.jsonl  JSON arrays of ids in, JSON strings out
//   pi-tokenize -m model.gguf --stream-jsonl in.jsonl  as --decode-jsonl, but through
//                                                      TokenToPiece + Utf8Stream, as a server
//                                                      streams (no first-space removal)
//
// The JSON Lines modes let a test check hundreds of strings in one process. "-" reads
// stdin. Output strings are valid UTF-8: bytes that are not become U+FFFD.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/read_file.h"
#include "cli/tool_main.h"
#include "common/format/gguf.h"
#include "common/text/tokenizer.h"
#include "common/text/unicode.h"
#include "nlohmann/json.hpp"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-tokenize -m MODEL.gguf [options] [TEXT]\n"
          "  -m, --model FILE        GGUF holding tokenizer.ggml.* (a vocab-only file is fine)\n"
          "  TEXT                    encode TEXT; print id, vocabulary text and piece per token\n"
          "  --ids-jsonl FILE        encode one JSON string per line; print JSON id arrays\n"
          "  --decode-jsonl FILE     decode one JSON id array per line; print JSON strings\n"
          "  --stream-jsonl FILE     like --decode-jsonl, token by token through Utf8Stream\n"
          "  --bos / --no-bos        add bos (default: tokenizer.ggml.add_bos_token)\n"
          "  --parse-special         treat control tokens written in the text as tokens\n"
          "  --info                  print the vocabulary's summary\n");
}

// JSON string with the quotes; invalid UTF-8 becomes U+FFFD so the line stays JSON.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cp;
    size_t len;
    const pi::Utf8Status st = pi::DecodeUtf8(s.data(), s.size(), pos, &cp, &len);
    if (st != pi::Utf8Status::kValid) {
      out += "\\ufffd";
    } else if (cp == '"') {
      out += "\\\"";
    } else if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s, pos, len);
    }
    pos += len;
  }
  out += "\"";
  return out;
}

// One JSON value per line, parsed by nlohmann::json (no hand-written parser
// of outside input); errors name what was expected.
pi::Status ParseJsonLine(const std::string& line, nlohmann::json* out) {
  try {
    *out = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return pi::Status::Error("not JSON: %s", e.what());
  }
  return pi::Status::Ok();
}

// A line holding exactly one JSON string.
pi::Status ParseJsonString(const std::string& line, std::string* out) {
  nlohmann::json j;
  PI_RETURN_IF_ERROR(ParseJsonLine(line, &j));
  if (!j.is_string()) return pi::Status::Error("expected a JSON string, got %s", j.type_name());
  *out = j.get<std::string>();
  return pi::Status::Ok();
}

// A line holding exactly one JSON array of integers, each a token id in
// [0, n_vocab).
pi::Status ParseJsonIds(const std::string& line, int32_t n_vocab, std::vector<int32_t>* ids) {
  nlohmann::json j;
  PI_RETURN_IF_ERROR(ParseJsonLine(line, &j));
  if (!j.is_array()) return pi::Status::Error("expected a JSON array, got %s", j.type_name());
  ids->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& v = j[i];
    if (!v.is_number_integer()) {
      return pi::Status::Error("position %zu: expected an integer token id, got %s", i,
                               v.type_name());
    }
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      return pi::Status::Error("id %lld at position %zu is out of range [0, %d)",
                               static_cast<long long>(id), i, n_vocab);
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return pi::Status::Ok();
}

std::string JsonIds(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

enum class Mode { kText, kIdsJsonl, kDecodeJsonl, kStreamJsonl, kInfo };

int RunJsonl(const pi::Tokenizer& tok, Mode mode, const std::string& path, bool add_bos,
             bool parse_special) {
  // A file is read whole (refusing directories and FIFOs); "-" streams stdin.
  std::string contents;
  std::istringstream from_file;
  std::istream* in = &std::cin;
  if (path != "-") {
    const pi::Status read = pi::ReadWholeFile(path, &contents);
    if (!read.ok()) {
      fprintf(stderr, "pi-tokenize: %s\n", read.message().c_str());
      return 1;
    }
    from_file.str(std::move(contents));
    in = &from_file;
  }
  std::string line, text;
  std::vector<int32_t> ids;
  for (size_t line_no = 1; std::getline(*in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pi::Status s;
    std::string result;
    if (mode == Mode::kIdsJsonl) {
      s = ParseJsonString(line, &text);
      if (s.ok()) s = tok.Encode(text, add_bos, &ids, parse_special);
      if (s.ok()) result = JsonIds(ids);
    } else {
      s = ParseJsonIds(line, tok.n_vocab(), &ids);
      if (s.ok() && mode == Mode::kDecodeJsonl) {
        result = JsonString(tok.Decode(ids));
      } else if (s.ok()) {
        pi::Utf8Stream stream;
        std::string streamed;
        for (int32_t id : ids) streamed += stream.Push(tok.TokenToPiece(id));
        streamed += stream.Flush();
        result = JsonString(streamed);
      }
    }
    if (!s.ok()) {
      fprintf(stderr, "pi-tokenize: %s:%zu: %s\n", path.c_str(), line_no, s.message().c_str());
      return 1;
    }
    fputs(result.c_str(), stdout);
    fputc('\n', stdout);
  }
  return 0;
}

const char* TypeName(pi::TokenType t) {
  switch (t) {
    case pi::TokenType::kNormal:
      return "normal";
    case pi::TokenType::kUnknown:
      return "unknown";
    case pi::TokenType::kControl:
      return "control";
    case pi::TokenType::kUserDefined:
      return "user-defined";
    case pi::TokenType::kUnused:
      return "unused";
    case pi::TokenType::kByte:
      return "byte";
    default:
      return "undefined";
  }
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-tokenize", argc, argv);
  std::string model_path, jsonl_path, text;
  bool have_text = false, parse_special = false;
  int bos = -1;  // -1: the tokenizer's default
  Mode mode = Mode::kText;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& flag) {
        if (flag == "-m" || flag == "--model") {
          model_path = args.String(flag);
        } else if (flag == "--ids-jsonl") {
          mode = Mode::kIdsJsonl;
          jsonl_path = args.String(flag);
        } else if (flag == "--decode-jsonl") {
          mode = Mode::kDecodeJsonl;
          jsonl_path = args.String(flag);
        } else if (flag == "--stream-jsonl") {
          mode = Mode::kStreamJsonl;
          jsonl_path = args.String(flag);
        } else if (flag == "--bos") {
          bos = 1;
        } else if (flag == "--no-bos") {
          bos = 0;
        } else if (flag == "--parse-special") {
          parse_special = true;
        } else if (flag == "--info") {
          mode = Mode::kInfo;
        } else if (!flag.empty() && flag[0] == '-' && flag != "-") {
          return false;
        } else if (!have_text) {
          text = flag;
          have_text = true;
        } else {
          args.Fail("more than one TEXT argument");
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  if (model_path.empty() || (mode == Mode::kText && !have_text)) {
    fprintf(stderr, "pi-tokenize: %s (see --help)\n",
            model_path.empty() ? "-m MODEL is required" : "give a TEXT to encode or a mode flag");
    return 2;
  }

  std::unique_ptr<pi::GgufFile> file;
  pi::Status s = pi::GgufFile::Open(model_path, &file);
  std::unique_ptr<pi::Tokenizer> tok;
  if (s.ok()) s = pi::Tokenizer::FromGguf(*file, &tok);
  if (!s.ok()) {
    fprintf(stderr, "pi-tokenize: %s: %s\n", model_path.c_str(), s.message().c_str());
    return 1;
  }
  const bool add_bos = bos < 0 ? tok->add_bos_token() : bos == 1;

  switch (mode) {
    case Mode::kInfo: {
      const pi::TokenizerVocab& v = tok->vocab();
      printf(
          "model %s%s%s\nn_vocab %d\nmerges %zu\nbos %d\neos %d\nunk %d\n"
          "add_bos_token %d\nadd_space_prefix %d\nremove_extra_whitespaces %d\n",
          v.model.c_str(), tok->is_spm() ? "" : " pre ", tok->is_spm() ? "" : v.pre.c_str(),
          tok->n_vocab(), v.merges.size(), tok->bos(), tok->eos(), tok->unk(), v.add_bos,
          v.add_space_prefix, v.remove_extra_whitespaces);
      return 0;
    }
    case Mode::kText: {
      std::vector<int32_t> ids;
      s = tok->Encode(text, add_bos, &ids, parse_special);
      if (!s.ok()) {
        fprintf(stderr, "pi-tokenize: %s\n", s.message().c_str());
        return 1;
      }
      for (int32_t id : ids) {
        printf("%6d %-12s %s %s\n", id, TypeName(tok->token_type(id)),
               JsonString(tok->TokenText(id)).c_str(), JsonString(tok->TokenToPiece(id)).c_str());
      }
      printf("%zu tokens; decoded: %s\n", ids.size(), JsonString(tok->Decode(ids)).c_str());
      return 0;
    }
    default:
      return RunJsonl(*tok, mode, jsonl_path, add_bos, parse_special);
  }
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-tokenize", Run, argc, argv);
}

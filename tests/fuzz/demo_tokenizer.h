// The demo model's tokenizer, loaded once, for the fuzz targets of what
// clients send (request_fuzz, http_body_fuzz), with protobuf's logging
// silenced: it would log every string that is not UTF-8, and refusing those
// is the point. PI_DEMO_MODEL is the model's path (a compile definition).
#pragma once

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/format/gguf.h"
#include "common/text/tokenizer.h"

namespace pi {

// The largest context the fuzzed requests are checked against: small, so
// long prompts are refused often.
inline constexpr int kFuzzContext = 64;

inline const Tokenizer& FuzzDemoTokenizer() {
  static std::unique_ptr<GgufFile> file;  // kept: the tokenizer is read from it
  static std::unique_ptr<Tokenizer> tok = [] {
    google::protobuf::SetLogHandler(nullptr);
    std::unique_ptr<Tokenizer> t;
    Status s = GgufFile::Open(PI_DEMO_MODEL, &file);
    if (s.ok()) s = Tokenizer::FromGguf(*file, &t);
    if (!s.ok()) {
      fprintf(stderr, "fuzz: %s: %s\n", PI_DEMO_MODEL, s.message().c_str());
      abort();
    }
    return t;
  }();
  return *tok;
}

}  // namespace pi

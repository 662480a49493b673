// libFuzzer target for what pi-convert reads from a Hugging Face folder: the
// first byte picks the parser, the rest is the file —
//   0: a safetensors file (every tensor it accepts must lie inside the bytes),
//   1: config.json, 2: a sentencepiece tokenizer.model, 3: tokenizer.json.
// A parser may refuse anything; it must not crash, read out of bounds or
// accept what it should not.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/hf_config.h"
#include "common/offline/hf_tokenizer.h"
#include "common/offline/safetensors.h"

namespace {

void Check(bool cond, const char* what) {
  if (!cond) {
    fprintf(stderr, "hf_fuzz: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t kind = data[0];
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  // A copy of exactly the file's bytes: ASan sees any read past them.
  std::vector<uint8_t> file(body, body + n);
  const uint8_t* begin = file.data();
  switch (kind % 4) {
    case 0: {
      std::vector<pi::SafeTensor> tensors;
      if (!pi::ParseSafetensors(begin, file.size(), &tensors).ok()) break;
      for (const pi::SafeTensor& t : tensors) {
        Check(t.data >= begin && t.data + t.nbytes <= begin + file.size(),
              "a tensor outside the file");
        if (t.nbytes > 0) {
          volatile uint8_t last = t.data[t.nbytes - 1];
          (void)last;
        }
      }
      break;
    }
    case 1: {
      pi::HfConfig c;
      if (pi::ParseHfConfig(std::string(file.begin(), file.end()), &c).ok()) {
        Check(c.hidden_size > 0 && c.num_attention_heads > 0 && c.num_key_value_heads > 0 &&
                  c.num_attention_heads % c.num_key_value_heads == 0,
              "an accepted config with bad heads");
      }
      break;
    }
    case 2: {
      pi::SpmModel m;
      if (pi::ParseSpmModel(begin, file.size(), &m).ok()) {
        Check(!m.pieces.empty(), "an accepted model without pieces");
        for (const pi::SpmPiece& p : m.pieces)
          Check(p.type >= 1 && p.type <= 6, "a bad piece type");
      }
      break;
    }
    case 3: {
      pi::HfConfig c;
      c.vocab_size = 512;
      c.bos_token_id = 1;
      pi::GgufWriter w;
      pi::AddBpeTokenizer(std::string(file.begin(), file.end()), "", c, &w);
      break;
    }
  }
  return 0;
}

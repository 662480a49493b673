// The grammar engine's cost per generated token (docs/grammars.md): a
// token's mask and step, along texts drawn through a JSON schema's grammar,
// on the demo model's vocabulary and on one grown to 128 Ki pieces, beside
// the sampler's own cost with and without a mask.
//
//   ./build/bin/bench-grammar [MODEL.gguf]
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/text/grammar.h"
#include "common/text/grammar_matcher.h"
#include "common/text/json_schema_grammar.h"
#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "common/text/vocab_trie.h"

namespace {

std::string g_model = PI_SOURCE_DIR "/models/demo-kjv-f16.gguf";

const pi::Tokenizer& Tok() {
  static std::unique_ptr<pi::Tokenizer> tok = [] {
    std::unique_ptr<pi::GgufFile> file;
    std::unique_ptr<pi::Tokenizer> t;
    pi::Status st = pi::GgufFile::Open(g_model, &file);
    if (st.ok()) st = pi::Tokenizer::FromGguf(*file, &t);
    if (!st.ok()) {
      fprintf(stderr, "bench-grammar: %s\n", st.message().c_str());
      exit(1);
    }
    return t;
  }();
  return *tok;
}

std::shared_ptr<const pi::Grammar> SchemaGrammar(const char* schema) {
  std::string gbnf;
  std::shared_ptr<const pi::Grammar> g;
  pi::Status st = pi::JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema), &gbnf);
  if (st.ok()) st = pi::Grammar::Parse(gbnf, &g);
  if (!st.ok()) {
    fprintf(stderr, "bench-grammar: %s\n", st.message().c_str());
    exit(1);
  }
  return g;
}

struct Vocab {
  std::vector<std::string> pieces;
  std::unique_ptr<pi::VocabTrie> trie;
};

// The demo model's 4096 pieces, and the same grown to 128 Ki with made-up
// ones shaped as a large BPE vocabulary's (words, most with a leading
// space, digits, punctuation runs, some multi-byte characters).
const Vocab& DemoVocab() {
  static Vocab v = [] {
    Vocab d;
    for (int32_t i = 0; i < Tok().n_vocab(); ++i) d.pieces.push_back(Tok().TokenToPiece(i));
    d.trie = std::make_unique<pi::VocabTrie>(d.pieces);
    return d;
  }();
  return v;
}

const Vocab& LargeVocab() {
  static Vocab v = [] {
    Vocab d;
    d.pieces = DemoVocab().pieces;
    std::mt19937 rng(5);
    const char* const kPunct[] = {"{\"", "\":", "\",", "\n", "  ",  "\")", ".",  ",",
                                  "();", "//",  "==",  "->", "\\n", "\"}", "]}", "\t"};
    const char* const kWide[] = {"é", "ü", "ß", "中", "文", "ж", "я", "€", "😀", "→"};
    while (d.pieces.size() < (1u << 17)) {
      std::string p;
      const unsigned r = rng() % 100;
      if (r < 70) {
        if (rng() % 3 != 0) p += ' ';
        const int len = 1 + static_cast<int>(rng() % 9);
        for (int i = 0; i < len; ++i) p += static_cast<char>('a' + rng() % 26);
        if (rng() % 10 == 0) p[p[0] == ' ' ? 1 : 0] -= 32;
      } else if (r < 80) {
        const int len = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < len; ++i) p += static_cast<char>('0' + rng() % 10);
      } else if (r < 93) {
        p = kPunct[rng() % 16];
        if (rng() % 2) p += kPunct[rng() % 16];
      } else {
        p = kWide[rng() % 10];
        if (rng() % 2) p += kWide[rng() % 10];
      }
      d.pieces.push_back(p);
    }
    d.trie = std::make_unique<pi::VocabTrie>(d.pieces);
    return d;
  }();
  return v;
}

const char kPersonSchema[] =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},)"
    R"("age":{"type":"integer","minimum":0,"maximum":150},)"
    R"("tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":4},)"
    R"("address":{"type":"object","properties":{"street":{"type":"string"},)"
    R"("zip":{"type":"string","maxLength":10}},"required":["street"]}},)"
    R"("required":["name","age"]})";

// Per token: the mask, a uniform draw among the allowed tokens, the step.
// Texts restart when whole; the first text warms nothing up: every
// iteration is a token of some text, new states and cached ones alike.
void RunWalk(benchmark::State& state, const Vocab& v, const char* schema) {
  auto g = SchemaGrammar(schema);
  const int32_t n = static_cast<int32_t>(v.pieces.size());
  std::vector<uint64_t> mask((n + 63) / 64);
  std::mt19937 rng(1);
  auto m = std::make_unique<pi::GrammarMatcher>(g, v.trie.get());
  int64_t walks = 0, walked = 0;
  for (auto _ : state) {
    if (m->CanEnd() && (m->Done() || rng() % 3 == 0)) {
      walked += static_cast<int64_t>(m->n_mask_walks());
      m = std::make_unique<pi::GrammarMatcher>(g, v.trie.get());
      ++walks;
    }
    if (!m->Mask(mask.data()).ok()) state.SkipWithError("mask");
    // The k-th allowed token, k uniform: counted a word at a time.
    int64_t count = 0;
    for (uint64_t w : mask) count += __builtin_popcountll(w);
    if (count == 0) {
      state.SkipWithError("no token allowed");
      break;
    }
    int64_t k = static_cast<int64_t>(rng() % count);
    size_t w = 0;
    for (; k >= __builtin_popcountll(mask[w]); ++w) k -= __builtin_popcountll(mask[w]);
    uint64_t bits = mask[w];
    for (; k > 0; --k) bits &= bits - 1;
    const int32_t id = static_cast<int32_t>(w * 64 + __builtin_ctzll(bits));
    if (!m->Accept(v.pieces[id]).ok()) state.SkipWithError("step");
  }
  walked += static_cast<int64_t>(m->n_mask_walks());
  state.counters["texts"] = static_cast<double>(walks);
  state.counters["n_vocab"] = n;
  // The share of tokens whose mask took a walk of the trie (the rest: a kept mask).
  state.counters["walk_share"] = static_cast<double>(walked) / state.iterations();
}

void BM_WalkAnyJson(benchmark::State& state) {
  RunWalk(state, DemoVocab(), "{}");
}
void BM_WalkSchema(benchmark::State& state) {
  RunWalk(state, DemoVocab(), kPersonSchema);
}
void BM_WalkAnyJson128k(benchmark::State& state) {
  RunWalk(state, LargeVocab(), "{}");
}
void BM_WalkSchema128k(benchmark::State& state) {
  RunWalk(state, LargeVocab(), kPersonSchema);
}

// The sampler's share: greedy and top-k over the vocabulary, with and
// without a mask that allows half the tokens.
void RunSample(benchmark::State& state, bool masked, float temp) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> logits(n);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (float& l : logits) l = normal(rng);
  std::vector<uint64_t> mask((n + 63) / 64, 0x5555555555555555ull);
  pi::SamplerParams p;
  p.temp = temp;
  p.seed = 3;
  pi::Sampler sampler(p, n);
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(logits.data(), masked ? mask.data() : nullptr));
  }
}
void BM_SampleGreedy(benchmark::State& s) {
  RunSample(s, false, 0.0f);
}
void BM_SampleGreedyMasked(benchmark::State& s) {
  RunSample(s, true, 0.0f);
}
void BM_SampleTopK(benchmark::State& s) {
  RunSample(s, false, 0.8f);
}
void BM_SampleTopKMasked(benchmark::State& s) {
  RunSample(s, true, 0.8f);
}

}  // namespace

BENCHMARK(BM_WalkAnyJson);
BENCHMARK(BM_WalkSchema);
BENCHMARK(BM_WalkAnyJson128k);
BENCHMARK(BM_WalkSchema128k);
BENCHMARK(BM_SampleGreedy)->Arg(4096)->Arg(1 << 17);
BENCHMARK(BM_SampleGreedyMasked)->Arg(4096)->Arg(1 << 17);
BENCHMARK(BM_SampleTopK)->Arg(4096)->Arg(1 << 17);
BENCHMARK(BM_SampleTopKMasked)->Arg(4096)->Arg(1 << 17);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1 && argv[1][0] != '-') g_model = argv[1];
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

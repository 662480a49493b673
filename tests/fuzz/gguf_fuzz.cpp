// libFuzzer target for the GGUF reader: any input must either be rejected
// with a Status or yield a file whose every value and tensor byte can be
// touched. Accepted files are also re-serialized with GgufWriter; the result
// must parse and re-serialize to the same bytes (a fixed point), which checks
// the reader and writer against each other on inputs nobody wrote by hand.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"

namespace {

// Sanitizers see any out-of-bounds or uninitialized read; the sum keeps the
// reads from being optimized away.
uint64_t Touch(const pi::GgufValue& v) {
  uint64_t sum = v.u + static_cast<uint64_t>(v.i) + static_cast<uint64_t>(v.f != 0);
  for (char c : v.str) sum += static_cast<unsigned char>(c);
  for (const pi::GgufValue& e : v.array) sum += Touch(e);
  return sum;
}

void Check(bool cond, const char* what) {
  if (!cond) {
    fprintf(stderr, "gguf_fuzz: %s\n", what);
    abort();
  }
}

std::vector<uint8_t> Reserialize(const pi::GgufFile& f) {
  pi::GgufWriter w;
  w.SetSparseMagic(f.is_sparse_magic());
  for (const auto& kv : f.metadata()) w.Set(kv.first, kv.second);
  for (const pi::TensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    pi::Status s = w.AddTensor(t.name, t.type, ne, t.data);
    if (!s.ok()) fprintf(stderr, "gguf_fuzz: %s\n", s.message().c_str());
    Check(s.ok(), "writer rejected a tensor the reader accepted");
  }
  std::vector<uint8_t> out = w.Serialize();
  Check(!out.empty(), "writer rejected metadata the reader accepted");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<pi::GgufFile> f;
  pi::Status s = pi::GgufFile::OpenBuffer(data, size, &f);
  if (!s.ok()) {
    Check(!s.message().empty(), "error without a message");
    Check(f == nullptr, "error but a file was returned");
    return 0;
  }
  volatile uint64_t sink = f->version() + f->alignment() + f->file_size();
  for (const auto& kv : f->metadata()) {
    sink = sink + Touch(kv.second) + kv.first.size();
    Check(f->Find(kv.first) == &kv.second, "Find disagrees with metadata()");
    uint32_t u32;
    uint64_t u64;
    float f32;
    bool b;
    std::string str;
    sink = sink + f->GetU32(kv.first, &u32).ok() + f->GetU64(kv.first, &u64).ok() +
           f->GetF32(kv.first, &f32).ok() + f->GetBool(kv.first, &b).ok() +
           f->GetString(kv.first, &str).ok();
  }
  for (const pi::TensorInfo& t : f->tensors()) {
    Check(f->FindTensor(t.name) == &t, "FindTensor disagrees with tensors()");
    Check(t.offset % f->alignment() == 0, "misaligned tensor accepted");
    Check(t.data >= data && t.data + t.nbytes <= data + size, "tensor data outside the input");
    Check(static_cast<int64_t>(t.nbytes) == t.row_bytes() * t.n_rows(),
          "nbytes disagrees with the shape");
    sink = sink + t.ShapeString().size();
    for (uint64_t k = 0; k < t.nbytes; ++k) sink = sink + t.data[k];
  }
  (void)sink;

  // Round trip (small inputs only: the writer copies tensor data).
  if (size <= (1 << 20)) {
    std::vector<uint8_t> once = Reserialize(*f);
    std::unique_ptr<pi::GgufFile> g;
    pi::Status gs = pi::GgufFile::OpenBuffer(once.data(), once.size(), &g);
    if (!gs.ok()) fprintf(stderr, "gguf_fuzz: %s\n", gs.message().c_str());
    Check(gs.ok(), "the reader rejected the writer's output");
    Check(g->metadata().size() == f->metadata().size(), "metadata lost in the round trip");
    Check(g->tensors().size() == f->tensors().size(), "tensors lost in the round trip");
    Check(Reserialize(*g) == once, "re-serialization is not a fixed point");
  }
  return 0;
}

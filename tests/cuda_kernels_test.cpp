// The CUDA kernels one by one against double-precision references computed
// here on the CPU: matrix-vector products of every packed type and every
// epilogue (odd row counts, one sentinel past the end), x's Q8_0 copy
// against the CPU quantizer bit for bit, the norms, RoPE with the KV cache
// write (both layouts, f16/f32 rows), split-KV attention (GQA, one and many
// splits), and the predictor's cold mask. Label "gpu": skipped, with the
// reason, where no CUDA device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/layer_ops.h"
#include "kernels/cuda/matvec.h"
#include "kernels/cuda/packed_matrix.h"

namespace pi {
namespace {

// A device buffer that frees itself.
struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    std::string err;
    if (!cuda::Malloc(&p, bytes, &err)) ADD_FAILURE() << err;
  }
  ~Buf() { cuda::Free(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <typename T>
void Put(const Buf& b, const std::vector<T>& v) {
  std::string err;
  ASSERT_TRUE(cuda::CopyToDevice(b.p, v.data(), v.size() * sizeof(T), &err)) << err;
}
template <typename T>
void Get(const Buf& b, std::vector<T>* v) {
  std::string err;
  ASSERT_TRUE(cuda::Synchronize(&err)) << err;
  ASSERT_TRUE(cuda::CopyToHost(v->data(), b.p, v->size() * sizeof(T), &err)) << err;
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::DeviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

bool Quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0;
}

// x as a quantized weight sees it: rounded through Q8_0 (the CPU's kernels
// and the GPU's both dot quantized rows with x's Q8_0 copy).
std::vector<float> AsSeen(DType w, const std::vector<float>& x) {
  if (!Quantized(w)) return x;
  std::vector<BlockQ8_0> q(x.size() / 32);
  QuantizeRowQ8_0(x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> out(x.size());
  DequantizeRow(DType::kQ8_0, q.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

TEST_F(CudaKernelsTest, QuantizeQ8MatchesCpuBitForBit) {
  const int64_t n = 4096 + 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;  // an all-zero block: d = 0
  x[200] = 127.5f * 0.01f;                        // halves round away from zero
  std::vector<BlockQ8_0> ref(n / 32);
  QuantizeRowQ8_0(x.data(), ref.data(), n);
  Buf dx(n * 4), dq(n), dd(n / 32 * 4), ds(n / 32 * 4);
  Put(dx, x);
  std::string err;
  ASSERT_TRUE(cuda::EnqueueQuantizeQ8(dx.as<float>(), n, dq.as<int8_t>(), dd.as<float>(),
                                      ds.as<int32_t>(), nullptr, &err))
      << err;
  std::vector<int8_t> q(n);
  std::vector<float> d(n / 32);
  std::vector<int32_t> sums(n / 32);
  Get(dq, &q);
  Get(dd, &d);
  Get(ds, &sums);
  for (int64_t b = 0; b < n / 32; ++b) {
    ASSERT_EQ(d[b], F16ToF32(ref[b].d)) << "block " << b;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(q[b * 32 + j], ref[b].qs[j]) << "block " << b;
      sum += ref[b].qs[j];
    }
    ASSERT_EQ(sums[b], sum) << "block " << b;
  }
}

struct MatVecCase {
  DType type;
  int64_t rows, cols;
};

class CudaMatVecTest : public CudaKernelsTest, public ::testing::WithParamInterface<MatVecCase> {};

TEST_P(CudaMatVecTest, EveryEpilogueMatchesReference) {
  const MatVecCase tc = GetParam();
  const int64_t rows = tc.rows, cols = tc.cols;
  std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t rb = RowBytes(tc.type, cols);
  std::vector<uint8_t> w(rows * rb);
  std::vector<float> row(cols), x(cols), deq(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    QuantizeRow(tc.type, row.data(), w.data() + r * rb, cols);
    DequantizeRow(tc.type, w.data() + r * rb, deq.data() + r * cols, cols);
  }
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> packed(PackedMatrixBytes(tc.type, rows, cols));
  PackRows(tc.type, w.data(), cols, nullptr, rows, packed.data());
  const std::vector<float> xs = AsSeen(tc.type, x);
  std::vector<double> ref(rows), mag(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ref[r] += static_cast<double>(deq[r * cols + c]) * xs[c];
      mag[r] += std::fabs(static_cast<double>(deq[r * cols + c]) * xs[c]);
    }
  }
  std::vector<float> gate(rows);
  for (int64_t r = 0; r < rows; ++r) gate[r] = r % 3 == 0 ? -1.0f : 0.5f + (r % 5);

  Buf dw(packed.size()), dx(cols * 4), dq(cols + 16), dd(cols / 32 * 4 + 16),
      ds(cols / 32 * 4 + 16), dy((rows + 1) * 4), dg(rows * 4), dfired(4);
  Put(dw, packed);
  Put(dx, x);
  Put(dg, gate);
  std::string err;
  cuda::DeviceVector v;
  v.x = dx.as<float>();
  v.n = cols;
  if (Quantized(tc.type)) {
    ASSERT_TRUE(cuda::EnqueueQuantizeQ8(dx.as<float>(), cols, dq.as<int8_t>(), dd.as<float>(),
                                        ds.as<int32_t>(), nullptr, &err))
        << err;
    v.q = dq.as<int8_t>();
    v.d = dd.as<float>();
    v.s = ds.as<int32_t>();
  }
  const cuda::DeviceMatrix m{tc.type, rows, cols, dw.p};
  for (cuda::Epilogue ep :
       {cuda::Epilogue::kStore, cuda::Epilogue::kAccumulate, cuda::Epilogue::kRelu,
        cuda::Epilogue::kReluGateUp, cuda::Epilogue::kDReluGateUp, cuda::Epilogue::kReluFired}) {
    std::vector<float> y(rows + 1, 0.25f);
    y[rows] = 1234.5f;  // a sentinel past the end
    Put(dy, y);
    Put(dfired, std::vector<int32_t>{7});
    cuda::MatVecOut out;
    out.y = dy.as<float>();
    out.epilogue = ep;
    out.gate = dg.as<float>();
    out.fired = dfired.as<int32_t>();
    ASSERT_TRUE(cuda::EnqueueMatVec(m, v, out, nullptr, &err)) << err;
    Get(dy, &y);
    std::vector<int32_t> fired(1);
    Get(dfired, &fired);
    int32_t expect_fired = 7;
    const bool counts = ep == cuda::Epilogue::kReluGateUp || ep == cuda::Epilogue::kDReluGateUp ||
                        ep == cuda::Epilogue::kReluFired;
    for (int64_t r = 0; r < rows; ++r) {
      const double tol = 1e-5 * mag[r] + 1e-6, dot = ref[r];
      double want = dot;
      double act_tol = tol;
      switch (ep) {
        case cuda::Epilogue::kStore:
          break;
        case cuda::Epilogue::kAccumulate:
          want = 0.25 + dot;
          break;
        case cuda::Epilogue::kRelu:
        case cuda::Epilogue::kReluFired:
          want = dot > 0 ? dot : 0;
          break;
        case cuda::Epilogue::kReluGateUp:
          want = gate[r] > 0 ? gate[r] * dot : 0;
          act_tol = std::fabs(gate[r]) * tol;
          break;
        case cuda::Epilogue::kDReluGateUp:
          want = gate[r] > 0 && dot > 0 ? gate[r] * dot : 0;
          act_tol = std::fabs(gate[r]) * tol;
          break;
        case cuda::Epilogue::kActThreshold:
        case cuda::Epilogue::kGateUp:
          ADD_FAILURE() << "cats' epilogues are tested below";
          break;
      }
      if (std::fabs(dot) > tol) {  // a sign decision within rounding may go either way
        ASSERT_NEAR(y[r], want, act_tol)
            << DTypeName(tc.type) << " epilogue " << static_cast<int>(ep) << " row " << r;
        expect_fired += counts && want != 0;
      } else if (counts) {
        expect_fired += y[r] != 0;  // whichever way it went, it is counted consistently
      }
    }
    EXPECT_EQ(y[rows], 1234.5f) << "wrote past the end";
    EXPECT_EQ(fired[0], expect_fired) << "epilogue " << static_cast<int>(ep);
  }

  // --sparse cats' epilogues: the gate's activation kept above a threshold
  // read from device memory, and the up projection for the kept rows (a
  // gate of exactly 0 skips the row, a negative one does not).
  const float t = 0.3f;
  std::vector<float> kept_gate(rows);
  for (int64_t r = 0; r < rows; ++r) kept_gate[r] = r % 4 == 0 ? 0.0f : gate[r];
  Buf dt(4);
  Put(dt, std::vector<float>{t});
  Put(dg, kept_gate);
  struct CatsCase {
    cuda::Epilogue ep;
    cuda::ActForm form;
    bool drelu;
  };
  for (const CatsCase cc : {CatsCase{cuda::Epilogue::kActThreshold, cuda::ActForm::kRelu, false},
                            CatsCase{cuda::Epilogue::kActThreshold, cuda::ActForm::kSilu, false},
                            CatsCase{cuda::Epilogue::kActThreshold, cuda::ActForm::kGelu, false},
                            CatsCase{cuda::Epilogue::kGateUp, cuda::ActForm::kRelu, false},
                            CatsCase{cuda::Epilogue::kGateUp, cuda::ActForm::kRelu, true}}) {
    std::vector<float> y(rows + 1, 0.25f);
    y[rows] = 1234.5f;
    Put(dy, y);
    Put(dfired, std::vector<int32_t>{7});
    cuda::MatVecOut out;
    out.y = dy.as<float>();
    out.epilogue = cc.ep;
    out.gate = dg.as<float>();
    out.fired = dfired.as<int32_t>();
    out.act_form = cc.form;
    out.threshold = dt.as<float>();
    out.drelu = cc.drelu;
    ASSERT_TRUE(cuda::EnqueueMatVec(m, v, out, nullptr, &err)) << err;
    Get(dy, &y);
    std::vector<int32_t> fired(1);
    Get(dfired, &fired);
    int32_t expect_fired = 7;
    const std::string what = std::string(DTypeName(tc.type)) + " cats epilogue " +
                             std::to_string(static_cast<int>(cc.ep)) + " form " +
                             std::to_string(static_cast<int>(cc.form)) + (cc.drelu ? " drelu" : "");
    for (int64_t r = 0; r < rows; ++r) {
      const double tol = 1e-5 * mag[r] + 1e-6, dot = ref[r];
      double want = 0, act_tol = tol;
      bool decided = true;  // the keep decision is clear of rounding
      if (cc.ep == cuda::Epilogue::kActThreshold) {
        const double a =
            cc.form == cuda::ActForm::kSilu ? dot / (1 + std::exp(-dot))
            : cc.form == cuda::ActForm::kGelu
                ? 0.5 * dot * (1 + std::tanh(0.7978845608028654 * dot * (1 + 0.044715 * dot * dot)))
                : (dot > 0 ? dot : 0);
        want = std::fabs(a) > t ? a : 0;
        decided = std::fabs(std::fabs(a) - t) > 2 * tol;
      } else {
        const double g = kept_gate[r];
        want = g != 0 && (!cc.drelu || dot > 0) ? g * dot : 0;
        act_tol = std::fabs(g) * tol;
        decided = !cc.drelu || std::fabs(dot) > tol;
      }
      if (decided) {
        ASSERT_NEAR(y[r], want, act_tol) << what << " row " << r;
        expect_fired += want != 0;
      } else {
        expect_fired += y[r] != 0;
      }
    }
    EXPECT_EQ(y[rows], 1234.5f) << what << ": wrote past the end";
    EXPECT_EQ(fired[0], expect_fired) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMatVecTest,
    ::testing::Values(MatVecCase{DType::kF32, 37, 96}, MatVecCase{DType::kF16, 37, 96},
                      MatVecCase{DType::kBF16, 37, 96}, MatVecCase{DType::kQ8_0, 37, 96},
                      MatVecCase{DType::kQ4_0, 37, 96}, MatVecCase{DType::kF32, 5, 44},
                      MatVecCase{DType::kF16, 9, 50}, MatVecCase{DType::kBF16, 3, 7},
                      MatVecCase{DType::kF16, 1030, 4096}, MatVecCase{DType::kQ8_0, 1030, 4096},
                      MatVecCase{DType::kQ4_0, 1030, 4096}, MatVecCase{DType::kQ4_0, 257, 11008},
                      MatVecCase{DType::kQ8_0, 64, 11008}, MatVecCase{DType::kF32, 130, 4096}),
    [](const auto& p) {
      return std::string(DTypeName(p.param.type)) + "_" + std::to_string(p.param.rows) + "x" +
             std::to_string(p.param.cols);
    });

TEST_F(CudaKernelsTest, NormsMatchCpu) {
  for (bool layer_norm : {false, true}) {
    const int64_t n = 4096;
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.5f, 3.0f);
    std::vector<float> x(n), w(n), b(n), ref(n);
    for (int64_t i = 0; i < n; ++i) x[i] = nd(rng), w[i] = 0.5f + i % 7 * 0.1f, b[i] = 0.01f * i;
    if (layer_norm) {
      LayerNorm(x.data(), w.data(), b.data(), n, 1e-5f, ref.data());
    } else {
      RmsNorm(x.data(), w.data(), n, 1e-6f, ref.data());
    }
    Buf dx(n * 4), dw(n * 4), db(n * 4), dout(n * 4), dcopy(n * 4), dq(n), dd(n / 32 * 4),
        ds(n / 32 * 4);
    Put(dx, x);
    Put(dw, w);
    Put(db, b);
    std::string err;
    ASSERT_TRUE(cuda::EnqueueNorm(
        dx.as<float>(), dw.as<float>(), layer_norm ? db.as<float>() : nullptr, n,
        layer_norm ? 1e-5f : 1e-6f, layer_norm, dout.as<float>(), dcopy.as<float>(), nullptr, &err,
        dq.as<int8_t>(), dd.as<float>(), ds.as<int32_t>()))
        << err;
    std::vector<float> out(n), copy(n), d(n / 32);
    std::vector<int8_t> q(n);
    std::vector<int32_t> sums(n / 32);
    Get(dout, &out);
    Get(dcopy, &copy);
    Get(dq, &q);
    Get(dd, &d);
    Get(ds, &sums);
    // The fused Q8_0 copy is the CPU quantizer's, bit for bit, of out.
    std::vector<BlockQ8_0> blocks(n / 32);
    QuantizeRowQ8_0(out.data(), blocks.data(), n);
    for (int64_t blk = 0; blk < n / 32; ++blk) {
      ASSERT_EQ(d[blk], F16ToF32(blocks[blk].d)) << "block " << blk;
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(q[blk * 32 + j], blocks[blk].qs[j]) << "block " << blk;
        sum += blocks[blk].qs[j];
      }
      ASSERT_EQ(sums[blk], sum) << "block " << blk;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-6f * std::fabs(ref[i]) + 1e-7f) << layer_norm << " " << i;
    }
    EXPECT_EQ(copy, x);
  }
}

// RoPE + cache write, then attention over positions 0..pos, against ops.h's
// RoPE and a double-precision softmax(K q / sqrt(hd)) V.
struct AttnCase {
  int n_head, n_kv, head_dim, rope_dims;
  bool neox;
  DType kv;
  int n_splits;
};

class CudaAttentionTest : public CudaKernelsTest, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(CudaAttentionTest, MatchesReference) {
  const AttnCase tc = GetParam();
  const int n_ctx = 300, hd = tc.head_dim;
  const int qd = tc.n_head * hd, kvd = tc.n_kv * hd;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> angles(static_cast<size_t>(n_ctx) * tc.rope_dims);
  for (int p = 0; p < n_ctx; ++p)
    RopeAngles(tc.rope_dims, p, 10000.0f, angles.data() + p * tc.rope_dims);
  const int64_t cache_elems = static_cast<int64_t>(tc.n_kv) * n_ctx * hd;
  const int64_t elem = tc.kv == DType::kF16 ? 2 : 4;
  Buf dq(qd * 4 + 2 * kvd * 4), dang(angles.size() * 4), dpos(4), dk(cache_elems * elem),
      dv(cache_elems * elem), dout(qd * 4),
      dscr(cuda::AttentionScratchFloats(tc.n_head, hd, tc.n_splits) * 4);
  Put(dang, angles);
  // Host mirror of the cache, as the kernels should have written it.
  std::vector<float> kc(cache_elems), vc(cache_elems);
  const auto round = [&](float v) { return tc.kv == DType::kF16 ? F16ToF32(F32ToF16(v)) : v; };
  std::string err;
  const int last = 257;  // positions 0..last written, attention at several of them
  for (int pos = 0; pos <= last; ++pos) {
    std::vector<float> qkv(qd + 2 * kvd);
    for (float& v : qkv) v = nd(rng);
    std::vector<float> q(qkv.begin(), qkv.begin() + qd),
        k(qkv.begin() + qd, qkv.begin() + qd + kvd);
    const float* v = qkv.data() + qd + kvd;
    const auto rope = tc.neox ? RopeNeox : RopeNormal;
    rope(q.data(), tc.n_head, hd, tc.rope_dims, angles.data() + pos * tc.rope_dims);
    rope(k.data(), tc.n_kv, hd, tc.rope_dims, angles.data() + pos * tc.rope_dims);
    for (int h = 0; h < tc.n_kv; ++h) {
      for (int e = 0; e < hd; ++e) {
        kc[(static_cast<int64_t>(h) * n_ctx + pos) * hd + e] = round(k[h * hd + e]);
        vc[(static_cast<int64_t>(h) * n_ctx + pos) * hd + e] = round(v[h * hd + e]);
      }
    }
    Put(dq, qkv);
    Put(dpos, std::vector<int32_t>{pos});
    cuda::RopeCacheArgs r;
    r.q = dq.as<float>();
    r.k = dq.as<float>() + qd;
    r.v = dq.as<float>() + qd + kvd;
    r.angles = dang.as<float>();
    r.pos = dpos.as<int32_t>();
    r.n_head = tc.n_head;
    r.n_kv = tc.n_kv;
    r.head_dim = hd;
    r.rope_dims = tc.rope_dims;
    r.n_ctx = n_ctx;
    r.neox = tc.neox;
    r.k_cache = dk.p;
    r.v_cache = dv.p;
    r.k_type = r.v_type = tc.kv;
    ASSERT_TRUE(cuda::EnqueueRopeAndCache(r, nullptr, &err)) << err;
    std::vector<float> got(qkv.size());
    Get(dq, &got);
    for (int i = 0; i < qd; ++i) ASSERT_NEAR(got[i], q[i], 1e-5f) << "q " << i << " pos " << pos;
    for (int i = 0; i < kvd; ++i) ASSERT_NEAR(got[qd + i], k[i], 1e-5f) << "k " << i;
    if (pos != 0 && pos != 1 && pos != 40 && pos != last) continue;
    cuda::AttentionArgs a;
    a.q = dq.as<float>();
    a.k_cache = dk.p;
    a.v_cache = dv.p;
    a.k_type = a.v_type = tc.kv;
    a.pos = dpos.as<int32_t>();
    a.n_head = tc.n_head;
    a.n_kv = tc.n_kv;
    a.head_dim = hd;
    a.n_ctx = n_ctx;
    a.n_splits = tc.n_splits;
    a.scratch = dscr.as<float>();
    a.out = dout.as<float>();
    ASSERT_TRUE(cuda::EnqueueAttention(a, nullptr, &err)) << err;
    std::vector<float> out(qd);
    Get(dout, &out);
    const int group = tc.n_head / tc.n_kv;
    for (int h = 0; h < tc.n_head; ++h) {
      const int kvh = h / group;
      std::vector<double> s(pos + 1);
      double mx = -1e300, sum = 0;
      for (int p = 0; p <= pos; ++p) {
        double dot = 0;
        for (int e = 0; e < hd; ++e)
          dot += q[h * hd + e] * kc[(static_cast<int64_t>(kvh) * n_ctx + p) * hd + e];
        s[p] = dot / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[p]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int e = 0; e < hd; ++e) {
        double o = 0;
        for (int p = 0; p <= pos; ++p)
          o += s[p] / sum * vc[(static_cast<int64_t>(kvh) * n_ctx + p) * hd + e];
        ASSERT_NEAR(out[h * hd + e], o, 2e-5) << "head " << h << " dim " << e << " pos " << pos;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaAttentionTest,
                         ::testing::Values(AttnCase{8, 2, 32, 32, false, DType::kF16, 4},
                                           AttnCase{8, 2, 32, 32, false, DType::kF32, 1},
                                           AttnCase{4, 1, 64, 64, true, DType::kF16, 5},
                                           AttnCase{2, 2, 128, 64, false, DType::kF32, 32},
                                           AttnCase{4, 4, 256, 96, true, DType::kF16, 3}),
                         [](const auto& p) {
                           const AttnCase& c = p.param;
                           return std::to_string(c.n_head) + "x" + std::to_string(c.n_kv) + "_hd" +
                                  std::to_string(c.head_dim) + "_rope" +
                                  std::to_string(c.rope_dims) + (c.neox ? "_neox_" : "_normal_") +
                                  DTypeName(c.kv) + "_splits" + std::to_string(c.n_splits);
                         });

TEST_F(CudaKernelsTest, ColdMaskAndAdd) {
  const int64_t n = 1000;  // the last word is partial
  std::vector<float> scores(n);
  std::vector<uint32_t> hot((n + 31) / 32, 0);
  for (int64_t i = 0; i < n; ++i) {
    scores[i] = static_cast<float>(i % 7) - 3.0f;
    if (i % 5 == 0) hot[i / 32] |= 1u << (i % 32);
  }
  Buf ds(n * 4), dh(hot.size() * 4), dm(hot.size() * 4);
  Put(ds, scores);
  Put(dh, hot);
  std::string err;
  ASSERT_TRUE(cuda::EnqueueColdMask(ds.as<float>(), dh.as<uint32_t>(), n, 0.5f, dm.as<uint32_t>(),
                                    nullptr, &err))
      << err;
  std::vector<uint32_t> mask(hot.size());
  Get(dm, &mask);
  for (int64_t i = 0; i < n; ++i) {
    const bool want = scores[i] >= 0.5f && i % 5 != 0;
    ASSERT_EQ(((mask[i / 32] >> (i % 32)) & 1u) != 0, want) << i;
  }
  for (int64_t i = n; i < static_cast<int64_t>(mask.size()) * 32; ++i) {
    EXPECT_EQ((mask[i / 32] >> (i % 32)) & 1u, 0u) << "bit past n: " << i;
  }
  std::vector<float> y(n, 1.0f), x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  Buf dy(n * 4), dx(n * 4);
  Put(dy, y);
  Put(dx, x);
  ASSERT_TRUE(cuda::EnqueueAdd(dy.as<float>(), dx.as<float>(), n, nullptr, &err)) << err;
  Get(dy, &y);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 1.0f + i);
}

// --sparse teal's input mask: entries at or below the threshold (read from
// device memory) zeroed, in place or into another buffer.
TEST_F(CudaKernelsTest, ThresholdMaskKeepsTheEntriesAboveIt) {
  const int64_t n = 1000;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (static_cast<float>(i % 13) - 6.0f) * 0.1f;
  const float t = 0.3f;
  Buf dx(n * 4), dout(n * 4 + 4), dt(4);
  Put(dx, x);
  Put(dt, std::vector<float>{t});
  std::vector<float> sentinel(n + 1, 1234.5f);
  Put(dout, sentinel);
  std::string err;
  ASSERT_TRUE(cuda::EnqueueThresholdMask(dx.as<float>(), n, dt.as<float>(), dout.as<float>(),
                                         nullptr, &err))
      << err;
  std::vector<float> out(n + 1);
  Get(dout, &out);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::fabs(x[i]) > t ? x[i] : 0.0f;
    ASSERT_EQ(out[i], want) << i;
    kept += want != 0.0f;
  }
  EXPECT_EQ(out[n], 1234.5f) << "wrote past the end";
  EXPECT_GT(kept, n / 4);
  EXPECT_LT(kept, n);
  ASSERT_TRUE(
      cuda::EnqueueThresholdMask(dx.as<float>(), n, dt.as<float>(), dx.as<float>(), nullptr, &err))
      << err;
  std::vector<float> in_place(n);
  Get(dx, &in_place);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in_place[i], out[i]) << i;
}

}  // namespace
}  // namespace pi

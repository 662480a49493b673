// The block formats of kernels/cpu/kquant.h (Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K): dequantization bit-exact against ggml's formulas written here
// element by element (from ggml-common.h's layouts, not kquant.cpp's loops)
// on blocks the test fills with random bytes; the quantizers' round trip
// within each format's precision; and every product kernel (dense, batched,
// indexed, axpy) against a double-precision dot of the dequantized rows
// (with the Q8_0-rounded activation the products read),
// with sentinel bytes after every output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

const DType kTypes[] = {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

uint16_t H(float f) {
  return F32ToF16(f);
}

// Random blocks whose f16 fields are finite, small numbers.
std::vector<uint8_t> RandomBlocks(DType t, int n_blocks, std::mt19937* rng) {
  const DTypeInfo info = GetDTypeInfo(static_cast<uint32_t>(t));
  std::vector<uint8_t> bytes(static_cast<size_t>(n_blocks) * info.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(*rng));
  for (int i = 0; i < n_blocks; ++i) {
    uint8_t* b = bytes.data() + static_cast<size_t>(i) * info.block_bytes;
    auto put = [&](size_t at, float v) {
      const uint16_t h = H(v);
      memcpy(b + at, &h, 2);
    };
    switch (t) {
      case DType::kQ4_1:
      case DType::kQ5_1:
      case DType::kQ4_K:
      case DType::kQ5_K:
        put(0, scale(*rng));
        put(2, scale(*rng));
        break;
      case DType::kQ5_0:
        put(0, scale(*rng));
        break;
      case DType::kQ6_K:
        put(208, scale(*rng));
        break;
      default:
        break;
    }
  }
  return bytes;
}

float F16At(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Element e of a block, by ggml's definitions, one element at a time.
float Expected(DType t, const uint8_t* b, int e) {
  switch (t) {
    case DType::kQ4_1: {  // d, m, qs[16]: weight j low nibble of byte j, j+16 the high
      const uint8_t q = e < 16 ? b[4 + e] & 0xF : b[4 + e - 16] >> 4;
      return q * F16At(b) + F16At(b + 2);
    }
    case DType::kQ5_0:
    case DType::kQ5_1: {  // d[, m], qh (bit j: weight j's fifth bit), qs
      const bool has_m = t == DType::kQ5_1;
      const uint8_t* qh = b + (has_m ? 4 : 2);
      const uint8_t* qs = qh + 4;
      const int low = e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4;
      const int fifth = (qh[e / 8] >> (e % 8)) & 1;
      const int q = low | (fifth << 4);
      return has_m ? q * F16At(b) + F16At(b + 2) : (q - 16) * F16At(b);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      // Sub-block s = e / 32; its 6-bit scale and min from the 12 bytes:
      // s < 4: low 6 bits of bytes s and s + 4; else nibbles of byte s + 4
      // with bits 6-7 of bytes s - 4 and s on top.
      const uint8_t* sc = b + 4;
      const int s = e / 32;
      const int scale = s < 4 ? sc[s] & 63 : (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4);
      const int min = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
      const bool q5 = t == DType::kQ5_K;
      const uint8_t* qs = b + 16 + (q5 ? 32 : 0);
      const int chunk = e / 64, l = e % 32;
      const int low = (s % 2 == 0) ? qs[32 * chunk + l] & 0xF : qs[32 * chunk + l] >> 4;
      const int high = q5 ? ((b[16 + l] >> s) & 1) << 4 : 0;  // qh bit s of byte l
      const float d1 = F16At(b) * scale, m1 = F16At(b + 2) * min;
      return d1 * (low + high) - m1;
    }
    case DType::kQ6_K: {  // ql[128], qh[64], scales[16], d
      const int half = e / 128, o = e % 128, g = o / 32, l = o % 32;
      const uint8_t lo_byte = b[64 * half + l + (g % 2) * 32];
      const int low = g < 2 ? lo_byte & 0xF : lo_byte >> 4;
      const int high = (b[128 + 32 * half + l] >> (2 * g)) & 3;
      const int q = static_cast<int8_t>(low | (high << 4)) - 32;
      const int8_t scale = static_cast<int8_t>(b[192 + e / 16]);
      return F16At(b + 208) * scale * q;
    }
    default:
      return 0.0f;
  }
}

TEST(KQuantTest, DequantizationIsGgmlsBitForBit) {
  std::mt19937 rng(3);
  for (DType t : kTypes) {
    const DTypeInfo info = GetDTypeInfo(static_cast<uint32_t>(t));
    const int n_blocks = 5;
    const std::vector<uint8_t> bytes = RandomBlocks(t, n_blocks, &rng);
    std::vector<float> got(static_cast<size_t>(n_blocks) * info.block_elems);
    DequantizeRow(t, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
    for (int i = 0; i < n_blocks; ++i) {
      for (int e = 0; e < info.block_elems; ++e) {
        const float want = Expected(t, bytes.data() + static_cast<size_t>(i) * info.block_bytes, e);
        ASSERT_EQ(0, memcmp(&got[i * info.block_elems + e], &want, 4))
            << DTypeName(t) << " block " << i << " element " << e << ": "
            << got[i * info.block_elems + e] << " vs " << want;
      }
    }
  }
}

TEST(KQuantTest, QuantizersRoundTripWithinTheirPrecision) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const double bound[] = {0.08, 0.05, 0.04, 0.08, 0.04, 0.02};  // RMS error / RMS value
  for (int k = 0; k < 6; ++k) {
    const DType t = kTypes[k];
    const int64_t n = 1024;
    std::vector<float> x(n), back(n);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> q(RowBytes(t, n));
    QuantizeRow(t, x.data(), q.data(), n);
    DequantizeRow(t, q.data(), back.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / ref), bound[k]) << DTypeName(t);
    EXPECT_GT(std::sqrt(err / ref), 0.0) << DTypeName(t);  // a lossy format loses something
  }
}

TEST(KQuantTest, ProductKernelsMatchADoubleReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 512, batch = 3;
  constexpr float kSentinel = 12345.0f;
  for (DType t : kTypes) {
    SCOPED_TRACE(DTypeName(t));
    std::vector<float> wf(rows * cols);
    for (float& v : wf) v = normal(rng);
    std::vector<uint8_t> w(RowBytes(t, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(t, wf.data() + r * cols, w.data() + r * RowBytes(t, cols), cols);
      DequantizeRow(t, w.data() + r * RowBytes(t, cols), wf.data() + r * cols, cols);
    }
    std::vector<float> x(batch * cols);
    for (float& v : x) v = normal(rng);
    // Quantized activations, as for Q8_0/Q4_0 weights (one shared layout): the
    // products see x through its Q8_0 blocks, decoded here for the reference.
    const size_t stride = PreparedActivationBytes(t, cols);
    ASSERT_EQ(stride, PreparedActivationBytes(DType::kQ8_0, cols));
    std::vector<uint8_t> xp(batch * stride);
    std::vector<float> xq(batch * cols);
    for (int64_t b = 0; b < batch; ++b) {
      PrepareActivation(t, x.data() + b * cols, cols, xp.data() + b * stride);
      const BlockQ8_0* blocks = reinterpret_cast<const BlockQ8_0*>(xp.data() + b * stride);
      for (int64_t c = 0; c < cols; ++c) {
        xq[b * cols + c] = blocks[c / 32].qs[c % 32] * F16ToF32(blocks[c / 32].d);
      }
    }
    auto want = [&](int64_t b, int64_t r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c)
        s += static_cast<double>(wf[r * cols + c]) * xq[b * cols + c];
      return s;
    };
    std::vector<float> y(batch * rows + 1, kSentinel);
    MatMulRows(t, w.data(), cols, xp.data(), batch, y.data(), rows, 0, rows);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(y[b * rows + r], want(b, r), 1e-3) << b << " " << r;
    }
    EXPECT_EQ(y[batch * rows], kSentinel);
    const std::vector<int32_t> ids = {3, 0, 36, 17};
    std::vector<float> yi(rows + 1, kSentinel);
    MatVecRowsIndexed(t, w.data(), cols, xp.data(), ids.data(), 4, yi.data());
    for (int32_t id : ids) EXPECT_NEAR(yi[id], want(0, id), 1e-3);
    EXPECT_EQ(yi[1], kSentinel);
    EXPECT_EQ(yi[rows], kSentinel);
    // Axpy: y[c] += sum_r a[r] w[r][c], dense and indexed.
    std::vector<float> a(rows);
    for (float& v : a) v = normal(rng);
    a[5] = 0.0f;
    std::vector<float> ya(cols + 1, 0.0f), yb(cols + 1, 0.0f);
    ya[cols] = yb[cols] = kSentinel;
    AxpyRows(t, w.data(), cols, a.data(), ya.data(), 0, rows);
    const std::vector<float> ai = {a[ids[0]], a[ids[1]], a[ids[2]], a[ids[3]]};
    AxpyRowsIndexed(t, w.data(), cols, ids.data(), ai.data(), 4, yb.data());
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0, si = 0;
      for (int64_t r = 0; r < rows; ++r) s += static_cast<double>(a[r]) * wf[r * cols + c];
      for (int k = 0; k < 4; ++k) si += static_cast<double>(ai[k]) * wf[ids[k] * cols + c];
      EXPECT_NEAR(ya[c], s, 1e-3);
      EXPECT_NEAR(yb[c], si, 1e-3);
    }
    EXPECT_EQ(ya[cols], kSentinel);
    EXPECT_EQ(yb[cols], kSentinel);
  }
}

}  // namespace
}  // namespace pi

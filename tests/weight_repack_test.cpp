// common/model/weight_repack.h: which matrices a scope repacks (a device's layers
// and head, and the FFN unless this process computes it densely, are left
// alone), that a repacked matrix equals the file's bytes in panel order, and
// that repacking twice changes nothing.
#include "common/model/weight_repack.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "kernels/cpu/weight_panels.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

class WeightRepackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!WeightPanelsFast(DType::kQ4_0)) GTEST_SKIP() << "no SIMD panel kernel: nothing repacks";
    SyntheticModelOptions o;
    o.n_vocab = 96;  // three panels
    o.n_embd = 64;
    o.n_ff = 128;
    o.n_layer = 3;
    o.type = DType::kQ4_0;
    path_ = TempPath("repack.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path_).ok());
    ASSERT_TRUE(LoadLlamaModel(path_, &model_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  LlamaModel model_;
};

TEST_F(WeightRepackTest, ScopeSaysWhichMatrices) {
  ThreadPool pool(2);
  RepackScope scope;
  scope.first_layer = 1;  // a device holding layer 0 and the head
  scope.head = false;
  scope.ffn = true;
  RepackStats stats;
  ASSERT_TRUE(RepackModelWeights(&model_, scope, &pool, &stats).ok());
  EXPECT_TRUE(stats.skipped.empty()) << stats.skipped;
  EXPECT_EQ(stats.matrices, 2 * 7);  // layers 1 and 2: Q, K, V, O, gate, up, down
  const LlamaLayer& l0 = model_.layers[0];
  for (const Tensor* t : {&l0.wq, &l0.wk, &l0.wv, &l0.wo, &l0.ffn_gate, &l0.ffn_up, &l0.ffn_down}) {
    EXPECT_EQ(t->panels, nullptr);
  }
  EXPECT_EQ(model_.output.panels, nullptr);
  int64_t bytes = 0;
  for (int il = 1; il < 3; ++il) {
    const LlamaLayer& l = model_.layers[il];
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      ASSERT_NE(t->panels, nullptr) << "layer " << il;
      bytes += t->nbytes();
      // The file's bytes in panel order: repacking them again gives the same.
      std::vector<uint8_t> again(WeightPanelBytes(t->type, t->rows, t->cols) + 64);
      uint8_t* dst = again.data() + (64 - reinterpret_cast<uintptr_t>(again.data()) % 64) % 64;
      RepackWeights(t->type, t->data, t->cols, 0, t->rows, dst);
      EXPECT_EQ(std::memcmp(dst, t->panels, static_cast<size_t>(t->nbytes())), 0);
    }
  }
  EXPECT_EQ(stats.bytes, bytes);  // the file's size, no more

  // Again, with everything in scope: only what was left is repacked now.
  RepackStats more;
  ASSERT_TRUE(RepackModelWeights(&model_, RepackScope(), &pool, &more).ok());
  EXPECT_EQ(more.matrices, 4 + 1);  // layer 0's attention and the head; its FFN out of scope
  EXPECT_EQ(model_.layers[0].ffn_up.panels, nullptr);
  EXPECT_NE(model_.output.panels, nullptr);
}

}  // namespace
}  // namespace pi

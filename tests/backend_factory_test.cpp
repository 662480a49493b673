// The backend factory (--ffn-backend): the hot neurons alone run on the host
// ("host" and "auto"; "cuda" refused, saying a GPU takes whole layers); a
// device backend exactly where this build has CUDA and the machine an NVIDIA
// device (told apart here by the driver's device nodes, not by asking CUDA),
// otherwise an error that says why; anything else is rejected. Runs on every
// machine.
#include "gpu_worker/backend_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/gpu_split.h"
#include "common/offline/synthetic_model.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

bool BuiltWithCuda() {
#ifdef PI_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool MachineHasNvidiaDevice() {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

// A small ReLU model with ffn_down_t (what a hot shard needs).
struct SmallModel {
  SyntheticModelOptions o;
  LlamaModel m;
  std::vector<std::vector<int32_t>> no_hot;  // an empty set per layer
};

void LoadSmallModel(SmallModel* s) {
  s->o.n_ff = 64;
  s->o.activation = "relu";
  s->o.down_t = true;
  const std::string path = TempPath("factory.gguf");
  ASSERT_TRUE(WriteSyntheticModel(s->o, path).ok());
  ASSERT_TRUE(LoadLlamaModel(path, &s->m).ok());
  std::remove(path.c_str());  // mapped: the model stays readable
  s->no_hot.assign(s->o.n_layer, {});
}

TEST(BackendFactoryTest, HostComputesTheHotPart) {
  SmallModel sm;
  LoadSmallModel(&sm);
  const SyntheticModelOptions& o = sm.o;
  const LlamaModel& m = sm.m;
  // A real step: one hot neuron, y = act * down_t[id] against a double evaluation.
  const LlamaLayer& l = m.layers[0];
  const int64_t d = o.n_embd;
  std::vector<float> x(d), gate(d), up(d), down(d);
  for (int64_t i = 0; i < d; ++i) x[i] = std::sin(0.37 * static_cast<double>(i) + 1.0);
  // The first neuron whose gate fires for this x.
  int32_t id = -1;
  double g = 0, u = 0;
  for (int32_t i = 0; i < o.n_ff && id < 0; ++i) {
    DequantizeRow(l.ffn_gate.type, l.ffn_gate.row(i), gate.data(), d);
    g = 0;
    for (int64_t c = 0; c < d; ++c) g += static_cast<double>(gate[c]) * x[c];
    if (g > 1e-3) id = i;
  }
  ASSERT_GE(id, 0);
  DequantizeRow(l.ffn_up.type, l.ffn_up.row(id), up.data(), d);
  DequantizeRow(l.ffn_down_t.type, l.ffn_down_t.row(id), down.data(), d);
  for (int64_t c = 0; c < d; ++c) u += static_cast<double>(up[c]) * x[c];
  std::vector<std::vector<int32_t>> hot(o.n_layer);
  hot[0] = {id};
  std::unique_ptr<Shard> b;
  ASSERT_TRUE(LoadHotShard("host", 2, m, hot, {}, &b).ok());
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->backend(), "host");
  EXPECT_EQ(b->owned(), hot);
  std::vector<float> y(d, 99.0f);
  ShardStep step;
  step.x = x.data();
  step.out = y.data();
  b->Start(step);
  const float* sum = nullptr;
  int64_t fired = 0;
  ASSERT_TRUE(b->Wait(&sum, &fired).ok());
  EXPECT_EQ(sum, y.data());
  EXPECT_EQ(fired, 1);
  for (int64_t c = 0; c < d; ++c) {
    ASSERT_NEAR(y[c], g * u * down[c], 1e-4 * std::fabs(g * u) + 1e-6) << c;
  }
}

TEST(BackendFactoryTest, DeviceBackendOnlyWhereBuiltAndPresent) {
  std::unique_ptr<DeviceBackend> d;
  const Status s = CreateDeviceBackend(&d);
  std::string why;
  const bool available = CudaAvailable(&why);
  if (BuiltWithCuda() && MachineHasNvidiaDevice()) {
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_STREQ(d->name(), "cuda");
    EXPECT_TRUE(available);
  } else {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(d, nullptr);
    EXPECT_FALSE(available);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("no GPU backend"));
    EXPECT_THAT(s.message(),
                ::testing::HasSubstr(BuiltWithCuda() ? "CUDA device" : "no CUDA support"));
    EXPECT_THAT(s.message(), ::testing::HasSubstr(why));
  }
}

// Whatever the machine has: a GPU takes whole layers, never the hot neurons alone.
TEST(BackendFactoryTest, HotNeuronsAloneRunOnTheHost) {
  SmallModel sm;
  LoadSmallModel(&sm);
  std::unique_ptr<Shard> b;
  ASSERT_TRUE(LoadHotShard("auto", 1, sm.m, sm.no_hot, {}, &b).ok());
  EXPECT_STREQ(b->backend(), "host");
  b.reset();
  const Status s = LoadHotShard("cuda", 1, sm.m, sm.no_hot, {}, &b);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("whole layers"));
  EXPECT_EQ(b, nullptr);
}

TEST(BackendFactoryTest, RejectsUnknownKinds) {
  SmallModel sm;
  LoadSmallModel(&sm);
  std::unique_ptr<Shard> b;
  Status s = LoadHotShard("bogus", 1, sm.m, sm.no_hot, {}, &b);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'bogus'"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("auto, cuda or host"));
  EXPECT_EQ(b, nullptr);
  EXPECT_FALSE(LoadHotShard("", 1, sm.m, sm.no_hot, {}, &b).ok());
  EXPECT_FALSE(LoadHotShard("host", 0, sm.m, sm.no_hot, {}, &b).ok());
  std::vector<std::vector<int32_t>> unsorted = sm.no_hot;
  unsorted[0] = {3, 1};
  EXPECT_THAT(LoadHotShard("host", 1, sm.m, unsorted, {}, &b).message(),
              ::testing::HasSubstr("sorted"));
  EXPECT_EQ(b, nullptr);
}

// The --ffn-backend flag of pi-run, pi-bench and pi-perplexity.
TEST(BackendFactoryTest, Flag) {
  const char* ok_argv[] = {"tool", "--ffn-backend", "host"};
  ArgReader ok_args("tool", 3, const_cast<char**>(ok_argv));
  GpuSplitFlags flags;
  EXPECT_EQ(flags.ffn_backend, "auto");
  const std::string f = ok_args.Next();
  EXPECT_TRUE(ParseGpuSplitFlag(f, &ok_args, &flags));
  EXPECT_FALSE(ok_args.failed());
  EXPECT_EQ(flags.ffn_backend, "host");

  const char* bad_argv[] = {"tool", "--ffn-backend", "gpu"};
  ArgReader bad_args("tool", 3, const_cast<char**>(bad_argv));
  const std::string f2 = bad_args.Next();
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(ParseGpuSplitFlag(f2, &bad_args, &flags));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(bad_args.failed());
  EXPECT_THAT(err, ::testing::HasSubstr("auto, cuda or host"));
  EXPECT_THAT(std::string(kGpuSplitUsage), ::testing::HasSubstr("--ffn-backend"));
}

}  // namespace
}  // namespace pi

// CreateFfnBackend (--ffn-backend): "host" works everywhere, "cuda" exactly
// where this build has CUDA and the machine an NVIDIA device (told apart here
// by the driver's device nodes, not by asking CUDA), otherwise an error that
// says why; "auto" follows; anything else is rejected. Runs on every machine.
#include "gpu_worker/ffn_backend_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/gpu_split.h"
#include "common/synthetic_model.h"
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

TEST(FfnBackendFactoryTest, HostComputesTheHotPart) {
  std::unique_ptr<FfnBackend> b;
  ASSERT_TRUE(CreateFfnBackend("host", 2, &b).ok());
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->name(), "host");

  // A real step: one hot neuron, y = act * down_t[id] against a double evaluation.
  SyntheticModelOptions o;
  o.n_ff = 64;
  o.activation = "relu";
  o.down_t = true;
  const std::string path = TempPath("factory.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
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
  ASSERT_TRUE(b->Load(m, hot).ok());
  std::vector<float> y(d, 99.0f);
  b->Start(0, x.data(), y.data());
  EXPECT_EQ(b->Wait(), 1);
  for (int64_t c = 0; c < d; ++c) {
    ASSERT_NEAR(y[c], g * u * down[c], 1e-4 * std::fabs(g * u) + 1e-6) << c;
  }
}

TEST(FfnBackendFactoryTest, CudaOnlyWhereBuiltAndPresent) {
  std::unique_ptr<FfnBackend> b;
  const Status s = CreateFfnBackend("cuda", 1, &b);
  std::string why;
  const bool available = CudaFfnBackendAvailable(&why);
  if (BuiltWithCuda() && MachineHasNvidiaDevice()) {
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_STREQ(b->name(), "cuda");
    EXPECT_TRUE(available);
  } else {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(b, nullptr);
    EXPECT_FALSE(available);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("cuda is not available"));
    EXPECT_THAT(s.message(),
                ::testing::HasSubstr(BuiltWithCuda() ? "CUDA device" : "no CUDA support"));
    EXPECT_THAT(s.message(), ::testing::HasSubstr(why));
  }
}

TEST(FfnBackendFactoryTest, AutoPicksCudaOnlyWhereAvailable) {
  std::unique_ptr<FfnBackend> b;
  ASSERT_TRUE(CreateFfnBackend("auto", 1, &b).ok());
  EXPECT_STREQ(b->name(), BuiltWithCuda() && MachineHasNvidiaDevice() ? "cuda" : "host");
}

TEST(FfnBackendFactoryTest, RejectsUnknownKinds) {
  std::unique_ptr<FfnBackend> b;
  Status s = CreateFfnBackend("bogus", 1, &b);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'bogus'"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("auto, cuda or host"));
  EXPECT_EQ(b, nullptr);
  EXPECT_FALSE(CreateFfnBackend("", 1, &b).ok());
  EXPECT_FALSE(CreateFfnBackend("host", 0, &b).ok());
}

// The --ffn-backend flag of pi-run, pi-bench and pi-perplexity.
TEST(FfnBackendFactoryTest, Flag) {
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

// Memory and disk limits (common/base/memory_limits.h), the SIGBUS report for a
// truncated mapped file (common/base/mapped_files.h) and --check-tensors'
// validation (common/format/tensor_check.h).
#include "common/base/memory_limits.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/base/mapped_files.h"
#include "common/format/gguf.h"
#include "common/format/tensor_check.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

TEST(MemoryLimits, ParsesMeminfo) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n";
  EXPECT_EQ(ParseMemAvailable(meminfo), int64_t{20000000} * 1024);
  EXPECT_EQ(ParseMemAvailable("MemTotal: 5 kB\n"), -1);
  EXPECT_EQ(ParseStatusKb("Name:\tx\nVmSize:\t  123456 kB\nVmData:\t 42 kB\n", "VmSize"),
            int64_t{123456} * 1024);
  EXPECT_EQ(ParseStatusKb("Name:\tx\nVmSize:\t  123456 kB\nVmData:\t 42 kB\n", "VmData"),
            int64_t{42} * 1024);
  // A key inside another line is not the key.
  EXPECT_EQ(ParseStatusKb("XVmSize: 9 kB\n", "VmSize"), -1);
  EXPECT_EQ(ParseStatusKb("VmSize: lots\n", "VmSize"), -1);
}

TEST(MemoryLimits, ParsesCgroupLimits) {
  EXPECT_EQ(ParseCgroupLimit("max\n"), INT64_MAX);
  EXPECT_EQ(ParseCgroupLimit("1073741824\n"), int64_t{1} << 30);
  EXPECT_EQ(ParseCgroupLimit("9223372036854771712\n"), INT64_MAX);  // v1's "no limit"
  EXPECT_EQ(ParseCgroupLimit(""), -1);
  EXPECT_EQ(ParseCgroupLimit("-5"), -1);
}

TEST(MemoryLimits, FormatsBytes) {
  EXPECT_EQ(HumanBytes(12), "12 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(HumanBytes(int64_t{200} << 40), "200.00 TiB");
  EXPECT_EQ(HumanBytes(int64_t{1} << 60), "1.00 EiB");
  EXPECT_EQ(HumanBytes(-2048), "-2.00 KiB");
}

TEST(MemoryLimits, RefusesWhatCannotFit) {
  EXPECT_TRUE(CheckMemory("a small buffer", 4096).ok());
  const Status s = CheckMemory("the KV cache for -c 9", int64_t{1} << 60);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("the KV cache for -c 9 needs 1.00 EiB of memory"));
  EXPECT_THAT(CheckMemory("x", -1).message(), HasSubstr("more memory than can be addressed"));
}

// An address-space limit (ulimit -v) is what remains of it, and it is named.
TEST(MemoryLimits, ReadsTheAddressSpaceLimit) {
  EXPECT_EXIT(
      {
        const MemoryAvailable before = AvailableMemory();
        FILE* f = fopen("/proc/self/status", "re");
        char buf[8192];
        const size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        const int64_t vm = ParseStatusKb(std::string(buf, n), "VmSize");
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(vm + (int64_t{256} << 20));
        if (vm < 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        const MemoryAvailable after = AvailableMemory();
        const bool named = after.source == "ulimit -v";
        const bool bounded = after.bytes <= (int64_t{256} << 20) && after.bytes > (100 << 20);
        const Status s = CheckMemory("the test's ask", int64_t{1} << 30);
        const bool refused = !s.ok() && s.message().find("(ulimit -v)") != std::string::npos;
        _exit(named && bounded && refused && before.bytes > after.bytes ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MemoryLimits, RefusesWhatCannotBeWritten) {
  const std::string dir = ::testing::TempDir();
  EXPECT_GT(FreeDiskBytes(dir), 0);
  EXPECT_GT(FreeDiskBytes(dir + "/not-there-yet.gguf"), 0);  // its directory is asked
  EXPECT_TRUE(CheckDiskSpace("writing a.gguf", dir + "/a.gguf", 4096).ok());
  const Status s = CheckDiskSpace("writing a.gguf", dir + "/a.gguf", int64_t{1} << 62);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("writing a.gguf needs 4.00 EiB of disk, but only"));
}

// The writer checks the space a file's tensors need before writing any.
TEST(MemoryLimits, WriterReservesTheDiskItNeeds) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  // A tensor of 2^61 bytes: its bytes are never produced, the check comes first.
  ASSERT_TRUE(w.AddTensorFill("huge", DType::kF32, {int64_t{1} << 59}, [](void*) {
                 return Status::Error("must not be filled");
               }).ok());
  const std::string path = TempPath("huge.gguf");
  const Status s = w.Write(path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("of disk, but only"));
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

// A mapped file truncated by another program: the SIGBUS that follows is
// reported with the file's name and exit status 1.
TEST(MappedFiles, TruncatedModelIsNamed) {
  const std::string path = TempPath("truncated.gguf");
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  std::vector<float> values(1 << 16, 1.0f);  // 256 KiB: several pages past the header
  ASSERT_TRUE(w.AddTensor("t", DType::kF32, {1 << 16}, values.data()).ok());
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_EXIT(
      {
        InstallMappedFileFaultHandler("pi-test");
        std::unique_ptr<GgufFile> f;
        if (!GgufFile::Open(path, &f).ok()) _exit(3);
        if (truncate(path.c_str(), 4096) != 0) _exit(4);
        const TensorInfo* t = f->FindTensor("t");
        volatile uint8_t sink = t->data[t->nbytes - 1];  // beyond the new end: SIGBUS
        (void)sink;
        _exit(5);
      },
      ::testing::ExitedWithCode(1), "pi-test: .*truncated.gguf changed size while mapped");
  unlink(path.c_str());
}

TEST(MappedFiles, LooksUpRegisteredRanges) {
  static uint8_t region[256];
  const int slot = RegisterMappedFile(region, sizeof region, "/models/a.gguf");
  ASSERT_GE(slot, 0);
  EXPECT_STREQ(MappedFileAt(region + 255), "/models/a.gguf");
  EXPECT_EQ(MappedFileAt(region + 256), nullptr);
  UnregisterMappedFile(slot);
  EXPECT_EQ(MappedFileAt(region), nullptr);
}

// --check-tensors: a NaN, an infinity or a quantized block whose scale is
// not finite is named with its tensor, row and element.
TEST(TensorCheck, NamesTheFirstBadValue) {
  auto check = [](DType type, const std::vector<int64_t>& ne, const std::vector<uint8_t>& bytes) {
    GgufWriter w;
    w.Set("general.architecture", GgufValue::String("llama"));
    EXPECT_TRUE(w.AddTensor("good", DType::kF32, {4}, std::vector<float>(4, 0.5f).data()).ok());
    EXPECT_TRUE(w.AddTensor("blk.1.ffn_up.weight", type, ne, bytes.data()).ok());
    const std::vector<uint8_t> file = w.Serialize();
    std::unique_ptr<GgufFile> f;
    EXPECT_TRUE(GgufFile::OpenBuffer(file.data(), file.size(), &f).ok());
    return CheckTensorValues(*f, false);
  };
  std::vector<float> f32(3 * 8, 1.0f);
  auto bytes_of = [](const std::vector<float>& v) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                reinterpret_cast<const uint8_t*>(v.data() + v.size()));
  };
  EXPECT_TRUE(check(DType::kF32, {8, 3}, bytes_of(f32)).ok());
  f32[2 * 8 + 5] = std::nanf("");
  Status s = check(DType::kF32, {8, 3}, bytes_of(f32));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'blk.1.ffn_up.weight' [8, 3]: row 2, element 5 is NaN"));
  f32[2 * 8 + 5] = 1.0f;
  f32[1 * 8 + 0] = -INFINITY;
  EXPECT_THAT(check(DType::kF32, {8, 3}, bytes_of(f32)).message(),
              HasSubstr("row 1, element 0 is infinite"));

  // Q8_0: two rows of one block; the second block's scale is +inf.
  std::vector<float> row(32, 0.25f);
  std::vector<uint8_t> q8(2 * sizeof(BlockQ8_0));
  QuantizeRow(DType::kQ8_0, row.data(), q8.data(), 32);
  QuantizeRow(DType::kQ8_0, row.data(), q8.data() + sizeof(BlockQ8_0), 32);
  EXPECT_TRUE(check(DType::kQ8_0, {32, 2}, q8).ok());
  reinterpret_cast<BlockQ8_0*>(q8.data())[1].d = 0x7c00;  // f16 +inf
  EXPECT_THAT(check(DType::kQ8_0, {32, 2}, q8).message(),
              HasSubstr("row 1, element 0 is infinite"));
}

}  // namespace
}  // namespace pi

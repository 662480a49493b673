// The tools' inputs: ArgReader's value parsing (sizes with suffixes, and the
// inputs that must fail with a message instead of being coerced: overflow
// that would wrap negative, non-finite numbers, trailing garbage), and input
// files that are directories or FIFOs (an error at once, never a hang or an
// empty prompt).
#include "cli/args.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <new>
#include <stdexcept>

#include "cli/read_file.h"
#include "cli/tool_main.h"
#include "common/format/gguf.h"
#include "tests/temp_path.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pi {
namespace {

// Parses `value` as flag --x with `parse`; *failed tells whether it failed.
template <typename T, typename Parse>
T ParseOne(const std::string& value, Parse parse, bool* failed) {
  std::vector<std::string> args = {"tool", "--x", value};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ArgReader r("tool", static_cast<int>(argv.size()), argv.data());
  r.Next();
  const T v = parse(&r);
  *failed = r.failed();
  return v;
}

int64_t Bytes(const std::string& v, bool* failed) {
  return ParseOne<int64_t>(
      v, [](ArgReader* r) { return r->Bytes("--x"); }, failed);
}

TEST(ArgReader, SizesWithSuffixes) {
  bool failed = true;
  EXPECT_EQ(Bytes("512", &failed), 512);
  EXPECT_FALSE(failed);
  EXPECT_EQ(Bytes("64K", &failed), 64 << 10);
  EXPECT_EQ(Bytes("6M", &failed), 6 << 20);
  EXPECT_EQ(Bytes("11G", &failed), int64_t{11} << 30);
  EXPECT_EQ(Bytes("1.5GiB", &failed), int64_t{3} << 29);
  EXPECT_EQ(Bytes("2T", &failed), int64_t{2} << 40);
  EXPECT_EQ(Bytes("0", &failed), 0);
  EXPECT_FALSE(failed);
}

TEST(ArgReader, SizesThatMustFail) {
  // 16777216T is 2^64 bytes: converted, it wrapped to a negative budget,
  // which silently meant "no split".
  for (const char* bad :
       {"16777216T", "1e300", "inf", "nan", "-1", "-0.5G", "12X", "G", "", "1G1"}) {
    bool failed = false;
    EXPECT_EQ(Bytes(bad, &failed), 0) << bad;
    EXPECT_TRUE(failed) << bad;
  }
  bool failed = true;
  EXPECT_EQ(Bytes("4096P", &failed), 0);  // an unknown suffix
  EXPECT_TRUE(failed);
  EXPECT_GT(Bytes("4194304T", &failed), 0);  // 2^62: the largest accepted
  EXPECT_FALSE(failed);
}

int64_t Budget(const std::string& v, bool* failed) {
  return ParseOne<int64_t>(
      v, [](ArgReader* r) { return r->VramBudget("--vram-budget"); }, failed);
}

// The original's --vram-budget: a bare number is GiB; "auto" and -1 ask for
// the device's free memory; suffixes as for every size, B for bytes.
TEST(ArgReader, VramBudgetsAsTheOriginalReadsThem) {
  bool failed = true;
  EXPECT_EQ(Budget("8", &failed), int64_t{8} << 30);
  EXPECT_FALSE(failed);
  EXPECT_EQ(Budget("0.5", &failed), int64_t{1} << 29);
  EXPECT_EQ(Budget("8G", &failed), int64_t{8} << 30);
  EXPECT_EQ(Budget("8GiB", &failed), int64_t{8} << 30);
  EXPECT_EQ(Budget("512M", &failed), int64_t{512} << 20);
  EXPECT_EQ(Budget("4096B", &failed), 4096);
  EXPECT_EQ(Budget("0", &failed), 0);
  EXPECT_FALSE(failed);
  EXPECT_EQ(Budget("-1", &failed), ArgReader::kVramBudgetAuto);
  EXPECT_EQ(Budget("auto", &failed), ArgReader::kVramBudgetAuto);
  EXPECT_FALSE(failed);
  for (const char* bad : {"-2", "abc", "4096Bi", "8GG", "", "inf", "16777216T"}) {
    failed = false;
    Budget(bad, &failed);
    EXPECT_TRUE(failed) << bad;
  }
  EXPECT_EQ(Bytes("4096B", &failed), 4096);  // "B" reads as bytes everywhere
  EXPECT_FALSE(failed);
}

TEST(ArgReader, NumbersThatMustFail) {
  for (const char* bad : {"nan", "inf", "-inf", "1e39", "abc", "1.5x"}) {
    bool failed = false;
    ParseOne<float>(
        bad, [](ArgReader* r) { return r->Float("--x"); }, &failed);
    EXPECT_TRUE(failed) << bad;
  }
  for (const char* bad : {"99999999999999999999", "2147483648", "1.5", "", "7e3"}) {
    bool failed = false;
    ParseOne<int>(
        bad, [](ArgReader* r) { return r->Int("--x"); }, &failed);
    EXPECT_TRUE(failed) << bad;
  }
}

TEST(InputFiles, DirectoriesAndFifosAreErrorsNotHangs) {
  const std::string dir = TempPath("inputs");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  std::string text;
  EXPECT_NE(ReadWholeFile(dir, &text).message().find("is a directory"), std::string::npos);
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_NE(ReadWholeFile(fifo, &text).message().find("not a regular file"), std::string::npos);
  std::unique_ptr<GgufFile> f;
  EXPECT_NE(GgufFile::Open(fifo, &f).message().find("not a regular file"), std::string::npos);
  EXPECT_NE(GgufFile::Open(dir, &f).message().find("not a regular file"), std::string::npos);
  EXPECT_NE(ReadWholeFile(dir + "/missing", &text).message().find("No such file"),
            std::string::npos);
  const std::string file = dir + "/prompt.txt";
  FILE* out = fopen(file.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  fputs("In the beginning\n", out);
  fclose(out);
  ASSERT_TRUE(ReadWholeFile(file, &text).ok());
  EXPECT_EQ(text, "In the beginning\n");
}

// What escapes a tool's body becomes a message and exit status 1, not an
// abort: an allocation failure and any other exception.
TEST(RunTool, CatchesWhatEscapesTheBody) {
  char name[] = "pi-test";
  char* argv[] = {name, nullptr};
  testing::internal::CaptureStderr();
  const int oom = RunTool(
      "pi-test", [](int, char**) -> int { throw std::bad_alloc(); }, 1, argv);
  const std::string oom_message = testing::internal::GetCapturedStderr();
  EXPECT_EQ(oom, 1);
  EXPECT_NE(oom_message.find("pi-test: out of memory"), std::string::npos) << oom_message;
  testing::internal::CaptureStderr();
  const int other = RunTool(
      "pi-test", [](int, char**) -> int { throw std::runtime_error("vector::_M_range_check"); }, 1,
      argv);
  const std::string other_message = testing::internal::GetCapturedStderr();
  EXPECT_EQ(other, 1);
  EXPECT_NE(other_message.find("pi-test: internal error: vector::_M_range_check"),
            std::string::npos);
  EXPECT_EQ(RunTool(
                "pi-test", [](int argc, char**) { return argc + 4; }, 1, argv),
            5);
}

// Outputs are checked before the work: special files and missing folders are
// refused, a new file in an existing folder is fine.
TEST(RunTool, ChecksOutputsFirst) {
  const std::string dir = TempPath("outputs");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(CheckOutputs("pi-test", {dir + "/new.gguf", ""}));
  EXPECT_FALSE(CheckOutputs("pi-test", {dir + "/new.gguf", "/dev/null"}));
  EXPECT_FALSE(CheckOutputs("pi-test", {dir}));
  EXPECT_FALSE(CheckOutputs("pi-test", {dir + "/no/such/folder/x.gguf"}));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("pi-test: /dev/null exists and is a character device"), std::string::npos)
      << err;
  EXPECT_NE(err.find("exists and is a directory"), std::string::npos) << err;
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

}  // namespace
}  // namespace pi

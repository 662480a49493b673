// Status: codes survive context, an error is never OK, and the failures the
// code classifies carry their code (a timeout, a missing file, memory).
#include "common/base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/base/mapped_files.h"
#include "common/base/memory_limits.h"

namespace pi {
namespace {

TEST(StatusTest, EachConstructorGivesItsCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().code(), Status::Code::kOk);
  const struct {
    Status s;
    Status::Code code;
    const char* name;
  } cases[] = {
      {Status::Error("e %d", 1), Status::Code::kError, "error"},
      {Status::Invalid("e %d", 1), Status::Code::kInvalid, "invalid"},
      {Status::NotFound("e %d", 1), Status::Code::kNotFound, "not found"},
      {Status::Io("e %d", 1), Status::Code::kIo, "io"},
      {Status::Resource("e %d", 1), Status::Code::kResource, "resource"},
      {Status::Unsupported("e %d", 1), Status::Code::kUnsupported, "unsupported"},
      {Status::Lost("e %d", 1), Status::Code::kLost, "lost"},
      {Status::Timeout("e %d", 1), Status::Code::kTimeout, "timeout"},
      {Status::Internal("e %d", 1), Status::Code::kInternal, "internal"},
  };
  for (const auto& c : cases) {
    EXPECT_FALSE(c.s.ok()) << c.name;
    EXPECT_EQ(c.s.code(), c.code) << c.name;
    EXPECT_EQ(c.s.message(), "e 1") << c.name;
    EXPECT_STREQ(Status::CodeName(c.code), c.name);
  }
}

TEST(StatusTest, ContextKeepsTheCodeAndAnErrorIsNeverOk) {
  const Status s = Status::Lost("killed by signal 9").WithContext("cpu worker 12");
  EXPECT_EQ(s.code(), Status::Code::kLost);
  EXPECT_EQ(s.message(), "cpu worker 12: killed by signal 9");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
  // A wire reply claiming "ok" for an error is still an error.
  const Status forged = Status::FromCode(Status::Code::kOk, "refused");
  EXPECT_FALSE(forged.ok());
  EXPECT_EQ(forged.code(), Status::Code::kError);
  EXPECT_EQ(Status::FromCode(Status::Code::kInternal, "cuda").code(), Status::Code::kInternal);
  // Codes off the wire: each known one as it is, anything else a plain error.
  for (uint32_t v = 0; v <= static_cast<uint32_t>(Status::Code::kInternal); ++v)
    EXPECT_EQ(static_cast<uint32_t>(Status::CodeFromWire(v)), v);
  EXPECT_EQ(Status::CodeFromWire(200), Status::Code::kError);
}

TEST(StatusTest, FilesAndMemoryFailWithTheirCodes) {
  std::unique_ptr<MappedRegion> region;
  const Status missing = MappedRegion::Map("/nonexistent/pi-status-test", &region);
  EXPECT_EQ(missing.code(), Status::Code::kNotFound) << missing.message();
  const Status dir = MappedRegion::Map("/", &region);
  EXPECT_EQ(dir.code(), Status::Code::kInvalid) << dir.message();
  const Status huge = CheckMemory("a test buffer", int64_t{1} << 62);
  EXPECT_EQ(huge.code(), Status::Code::kResource) << huge.message();
}

}  // namespace
}  // namespace pi

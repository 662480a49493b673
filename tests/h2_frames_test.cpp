// H2FrameScanner against frames built here by hand (RFC 9113 §4.1: a 24-bit
// length, type, flags, a 31-bit stream id), fed whole and split at every byte
// boundary; a connection that does not begin with the client preface; and
// TokenBucket's burst and refill.
#include "common/transport/h2_frames.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pi {
namespace {

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  f += static_cast<char>(payload.size() >> 16);
  f += static_cast<char>(payload.size() >> 8);
  f += static_cast<char>(payload.size());
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>((stream >> 24) & 0x7f);
  f += static_cast<char>(stream >> 16);
  f += static_cast<char>(stream >> 8);
  f += static_cast<char>(stream);
  return f + payload;
}

struct Seen {
  std::vector<H2FrameScanner::Frame> frames;
  static void On(void* self, const H2FrameScanner::Frame& f) {
    static_cast<Seen*>(self)->frames.push_back(f);
  }
};

TEST(H2FrameScannerTest, FramesWholeAndSplitAtEveryByte) {
  const std::string bytes = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                            Frame(kH2Settings, 0, 0, std::string(12, '\0')) +
                            Frame(kH2Headers, 4, 1, std::string(40, 'h')) +
                            Frame(kH2Data, 1, 1, std::string(70000, 'd')) +
                            Frame(kH2RstStream, 0, 0x80000003u, std::string(4, '\0')) +
                            Frame(kH2Settings, 1, 0, "");
  for (size_t split = 0; split <= bytes.size(); split += split < 200 ? 1 : 997) {
    H2FrameScanner scanner;
    Seen seen;
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    ASSERT_TRUE(scanner.Feed(p, split, &Seen::On, &seen));
    ASSERT_TRUE(scanner.Feed(p + split, bytes.size() - split, &Seen::On, &seen));
    ASSERT_EQ(seen.frames.size(), 5u) << "split at " << split;
    EXPECT_EQ(seen.frames[0].type, kH2Settings);
    EXPECT_EQ(seen.frames[0].length, 12u);
    EXPECT_EQ(seen.frames[1].type, kH2Headers);
    EXPECT_EQ(seen.frames[1].stream, 1u);
    EXPECT_EQ(seen.frames[2].length, 70000u);
    EXPECT_EQ(seen.frames[2].flags, 1);
    EXPECT_EQ(seen.frames[3].type, kH2RstStream);
    EXPECT_EQ(seen.frames[3].stream, 3u);  // the reserved bit dropped
    EXPECT_EQ(seen.frames[4].flags, 1);    // an ACK
  }
}

TEST(H2FrameScannerTest, NotHttp2) {
  H2FrameScanner scanner;
  Seen seen;
  const std::string http1 = "GET / HTTP/1.1\r\n\r\n";
  EXPECT_FALSE(
      scanner.Feed(reinterpret_cast<const uint8_t*>(http1.data()), http1.size(), &Seen::On, &seen));
  EXPECT_FALSE(scanner.Feed(reinterpret_cast<const uint8_t*>("PRI"), 3, &Seen::On, &seen));
  EXPECT_TRUE(seen.frames.empty());
}

TEST(TokenBucketTest, BurstThenRate) {
  TokenBucket b(10, 5);  // 10 a second after a burst of 5
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.Take(100.0));
  EXPECT_FALSE(b.Take(100.0));
  EXPECT_FALSE(b.Take(100.05));  // half a token back
  EXPECT_TRUE(b.Take(100.15));   // 1.5 tokens back, one taken
  EXPECT_FALSE(b.Take(100.15));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.Take(200.0));  // refilled to the burst, no more
  EXPECT_FALSE(b.Take(200.0));
}

}  // namespace
}  // namespace pi

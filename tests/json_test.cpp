// JsonEscape: what --json reports write for text. JSON text must be UTF-8,
// so bytes that are not (a byte-token model's output, a binary prompt) are
// written as U+FFFD; valid UTF-8 passes through; control characters, quotes
// and backslashes are escaped.
#include <gtest/gtest.h>

#include <cmath>

#include "common/text/json.h"

namespace pi {
namespace {

TEST(JsonTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonEscape("a\"b\\c\nd\te\r\x01"), "\"a\\\"b\\\\c\\nd\\te\\r\\u0001\"");
}

TEST(JsonTest, ValidUtf8PassesThrough) {
  const std::string text = "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";  // é 中 😀
  EXPECT_EQ(JsonEscape(text), "\"" + text + "\"");
}

TEST(JsonTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(JsonEscape("a\xff"
                       "b"),
            "\"a" + fffd + "b\"");                                 // never valid
  EXPECT_EQ(JsonEscape("\xc3(x"), "\"" + fffd + "(x\"");           // a lead byte, no continuation
  EXPECT_EQ(JsonEscape("x\xe2\x82"), "\"x" + fffd + fffd + "\"");  // cut short at the end
  EXPECT_EQ(JsonEscape("\xc0\xaf"), "\"" + fffd + fffd + "\"");    // overlong '/'
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), "\"" + fffd + fffd + fffd + "\"");  // a surrogate
}

TEST(JsonTest, NumbersNeverNanOrInf) {
  EXPECT_EQ(JsonNumber(1.5), "1.5");
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(HUGE_VAL), "null");
  EXPECT_EQ(JsonIntArray({1, -2, 3}), "[1,-2,3]");
}

}  // namespace
}  // namespace pi

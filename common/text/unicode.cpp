#include "common/text/unicode.h"

#include <algorithm>
#include <iterator>

namespace pi {
namespace {

struct CodepointRange {
  uint32_t first;
  uint32_t last;
};

#include "common/text/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodepointRange (&ranges)[N], uint32_t cp) {
  // First range whose last >= cp; cp is inside if that range starts at or before it.
  const CodepointRange* it =
      std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                       [](const CodepointRange& r, uint32_t value) { return r.last < value; });
  return it != std::end(ranges) && it->first <= cp;
}

bool IsContinuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

}  // namespace

Utf8Status DecodeUtf8(const char* s, size_t size, size_t pos, uint32_t* cp, size_t* len) {
  *cp = 0xFFFD;
  *len = 1;
  const auto* p = reinterpret_cast<const uint8_t*>(s) + pos;
  const size_t avail = size - pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return Utf8Status::kValid;
  }
  size_t n;
  uint32_t value;
  // Allowed range of the second byte; it excludes overlongs (E0, F0), surrogates (ED)
  // and code points past U+10FFFF (F4), as in the Unicode standard's table 3-7.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    value = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    value = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return Utf8Status::kInvalid;
  }
  for (size_t k = 1; k < n; ++k) {
    if (k >= avail) return Utf8Status::kIncomplete;
    const uint8_t b = p[k];
    if (k == 1 ? (b < lo || b > hi) : !IsContinuation(b)) return Utf8Status::kInvalid;
    value = (value << 6) | (b & 0x3F);
  }
  *cp = value;
  *len = n;
  return Utf8Status::kValid;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeLetter(uint32_t cp) {
  return InRanges(kLetterRanges, cp);
}

bool IsUnicodeNumber(uint32_t cp) {
  return InRanges(kNumberRanges, cp);
}

bool IsUnicodePunctuation(uint32_t cp) {
  return InRanges(kPunctuationRanges, cp);
}

bool IsUnicodeWhitespace(uint32_t cp) {
  // The White_Space property (PropList.txt); unchanged since Unicode 6.3.
  static const CodepointRange kWhitespace[] = {
      {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
      {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
  };
  return InRanges(kWhitespace, cp);
}

}  // namespace pi

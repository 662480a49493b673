// UTF-8 decoding/encoding and the few Unicode properties the tokenizers need.
//
// Categories follow the regex classes of the BPE pre-tokenizers: \p{L} (letters),
// \p{N} (numbers), \p{P} (punctuation) and \s (the White_Space property). Tables are generated from
// Python's unicodedata by tools/gen_unicode_tables.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pi {

// Result of looking at one UTF-8 sequence.
enum class Utf8Status {
  kValid,       // a complete, well-formed sequence (no overlongs, surrogates or > U+10FFFF)
  kIncomplete,  // the bytes so far are a valid start but the input ends too early
  kInvalid,     // the byte at `pos` cannot start a well-formed sequence here
};

// Decodes the sequence starting at s[pos] (pos < size). On kValid sets *cp and *len; on
// kIncomplete and kInvalid sets *cp = U+FFFD and *len = 1.
Utf8Status DecodeUtf8(const char* s, size_t size, size_t pos, uint32_t* cp, size_t* len);

// Appends the UTF-8 encoding of `cp` (U+FFFD for surrogates and values past U+10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

bool IsUnicodeLetter(uint32_t cp);       // \p{L}: Lu Ll Lt Lm Lo
bool IsUnicodeNumber(uint32_t cp);       // \p{N}: Nd Nl No
bool IsUnicodePunctuation(uint32_t cp);  // \p{P}: Pc Pd Ps Pe Pi Pf Po
bool IsUnicodeWhitespace(uint32_t cp);   // \s: the White_Space property

}  // namespace pi

// Minimal JSON output helpers for --json reports and benchmark files:
// string escaping (valid UTF-8 passed through, control characters escaped,
// bytes that are not UTF-8 — a byte-token model's output, a binary prompt —
// written as U+FFFD, since JSON text must be UTF-8) and
// number formatting that never prints nan/inf (JSON has neither).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pi {

std::string JsonEscape(const std::string& s);  // with the surrounding quotes
std::string JsonNumber(double v);
std::string JsonIntArray(const std::vector<int32_t>& v);

}  // namespace pi

// Minimal JSON output helpers for --json reports and benchmark files:
// string escaping (UTF-8 passed through, control characters escaped) and
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

// How fast the GPU streams its own memory: the ceiling for every kernel on
// the decode path (each weight byte is read once per token). Reads a buffer
// many times larger than the L2 with 16-byte loads from every SM and reports
// the best of a few passes, timed with CUDA events.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
#pragma once

#include <cstdint>
#include <string>

namespace pi {
namespace cuda {

// GB/s (1e9 bytes/s) read by the best of `passes` passes over a buffer of
// `bytes` on the current device; a negative value with *error set on failure
// (no device, out of memory).
double MeasureReadBandwidthGBs(int64_t bytes, int passes, std::string* error);

}  // namespace cuda
}  // namespace pi

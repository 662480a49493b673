// The GPU's own read bandwidth for reports (pi-bench's time model), in any
// build: 0 with the reason where this build has no CUDA or no device.
#pragma once

#include <string>

namespace pi {

// GB/s read from the current device's memory (kernels/cuda/bandwidth.h:
// 2 GiB, best of 5 passes); 0 with *why set when it cannot be measured.
double MeasureGpuReadBandwidthGBs(std::string* why);

}  // namespace pi

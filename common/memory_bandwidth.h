// MemoryBandwidthProbe: how fast this machine streams memory into the cores,
// the ceiling for decode (which reads every weight once per token). It sums
// a buffer far larger than the caches with the given threads and reports the
// best of a few passes in GB/s (1e9 bytes/s).
#pragma once

#include <cstdint>

#include "common/thread_pool.h"

namespace pi {

double MeasureReadBandwidthGBs(ThreadPool* pool, int64_t buffer_bytes = int64_t{512} << 20,
                               int passes = 5);

}  // namespace pi

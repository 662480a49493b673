// MemoryBandwidthProbe: how fast this machine streams memory into the cores,
// the ceiling for decode (which reads every weight once per token). As many
// threads as the pool has (threads of the probe's own) each sum their own
// slice of a buffer far larger than the caches, all at once; the best of a
// few passes is reported in GB/s (1e9 bytes/s). The buffer is at least
// `buffer_bytes`, 64 MiB per thread and twice the last-level cache.
#pragma once

#include <cstdint>

#include "common/base/thread_pool.h"

namespace pi {

double MeasureReadBandwidthGBs(ThreadPool* pool, int64_t buffer_bytes = int64_t{512} << 20,
                               int passes = 5);

}  // namespace pi

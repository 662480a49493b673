// Which shard holds the hot neurons (--ffn-backend auto|cuda|host):
//   "cuda"  CudaHotShard; an error, saying why, when this build has no CUDA
//           support, no device is present or the driver fails
//   "host"  HostHotShard (host memory, its own n_threads threads)
//   "auto"  cuda when built with CUDA and a device is present, else host
// The caller reports the shard's backend(): it is never swapped silently.
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "common/shard/shard.h"

namespace pi {

// The hot shard of `kind`, loaded with hot_ids (sorted, unique, < n_ff per
// layer) of `model`, which must outlive it.
Status LoadHotShard(const std::string& kind, int n_threads, const LlamaModel& model,
                    const std::vector<std::vector<int32_t>>& hot_ids, std::unique_ptr<Shard>* out);

// Whether "cuda" would be available (a hot shard or a device backend); otherwise *why says what is
// missing
// ("this build has no CUDA support ...", "no CUDA device", a driver error).
bool CudaAvailable(std::string* why);

// The CUDA device's free memory (false, saying why, where there is none).
bool CudaFreeMemory(int64_t* free_bytes, std::string* why);

// The GPU's DeviceBackend (common/shard/device_backend.h: attention, KV cache,
// predictor, hot neurons and head in VRAM): CudaModelBackend; an error,
// saying why, where "cuda" is not available.
Status CreateDeviceBackend(std::unique_ptr<DeviceBackend>* out);

}  // namespace pi

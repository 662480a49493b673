// What holds the GPU's share of a plan (--ffn-backend auto|cuda|host). A GPU
// holds whole layers (CreateDeviceBackend: attention, KV cache, predictor, hot
// neurons, head), never the hot neurons alone: a step of hot rows only would
// move the activation to the device and back for each layer's FFN, where the
// device path moves it once per token. The hot neurons alone (the split
// without a device) are HostHotShard's: host memory, its own threads.
// The caller reports the backend(): it is never swapped silently.
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "common/shard/shard.h"

namespace pi {

// The hot neurons hot_ids (sorted, unique, < n_ff per layer) of `model`,
// which must outlive the shard, on HostHotShard (gate_thresholds: --sparse
// cats' levels, one per layer, or none). kind "auto" or "host"; "cuda" is an
// error saying that a GPU takes whole layers.
Status LoadHotShard(const std::string& kind, int n_threads, const LlamaModel& model,
                    const std::vector<std::vector<int32_t>>& hot_ids,
                    const std::vector<float>& gate_thresholds, std::unique_ptr<Shard>* out);

// Whether a CUDA device backend would be available; otherwise *why says what
// is missing ("this build has no CUDA support ...", "no CUDA device", a
// driver error).
bool CudaAvailable(std::string* why);

// The CUDA device's free memory (false, saying why, where there is none).
bool CudaFreeMemory(int64_t* free_bytes, std::string* why);

// The GPU's DeviceBackend (common/shard/device_backend.h: attention, KV cache,
// predictor, hot neurons and head in VRAM): CudaModelBackend; an error,
// saying why, where "cuda" is not available.
Status CreateDeviceBackend(std::unique_ptr<DeviceBackend>* out);

}  // namespace pi

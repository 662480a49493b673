// Which FfnBackend holds the hot neurons (--ffn-backend auto|cuda|host):
//   "cuda"  CudaFfnBackend; an error, saying why, when this build has no CUDA
//           support, no device is present or the driver fails
//   "host"  HostFfnBackend (host memory, its own n_threads threads)
//   "auto"  cuda when built with CUDA and a device is present, else host
// The caller reports the backend's name(): it is never swapped silently.
#pragma once

#include <memory>
#include <string>

#include "common/device_backend.h"
#include "common/ffn_backend.h"
#include "common/status.h"

namespace pi {

Status CreateFfnBackend(const std::string& kind, int n_threads, std::unique_ptr<FfnBackend>* out);

// Whether "cuda" would be available; otherwise *why says what is missing
// ("this build has no CUDA support ...", "no CUDA device", a driver error).
bool CudaFfnBackendAvailable(std::string* why);

// The CUDA device's free memory (false, saying why, where there is none).
bool CudaFreeMemory(int64_t* free_bytes, std::string* why);

// The GPU's DeviceBackend (common/device_backend.h: attention, KV cache,
// predictor, hot neurons and head in VRAM): CudaModelBackend; an error,
// saying why, where "cuda" is not available.
Status CreateDeviceBackend(std::unique_ptr<DeviceBackend>* out);

}  // namespace pi

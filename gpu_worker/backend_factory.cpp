#include "gpu_worker/backend_factory.h"

#include "gpu_worker/host_hot_shard.h"

#ifdef PI_HAVE_CUDA
#include "gpu_worker/cuda_model_backend.h"
#include "kernels/cuda/matvec.h"
#endif

namespace pi {

bool CudaAvailable(std::string* why) {
#ifdef PI_HAVE_CUDA
  return cuda::DeviceAvailable(why);
#else
  if (why) *why = "this build has no CUDA support (configure with -DPI_CUDA=ON where nvcc is)";
  return false;
#endif
}

bool CudaFreeMemory(int64_t* free_bytes, std::string* why) {
  if (!CudaAvailable(why)) return false;
#ifdef PI_HAVE_CUDA
  int64_t total = 0;
  return cuda::DeviceMemory(free_bytes, &total, why);
#else
  (void)free_bytes;
  return false;
#endif
}

Status LoadHotShard(const std::string& kind, int n_threads, const LlamaModel& model,
                    const std::vector<std::vector<int32_t>>& hot_ids,
                    const std::vector<float>& gate_thresholds, std::unique_ptr<Shard>* out) {
  if (kind != "auto" && kind != "cuda" && kind != "host") {
    return Status::Error("unknown FFN backend '%s' (auto, cuda or host)", kind.c_str());
  }
  if (kind == "cuda") {
    return Status::Unsupported(
        "--ffn-backend cuda holds whole layers (the device path), not the hot neurons alone: "
        "those run on the host backend");
  }
  if (n_threads < 1) return Status::Error("hot neurons: %d threads", n_threads);
  auto shard = std::make_unique<HostHotShard>(n_threads);
  PI_RETURN_IF_ERROR(shard->Load(model, hot_ids, gate_thresholds));
  *out = std::move(shard);
  return Status::Ok();
}

Status CreateDeviceBackend(std::unique_ptr<DeviceBackend>* out) {
  std::string why;
  if (!CudaAvailable(&why)) return Status::Error("no GPU backend: %s", why.c_str());
#ifdef PI_HAVE_CUDA
  *out = std::make_unique<CudaModelBackend>();
  return Status::Ok();
#else
  return Status::Error("no GPU backend: this build has no CUDA support");
#endif
}

}  // namespace pi

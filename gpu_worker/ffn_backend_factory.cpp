#include "gpu_worker/ffn_backend_factory.h"

#include "gpu_worker/host_ffn_backend.h"

#ifdef PI_HAVE_CUDA
#include "gpu_worker/cuda_ffn_backend.h"
#include "gpu_worker/cuda_model_backend.h"
#include "kernels/cuda/matvec.h"
#endif

namespace pi {

bool CudaFfnBackendAvailable(std::string* why) {
#ifdef PI_HAVE_CUDA
  return cuda::DeviceAvailable(why);
#else
  if (why) *why = "this build has no CUDA support (configure with -DPI_CUDA=ON where nvcc is)";
  return false;
#endif
}

bool CudaFreeMemory(int64_t* free_bytes, std::string* why) {
  if (!CudaFfnBackendAvailable(why)) return false;
#ifdef PI_HAVE_CUDA
  int64_t total = 0;
  return cuda::DeviceMemory(free_bytes, &total, why);
#else
  (void)free_bytes;
  return false;
#endif
}

Status CreateFfnBackend(const std::string& kind, int n_threads, std::unique_ptr<FfnBackend>* out) {
  if (kind != "auto" && kind != "cuda" && kind != "host") {
    return Status::Error("unknown FFN backend '%s' (auto, cuda or host)", kind.c_str());
  }
  if (n_threads < 1) return Status::Error("FFN backend: %d threads", n_threads);
  std::string why;
  const bool cuda = kind != "host" && CudaFfnBackendAvailable(&why);
  if (kind == "cuda" && !cuda) {
    return Status::Error("--ffn-backend cuda is not available: %s", why.c_str());
  }
#ifdef PI_HAVE_CUDA
  if (cuda) {
    *out = std::make_unique<CudaFfnBackend>();
    return Status::Ok();
  }
#endif
  *out = std::make_unique<HostFfnBackend>(n_threads);
  return Status::Ok();
}

Status CreateDeviceBackend(std::unique_ptr<DeviceBackend>* out) {
  std::string why;
  if (!CudaFfnBackendAvailable(&why)) return Status::Error("no GPU backend: %s", why.c_str());
#ifdef PI_HAVE_CUDA
  *out = std::make_unique<CudaModelBackend>();
  return Status::Ok();
#else
  return Status::Error("no GPU backend: this build has no CUDA support");
#endif
}

}  // namespace pi

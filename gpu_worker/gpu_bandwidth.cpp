#include "gpu_worker/gpu_bandwidth.h"

#ifdef PI_HAVE_CUDA
#include "kernels/cuda/bandwidth.h"
#include "kernels/cuda/matvec.h"
#endif

namespace pi {

double MeasureGpuReadBandwidthGBs(std::string* why) {
#ifdef PI_HAVE_CUDA
  if (!cuda::DeviceAvailable(why)) return 0.0;
  const double gbs = cuda::MeasureReadBandwidthGBs(int64_t{2} << 30, 5, why);
  return gbs > 0 ? gbs : 0.0;
#else
  if (why) *why = "this build has no CUDA support";
  return 0.0;
#endif
}

}  // namespace pi

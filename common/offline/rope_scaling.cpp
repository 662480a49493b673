#include "common/offline/rope_scaling.h"

#include <cmath>

namespace pi {

std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& s, int rope_dims, double theta) {
  const double kTwoPi = 6.283185307179586;
  const double low_wavelength = s.original_context / s.low_freq_factor;
  const double high_wavelength = s.original_context / s.high_freq_factor;
  std::vector<float> factors(static_cast<size_t>(rope_dims / 2));
  for (int i = 0; i < rope_dims / 2; ++i) {
    const double wavelength = kTwoPi / std::pow(theta, -2.0 * i / rope_dims);
    double f = 1.0;
    if (wavelength > low_wavelength) {
      f = s.factor;
    } else if (wavelength >= high_wavelength) {
      const double smooth = (s.original_context / wavelength - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return factors;
}

}  // namespace pi

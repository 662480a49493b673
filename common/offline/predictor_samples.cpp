#include "common/offline/predictor_samples.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/base/memory_limits.h"

#include "kernels/cpu/fp16.h"

namespace pi {

int64_t PredictorSamples::Bytes(int n_layer, int n_embd, int n_ff, int64_t capacity) {
  const int64_t words = (n_ff + 63) / 64;
  return static_cast<int64_t>(n_layer) * capacity * (2 * n_embd + 8 * words);
}

PredictorSamples::~PredictorSamples() {
  if (base_) munmap(base_, mapped_);
}

Status PredictorSamples::Init(int n_layer, int n_embd, int n_ff, int64_t capacity,
                              const std::string& dir) {
  if (base_) return Status::Error("PredictorSamples::Init called twice");
  if (n_layer < 1 || n_embd < 1 || n_ff < 1 || capacity < 1) {
    return Status::Error(
        "predictor samples: bad shape (%d layers, n_embd %d, n_ff %d, %lld tokens)", n_layer,
        n_embd, n_ff, static_cast<long long>(capacity));
  }
  n_layer_ = n_layer;
  d_ = n_embd;
  ff_ = n_ff;
  words_ = (n_ff + 63) / 64;
  capacity_ = capacity;
  layer_bytes_ = capacity * (2 * static_cast<int64_t>(d_) + 8 * words_);
  mapped_ = static_cast<size_t>(Bytes(n_layer, n_embd, n_ff, capacity));

  const std::string what = "predictor samples of " + std::to_string(capacity) + " tokens";
  void* p = MAP_FAILED;
  if (dir.empty()) {
    PI_RETURN_IF_ERROR(CheckMemory(what, static_cast<int64_t>(mapped_)));
    p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    if (p == MAP_FAILED) {
      return Status::Error("predictor samples: cannot map %zu bytes: %s", mapped_, strerror(errno));
    }
  } else {
    PI_RETURN_IF_ERROR(
        CheckDiskSpace(what + " in '" + dir + "'", dir, static_cast<int64_t>(mapped_)));
    std::string tmpl = dir + "/.pi-predictor-samples-XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0) {
      return Status::Error("predictor samples: cannot create a file in '%s': %s", dir.c_str(),
                           strerror(errno));
    }
    unlink(name.data());  // gone when unmapped, also after a crash
    const int err = posix_fallocate(fd, 0, static_cast<off_t>(mapped_));
    if (err != 0) {
      close(fd);
      return Status::Error("predictor samples: cannot reserve %.1f MiB in '%s': %s",
                           mapped_ / 1048576.0, dir.c_str(), strerror(err));
    }
    p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_errno = errno;
    close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) {
      return Status::Error("predictor samples: cannot map %zu bytes of '%s': %s", mapped_,
                           dir.c_str(), strerror(map_errno));
    }
  }
  base_ = static_cast<uint8_t*>(p);
  n_h_.assign(n_layer_, 0);
  n_mask_.assign(n_layer_, 0);
  return Status::Ok();
}

uint16_t* PredictorSamples::H(int layer, int64_t t) const {
  return reinterpret_cast<uint16_t*>(base_ + layer * layer_bytes_) + t * d_;
}

uint64_t* PredictorSamples::Mask(int layer, int64_t t) const {
  uint8_t* masks = base_ + layer * layer_bytes_ + capacity_ * 2 * static_cast<int64_t>(d_);
  return reinterpret_cast<uint64_t*>(masks) + t * words_;
}

void PredictorSamples::OnFfnInput(int layer, int batch, const float* h) {
  for (int b = 0; b < batch && n_h_[layer] < capacity_; ++b) {
    uint16_t* out = H(layer, n_h_[layer]++);
    const float* in = h + static_cast<int64_t>(b) * d_;
    for (int j = 0; j < d_; ++j) out[j] = F32ToF16(in[j]);
  }
}

void PredictorSamples::OnFfn(int layer, int batch, const float* act) {
  for (int b = 0; b < batch && n_mask_[layer] < capacity_; ++b) {
    uint64_t* m = Mask(layer, n_mask_[layer]++);
    std::fill(m, m + words_, 0);
    const float* a = act + static_cast<int64_t>(b) * ff_;
    for (int i = 0; i < ff_; ++i) {
      if (a[i] != 0.0f) m[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
}

int64_t PredictorSamples::n_tokens() const {
  int64_t n = capacity_;
  for (int l = 0; l < n_layer_; ++l) n = std::min({n, n_h_[l], n_mask_[l]});
  return n;
}

void PredictorSamples::Input(int layer, int64_t t, float* out) const {
  const uint16_t* in = H(layer, t);
  for (int j = 0; j < d_; ++j) out[j] = F16ToF32(in[j]);
}

}  // namespace pi

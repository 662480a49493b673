#include "coordinator/serve/admission.h"

namespace pi {

bool Admission::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_line_ >= max_queue_ + max_running_) return false;
  ++in_line_;
  return true;
}

void Admission::Started() {
  std::lock_guard<std::mutex> lock(mu_);
  ++running_;
}

void Admission::Leave(bool ran) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_line_;
  if (ran) --running_;
}

int Admission::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int Admission::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_line_ - running_;
}

}  // namespace pi

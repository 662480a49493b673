#include "coordinator/admission.h"

#include <algorithm>
#include <chrono>

namespace pi {

bool Admission::Enter(uint64_t* ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(line_.size()) >= int64_t{max_queue_} + max_running_) return false;
  *ticket = next_ticket_++;
  line_.push_back(*ticket);
  return true;
}

bool Admission::Admitted(uint64_t ticket) const {
  const auto end = line_.begin() + std::min<size_t>(line_.size(), max_running_);
  return std::find(line_.begin(), end, ticket) != end;
}

bool Admission::WaitTurn(uint64_t ticket, const std::function<bool()>& cancelled, int poll_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!Admitted(ticket)) {
    turn_.wait_for(lock, std::chrono::milliseconds(poll_ms));
    if (!Admitted(ticket) && cancelled && cancelled()) {
      line_.erase(std::find(line_.begin(), line_.end(), ticket));
      turn_.notify_all();
      return false;
    }
  }
  return true;
}

void Admission::Leave(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = std::find(line_.begin(), line_.end(), ticket);
  if (it != line_.end()) line_.erase(it);
  turn_.notify_all();
}

int Admission::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::min<size_t>(line_.size(), max_running_));
}

int Admission::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(line_.size() - std::min<size_t>(line_.size(), max_running_));
}

}  // namespace pi

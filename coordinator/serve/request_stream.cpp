#include "coordinator/serve/request_stream.h"

#include <chrono>
#include <utility>

namespace pi {

RequestStream::RequestStream(size_t max_tokens, size_t max_bytes)
    : max_tokens_(max_tokens < 1 ? 1 : max_tokens), max_bytes_(max_bytes), ring_(max_tokens_) {}

void RequestStream::Notify() {
  std::lock_guard<std::mutex> lock(notify_mu_);
  if (notify_) notify_();
}

bool RequestStream::Push(int32_t id, const std::string& text, int logprob,
                         const TokenTimes& times) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || ended_) return false;
    if (count_ == max_tokens_ || bytes_ + text.size() > max_bytes_) {
      cancelled_ = true;
      cancel_reason_ =
          "the client did not read its stream (" + std::to_string(count_) + " tokens waiting)";
      cv_.notify_all();
      notify = true;
    } else {
      Token& slot = ring_[(head_ + count_) % max_tokens_];
      slot.id = id;
      slot.text.assign(text);
      slot.logprob = logprob;
      slot.times = times;
      bytes_ += text.size();
      if (++count_ == 1) {
        cv_.notify_all();
        notify = true;
      }
    }
  }
  if (notify) Notify();
  return !cancelled();
}

void RequestStream::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }
  Notify();
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool RequestStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void RequestStream::SetNotify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(notify_mu_);
  notify_ = std::move(notify);
}

bool RequestStream::Take(std::vector<Token>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = count_;
  if (out->size() < n) out->resize(n);
  for (size_t k = 0; k < n; ++k) std::swap((*out)[k], ring_[(head_ + k) % max_tokens_]);
  // Only the first n are this take's: the caller reads out->begin() .. + n.
  out->resize(n);
  head_ = (head_ + n) % max_tokens_;
  count_ = 0;
  bytes_ = 0;
  return ended_;
}

void RequestStream::Wait(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return count_ > 0 || ended_; });
}

void RequestStream::Cancel(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return;
  cancelled_ = true;
  cancel_reason_ = why;
  cv_.notify_all();
}

std::string RequestStream::cancel_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancel_reason_;
}

}  // namespace pi

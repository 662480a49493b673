// WorkGate: at most N callers at a time in a piece of work that costs far
// more than its request (tokenizing a long text takes ~40x its size in
// memory); one more is refused at once, never queued, so a flood of such
// requests costs a refusal each. Enter returns a pass that leaves on
// destruction; an empty pass means refused.
#pragma once

#include <atomic>
#include <utility>

namespace pi {

class WorkGate {
 public:
  class Pass {
   public:
    Pass() = default;
    explicit Pass(std::atomic<int>* inside) : inside_(inside) {}
    Pass(Pass&& o) noexcept : inside_(o.inside_) { o.inside_ = nullptr; }
    // (Swapped: a pass held before leaves with `o`.)
    Pass& operator=(Pass&& o) noexcept {
      std::swap(inside_, o.inside_);
      return *this;
    }
    ~Pass() {
      if (inside_) inside_->fetch_sub(1);
    }
    explicit operator bool() const { return inside_ != nullptr; }

   private:
    std::atomic<int>* inside_ = nullptr;
  };

  explicit WorkGate(int max_inside) : max_inside_(max_inside) {}
  Pass Enter() {
    if (inside_.fetch_add(1) >= max_inside_) {
      inside_.fetch_sub(1);
      return Pass();
    }
    return Pass(&inside_);
  }
  int max_inside() const { return max_inside_; }

 private:
  const int max_inside_;
  std::atomic<int> inside_{0};
};

}  // namespace pi

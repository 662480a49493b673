// Counts heap allocations made through operator new, by replacing the global
// operators in the test binary that includes this header (include it from
// exactly one file of a binary). Tests read AllocationCount() before and
// after the code that must not allocate.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace pi {
inline std::atomic<long> g_allocation_count{0};
inline long AllocationCount() {
  return g_allocation_count.load(std::memory_order_relaxed);
}
}  // namespace pi

// GCC 12 flags free() of what the replaced operator new returned once both
// are inlined: both sides are malloc/free here, so that is a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  pi::g_allocation_count.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

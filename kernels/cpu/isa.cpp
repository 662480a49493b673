#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define PI_X86 1
#endif

namespace pi {

namespace {

#ifdef PI_X86
// XCR0: which register states the OS saves on context switch. A CPU may
// support AVX-512 while the OS (or hypervisor) does not enable it.
uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuIsa DetectHardware() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return CpuIsa::kScalar;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  if (!osxsave || !avx || !fma || !f16c) return CpuIsa::kScalar;
  const uint64_t xcr0 = ReadXcr0();
  if ((xcr0 & 0x6) != 0x6) return CpuIsa::kScalar;  // SSE and AVX state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CpuIsa::kScalar;
  const bool avx2 = b & (1u << 5);
  if (!avx2) return CpuIsa::kScalar;
  const bool avx512f = b & (1u << 16);
  const bool avx512dq = b & (1u << 17);
  const bool avx512bw = b & (1u << 30);
  const bool avx512vl = b & (1u << 31);
  const bool avx512vnni = c & (1u << 11);
  const bool zmm_state = (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM0-15 high, ZMM16-31
  if (avx512f && avx512dq && avx512bw && avx512vl && avx512vnni && zmm_state) {
    return CpuIsa::kAvx512;
  }
  return CpuIsa::kAvx2;
}

bool DetectAvxVnni() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return a & (1u << 4);
}
#else
CpuIsa DetectHardware() {
  return CpuIsa::kScalar;
}
bool DetectAvxVnni() {
  return false;
}
#endif

// PI_CPU_ISA=scalar|avx2|avx2-novnni|avx512 caps the level, for debugging
// and for comparing paths in a deployed binary (avx2-novnni: AVX2 without
// AVX-VNNI, as on the CPUs that lack it).
CpuIsa DetectOnce() {
  CpuIsa isa = DetectHardware();
  const char* env = std::getenv("PI_CPU_ISA");
  if (env != nullptr) {
    CpuIsa cap = isa;
    if (std::strcmp(env, "scalar") == 0) cap = CpuIsa::kScalar;
    if (std::strcmp(env, "avx2") == 0 || std::strcmp(env, "avx2-novnni") == 0) {
      cap = CpuIsa::kAvx2;
    }
    if (std::strcmp(env, "avx512") == 0) cap = CpuIsa::kAvx512;
    if (static_cast<int>(cap) < static_cast<int>(isa)) isa = cap;
  }
  return isa;
}

// -1 until first use; then the level in use.
std::atomic<int> g_active{-1};
std::atomic<bool> g_vnni_off{false};

}  // namespace

CpuIsa DetectCpuIsa() {
  static const CpuIsa detected = DetectOnce();
  return detected;
}

CpuIsa ActiveCpuIsa() {
  int v = g_active.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(DetectCpuIsa());
    g_active.store(v, std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(v);
}

void SetCpuIsa(CpuIsa isa) {
  int v = static_cast<int>(isa);
  const int best = static_cast<int>(DetectCpuIsa());
  if (v > best) v = best;
  if (v < 0) v = 0;
  g_active.store(v, std::memory_order_relaxed);
}

bool HasAvxVnni() {
  static const bool has = [] {
    const char* env = std::getenv("PI_CPU_ISA");
    if (env != nullptr && std::strcmp(env, "avx2-novnni") == 0) return false;
    return DetectCpuIsa() != CpuIsa::kScalar && DetectAvxVnni();
  }();
  return has;
}

bool AvxVnniEnabled() {
  return HasAvxVnni() && !g_vnni_off.load(std::memory_order_relaxed);
}

void SetAvxVnni(bool on) {
  g_vnni_off.store(!on, std::memory_order_relaxed);
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace pi

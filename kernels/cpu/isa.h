// Which instruction set the CPU kernels use. Detected once at run time; tests
// and benchmarks may force a lower level to compare paths side by side.
#pragma once

namespace pi {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

CpuIsa DetectCpuIsa();       // best level this CPU (and this build) supports
CpuIsa ActiveCpuIsa();       // level in use
void SetCpuIsa(CpuIsa isa);  // clamped to DetectCpuIsa()
const char* CpuIsaName(CpuIsa isa);

}  // namespace pi

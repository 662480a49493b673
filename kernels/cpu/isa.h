// Which instruction set the CPU kernels use. Detected once at run time; tests
// and benchmarks may force a lower level to compare paths side by side.
#pragma once

namespace pi {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

CpuIsa DetectCpuIsa();       // best level this CPU (and this build) supports
CpuIsa ActiveCpuIsa();       // level in use
void SetCpuIsa(CpuIsa isa);  // clamped to DetectCpuIsa()
const char* CpuIsaName(CpuIsa isa);

// AVX-VNNI (vpdpbusd on 256-bit vectors, without AVX-512: Intel's cores since
// Alder Lake) at the AVX2 level's matrix-matrix kernels; without it they
// take vpmaddubsw. Tests turn it off to check the other path.
bool HasAvxVnni();         // this CPU has it (and the level is at least AVX2)
bool AvxVnniEnabled();     // in use
void SetAvxVnni(bool on);  // clamped to HasAvxVnni()

}  // namespace pi

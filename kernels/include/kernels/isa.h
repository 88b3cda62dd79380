// Instruction sets the CPU kernels are built for, detected at run time (__builtin_cpu_supports). Each
// kernel family has a scalar reference and versions compiled with per-function target attributes; the
// dispatcher picks the best one the CPU has. Tests and benchmarks may ask for a given one.
#pragma once

#include <string_view>
#include <vector>

namespace kernels {

enum class Isa {
  scalar,  // the references: plain C++, always present
  avx2,    // AVX2 + FMA + F16C (the x86-64 baseline of the fast paths)
  avx512,  // AVX-512 F/BW/VL + VNNI (+ BF16 where used)
};

std::string_view isa_name(Isa isa);
// The best ISA this CPU supports (cached). ORCHARD_ISA=scalar|avx2|avx512 in the environment lowers it.
Isa best_isa();
// Every ISA this CPU supports, scalar first.
std::vector<Isa> available_isas();
bool isa_supported(Isa isa);

}  // namespace kernels

#include "kernels/isa.h"

#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::avx512:
      return cpu_has(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::scalar;
#endif
}

Isa detect() {
  Isa best = cpu_has(Isa::avx512) ? Isa::avx512 : cpu_has(Isa::avx2) ? Isa::avx2 : Isa::scalar;
  if (const char* env = std::getenv("ORCHARD_ISA")) {
    const std::string want = env;
    if (want == "scalar") best = Isa::scalar;
    if (want == "avx2" && best == Isa::avx512) best = Isa::avx2;
  }
  return best;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

Isa best_isa() {
  static const Isa best = detect();
  return best;
}

// Cached: CPUID (the F16C bit) traps to the hypervisor on a virtual machine, microseconds a call, and the
// dispatchers ask on every kernel call (it was 29% of an encoder's time at batch 32).
bool isa_supported(Isa isa) {
  static const bool supported[] = {cpu_has(Isa::scalar), cpu_has(Isa::avx2), cpu_has(Isa::avx512)};
  const auto i = static_cast<std::size_t>(isa);
  return i < std::size(supported) && supported[i];
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

}  // namespace kernels

// The CUDA kernel lab: each CUDA kernel of pal and kernels compared with its CPU reference over sweeps of
// shapes, with fresh random inputs and outputs poisoned (NaN bytes) before each run so that an unwritten
// element shows. Used by the GoogleTest suite (tests/cuda) and by the benchmark program's --check mode.
// Needs a GPU: callers check tensor::cuda::available() first.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace orchard::cuda_lab {

struct CaseResult {
  std::string name;     // e.g. "decode bf16 d128 seqs=3 q_heads=32 kv_heads=8 ctx<=4000"
  double error = 0.0;   // ||out - ref|| / ||ref|| (0 for exact checks)
  double tolerance = 0.0;
  bool unwritten = false;  // a poisoned element survived, or a NaN/inf appeared where none belongs
  std::string detail;      // first mismatch, when there is one
  bool ok() const { return !unwritten && error <= tolerance; }
};

// Each sweep runs its cases with generators seeded from `seed` and reports every case.
std::vector<CaseResult> check_decode(std::uint64_t seed);
std::vector<CaseResult> check_prefill(std::uint64_t seed);
std::vector<CaseResult> check_rope_append(std::uint64_t seed);
std::vector<CaseResult> check_copy_pages(std::uint64_t seed);
std::vector<CaseResult> check_bitmask(std::uint64_t seed);

// Every sweep above, in order.
std::vector<CaseResult> check_all(std::uint64_t seed);

}  // namespace orchard::cuda_lab

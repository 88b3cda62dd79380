#include "act_pack.h"

#include <cstring>

#include "quant_common.h"

namespace kernels::detail {

std::size_t act_packed_bytes(std::int64_t n) {
  const std::int64_t groups = (n / kQK + kActGroupBlocks - 1) / kActGroupBlocks;
  return static_cast<std::size_t>(groups) * sizeof(ActGroup);
}

void act_pack_q8_0(const void* x, void* out, std::int64_t n) {
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  auto* g = static_cast<ActGroup*>(out);
  std::memset(out, 0, act_packed_bytes(n));
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    ActGroup& a = g[i / kActGroupBlocks];
    const int k = static_cast<int>(i % kActGroupBlocks);
    std::memcpy(a.lo + 16 * k, b[i].qs, 16);
    std::memcpy(a.hi + 16 * k, b[i].qs + 16, 16);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += b[i].qs[j];
    a.d[k] = fp16(b[i].d);
    a.sum[k] = sum;
    a.s[k] = a.d[k] * static_cast<float>(sum);
  }
}

}  // namespace kernels::detail

// The AVX2 kernel of kernels/attention.h (private to kernels/).
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace kernels::detail::avx2 {

// One (sequence, head): len rows at q, k, v, out (already offset to the head's first value), head_dim a
// multiple of 8. scratch: at least attention_scratch_floats(len, head_dim) floats.
void attention_head(const BidirectionalAttentionParams& p, const float* q, const float* k, const float* v,
                    std::int64_t len, float* out, float* scratch);
std::int64_t attention_scratch_floats(std::int64_t len, std::int64_t head_dim);

}  // namespace kernels::detail::avx2

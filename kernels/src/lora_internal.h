// Validation shared by the reference and AVX2 LoRA kernels, and the AVX2 entry points.
#pragma once

#include "kernels/lora.h"

namespace kernels::detail {

void check_lora_shrink(const LoraShrinkParams& p, const float* t);
void check_lora_expand(const LoraExpandParams& p);

// AVX2 + FMA (lora_avx2.cpp); callers check the CPU first. Arguments already validated.
namespace avx2 {
void lora_shrink(const LoraShrinkParams& p, float* t);
void lora_expand(const LoraExpandParams& p);
}  // namespace avx2

}  // namespace kernels::detail

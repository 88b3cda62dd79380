// Helpers shared by the model loaders and the GGUF writer: owned f32 buffers, llama3 RoPE frequency
// factors, GGUF names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pie/model.h"

namespace pie::model_detail {

// Keeps `values` alive in model.storage and returns an f32 [n] view of them.
Weight own_f32(Model& model, std::vector<float> values);

// The GGUF general.architecture name llama.cpp knows the architecture by (mistral is written as llama,
// as convert_hf_to_gguf.py does).
const char* gguf_arch_name(Architecture arch);
// Whether llama.cpp runs the architecture with NeoX RoPE (rotate_half); otherwise GPT-J (adjacent pairs).
bool gguf_rope_is_neox(Architecture arch);

// The per-pair frequency divisors of llama3 RoPE scaling (rope_freqs.weight, as convert_hf_to_gguf.py
// computes them). rope.scaling must be llama3.
std::vector<float> llama3_rope_factors(const pal::RopeConfig& rope);
// The llama3 scaling whose factors equal `factors` (within f32 rounding): factor = the largest divisor,
// low/high frequency factors fitted for original_max_position. Throws ModelError (naming `where`) when
// no llama3 scaling gives these factors. Leaves scaling none when every factor is 1.
void fit_llama3_rope(pal::RopeConfig& rope, std::span<const float> factors, std::int32_t original_max_position,
                     const std::string& where);

}  // namespace pie::model_detail

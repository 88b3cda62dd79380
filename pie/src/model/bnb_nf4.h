// Linear weights that bitsandbytes saved in NF4 (transformers' load_in_4bit / QLoRA checkpoints), read as
// they are into Orchard's nf4 rows (private to pie/src/model; docs/nf4.md has the layout).
#pragma once

#include <cstdint>
#include <string>

#include "model/safetensors.h"
#include "pie/model.h"

namespace pie::detail {

// Whether `name` (a Linear's "....weight") is stored by bitsandbytes in 4 bits: a
// "<name>.quant_state.bitsandbytes__nf4" (or __fp4) tensor is present.
bool is_bnb_4bit(const SafetensorsSet& set, const std::string& name);

// The matrix [n_out, n_in] of bitsandbytes' NF4 tensors <name> (packed codes), <name>.absmax,
// <name>.quant_map, and with double quantization <name>.nested_absmax and <name>.nested_quant_map, and the
// JSON of <name>.quant_state.bitsandbytes__nf4; the absmax are decoded (bit for bit as bitsandbytes does)
// into nf4 blocks kept in model.storage. Throws ModelError naming the file and the tensor or field at fault:
// fp4, a blocksize other than 64, a quant_map that is not NF4's, a shape that is not [n_out, n_in], n_in not
// a multiple of 64, sizes that disagree, malformed JSON.
Weight read_bnb_nf4(const SafetensorsSet& set, const std::string& name, std::int64_t n_out, std::int64_t n_in,
                    Model& model);

}  // namespace pie::detail

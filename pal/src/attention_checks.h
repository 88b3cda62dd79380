// Argument checks of decode and prefill shared by the reference and the fast kernels (validate.cpp).
#pragma once

#include "pal/attention.h"

namespace pal::detail {

// validate_attention, then: q and out given; every sequence has at least one cached token.
void validate_decode(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args,
                     const char* op);
// validate_attention, then: qo_indptr well formed, q and out given when there are query rows, and no
// sequence has more query rows than cached tokens.
void validate_prefill(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args,
                      const char* op);

}  // namespace pal::detail

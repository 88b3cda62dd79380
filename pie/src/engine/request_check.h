// submit()'s validation of a GenerateRequest against the model and the engine's context, before anything
// is queued: each failure is a RequestError naming the field.
#pragma once

#include <cstdint>

#include "pie/engine.h"

namespace pie::detail {

inline constexpr std::int32_t kMaxSamples = 128;  // n
inline constexpr std::size_t kMaxStops = 16;

void check_request(const GenerateRequest& request, const Model& model, std::int32_t context_length);

}  // namespace pie::detail

// A stored model's Modelfile (PARAMETER, SYSTEM, ADAPTER) applied by `orchard run` and `orchard
// chat`: its sampling parameters where the command line left them out, its system prompt when
// --system is not given.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lora_flags.h"
#include "pie/engine.h"
#include "pie/model_store.h"

namespace orchard::cli {

// The model's sampling parameters in OpenAI's request names, less the keys in `given` ({} for a
// model opened from a file).
nlohmann::json stored_sampling(const pie::OpenedModel& opened,
                               const std::vector<std::string>& given);
// Sets `request`'s temperature, top_k, top_p, min_p, seed, penalties, max_tokens and stop from
// `fields`.
void apply_sampling(const nlohmann::json& fields, pie::GenerateRequest& request);
// The Modelfile's ADAPTERs added to `lora` (before any --lora), each at scale 1.
void add_stored_adapters(LoraFlags& lora, const pie::OpenedModel& opened);
// --system when given, else the Modelfile's SYSTEM, else nullopt.
std::optional<std::string> system_prompt(const std::optional<std::string>& given,
                                         const pie::OpenedModel& opened);

}  // namespace orchard::cli

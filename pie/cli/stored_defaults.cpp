#include "stored_defaults.h"

#include <algorithm>

#include "arg_parser.h"
#include "pie/modelfile.h"

namespace orchard::cli {

nlohmann::json stored_sampling(const pie::OpenedModel& opened,
                               const std::vector<std::string>& given) {
  if (!opened.stored) return nlohmann::json::object();
  nlohmann::json fields = pie::openai_sampling_fields(*opened.stored);
  for (const std::string& key : given) fields.erase(key);
  return fields;
}

void apply_sampling(const nlohmann::json& fields, pie::GenerateRequest& request) {
  // The values were type-checked when the Modelfile was read; a wrong one is the store's damage.
  try {
    pie::SamplingParams& s = request.sampling;
    if (fields.contains("temperature")) s.temperature = fields["temperature"].get<float>();
    if (fields.contains("top_k")) s.top_k = fields["top_k"].get<std::int32_t>();
    if (fields.contains("top_p")) s.top_p = fields["top_p"].get<float>();
    if (fields.contains("min_p")) s.min_p = fields["min_p"].get<float>();
    if (fields.contains("repetition_penalty"))
      s.repetition_penalty = fields["repetition_penalty"].get<float>();
    if (fields.contains("presence_penalty"))
      s.presence_penalty = fields["presence_penalty"].get<float>();
    if (fields.contains("frequency_penalty"))
      s.frequency_penalty = fields["frequency_penalty"].get<float>();
    if (fields.contains("seed")) s.seed = fields["seed"].get<std::uint64_t>();
    if (fields.contains("max_tokens"))
      request.max_tokens = fields["max_tokens"].get<std::int32_t>();
    if (fields.contains("stop")) request.stop = fields["stop"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("the stored model's parameters are malformed: ") +
                             e.what());
  }
}

void add_stored_adapters(LoraFlags& lora, const pie::OpenedModel& opened) {
  if (!opened.stored) return;
  std::vector<std::string> values;
  for (std::size_t i = 0; i < opened.stored->adapters.size(); ++i) {
    values.push_back("adapter" + std::to_string(i) + "=" + opened.stored->adapters[i].string() +
                     ":1");
  }
  lora.values.insert(lora.values.begin(), values.begin(), values.end());
}

std::optional<std::string> system_prompt(const std::optional<std::string>& given,
                                         const pie::OpenedModel& opened) {
  if (given) return given;
  if (opened.stored && !opened.stored->system.empty()) return opened.stored->system;
  return std::nullopt;
}

}  // namespace orchard::cli

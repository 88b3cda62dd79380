#include "server/lora_routes.h"

#include <fmt/format.h>

#include <cmath>

#include "pie/lora.h"
#include "server/api_error.h"

namespace pie::server {
namespace {

ApiError not_found(const std::string& name) {
  return ApiError(404, "invalid_request_error", fmt::format("no LoRA adapter named '{}' is loaded", name), "lora",
                  "lora_not_found");
}

float scale_of(const Json& entry, const std::string& where) {
  if (!entry.contains("scale")) return 1.0f;
  const Json& s = entry["scale"];
  // Bounded before the conversion to float (a double past float's range has no float value).
  if (!s.is_number() || !(std::fabs(s.get<double>()) <= 1e6)) {
    throw ApiError::invalid(fmt::format("'{}.scale' must be a number in [-1e6, 1e6]", where), where + ".scale");
  }
  return s.get<float>();
}

std::string string_field(const Json& body, const char* key) {
  if (!body.is_object()) throw ApiError::invalid("the body must be a JSON object");
  auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
    throw ApiError::invalid(fmt::format("'{}' is required (a non-empty string)", key), key);
  }
  return it->get<std::string>();
}

}  // namespace

bool LoraRoutes::names_adapter(const std::string& model) const {
  for (const LoraInfo& l : engine_.loras()) {
    if (l.name == model) return true;
  }
  return false;
}

std::string LoraRoutes::resolve_id(const Json& id, const std::vector<LoraInfo>& loras, const std::string& where) const {
  if (id.is_number_integer()) {
    const auto i = id.get<std::int64_t>();
    if (i < 0 || i >= static_cast<std::int64_t>(loras.size())) {
      throw ApiError(404, "invalid_request_error",
                     fmt::format("'{}': no LoRA adapter has id {} ({} loaded)", where, i, loras.size()), where,
                     "lora_not_found");
    }
    return loras[static_cast<std::size_t>(i)].name;
  }
  if (id.is_string()) {
    const std::string name = id.get<std::string>();
    for (const LoraInfo& l : loras) {
      if (l.name == name) return name;
    }
    throw not_found(name);
  }
  throw ApiError::invalid(fmt::format("'{}' must be an adapter's index or name", where), where);
}

std::vector<LoraRequest> LoraRoutes::select(const Json& body, const std::string& model) const {
  const std::vector<LoraInfo> loras = engine_.loras();
  std::vector<LoraRequest> out;
  auto it = body.is_object() ? body.find("lora") : body.end();
  if (body.is_object() && it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw ApiError::invalid("'lora' must be an array of {id, scale}", "lora");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const std::string where = fmt::format("lora[{}]", i);
      const Json& e = (*it)[i];
      if (!e.is_object() || !e.contains("id")) throw ApiError::invalid(fmt::format("'{}' must be {{id, scale}}", where), where);
      out.push_back({resolve_id(e["id"], loras, where + ".id"), scale_of(e, where)});
    }
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const LoraInfo& l : loras) {
      auto s = default_scales_.find(l.name);
      if (s != default_scales_.end() && s->second != 0) out.push_back({l.name, s->second});
    }
  }
  if (!model.empty() && names_adapter(model)) {
    bool listed = false;
    for (const LoraRequest& r : out) listed = listed || r.name == model;
    if (!listed) out.push_back({model, 1.0f});
  }
  return out;
}

Json LoraRoutes::list() const {
  const std::vector<LoraInfo> loras = engine_.loras();
  std::lock_guard<std::mutex> lock(mutex_);
  Json out = Json::array();
  for (std::size_t i = 0; i < loras.size(); ++i) {
    auto s = default_scales_.find(loras[i].name);
    out.push_back(Json{{"id", i}, {"name", loras[i].name}, {"path", loras[i].path.string()},
                       {"scale", s == default_scales_.end() ? 0.0f : s->second}, {"rank", loras[i].rank},
                       {"resident", loras[i].resident}});
  }
  return out;
}

Json LoraRoutes::set_scales(const std::string& text) {
  const std::vector<LoraInfo> loras = engine_.loras();
  const Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError::invalid("the request body is not valid JSON", {}, "invalid_json");
  if (!body.is_array()) throw ApiError::invalid("the body must be an array of {id, scale}");
  std::map<std::string, float> scales;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const std::string where = fmt::format("[{}]", i);
    const Json& e = body[i];
    if (!e.is_object() || !e.contains("id")) throw ApiError::invalid(fmt::format("'{}' must be {{id, scale}}", where), where);
    scales[resolve_id(e["id"], loras, where + ".id")] = scale_of(e, where);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    default_scales_ = std::move(scales);  // llama.cpp: adapters left out go back to 0
  }
  return list();
}

Json LoraRoutes::load(const Json& body) {
  const std::string name = string_field(body, "lora_name");
  const std::string path = string_field(body, "lora_path");
  if (names_adapter(name)) {
    throw ApiError::invalid(fmt::format("the LoRA adapter '{}' is already loaded", name), "lora_name",
                            "lora_already_loaded");
  }
  try {
    engine_.attach_lora(name, std::filesystem::path(path));
  } catch (const LoraError& e) {
    throw ApiError::invalid(e.what(), "lora_path", "invalid_lora_adapter");
  }
  return Json{{"object", "lora_adapter"}, {"lora_name", name}, {"status", "loaded"}};
}

Json LoraRoutes::unload(const Json& body) {
  const std::string name = string_field(body, "lora_name");
  try {
    engine_.detach_lora(name);
  } catch (const LoraNotFoundError&) {
    throw not_found(name);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    default_scales_.erase(name);
  }
  return Json{{"object", "lora_adapter"}, {"lora_name", name}, {"status", "unloaded"}};
}

std::vector<Json> LoraRoutes::model_entries(const std::string& parent) const {
  std::vector<Json> out;
  for (const LoraInfo& l : engine_.loras()) {
    out.push_back(Json{{"id", l.name}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard"},
                       {"root", l.path.string()}, {"parent", parent}});
  }
  return out;
}

}  // namespace pie::server

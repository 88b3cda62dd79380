#include "server/api_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace pie::server {
namespace {

// "messages[2].content": the path of a field for error messages.
std::string join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string at(const std::string& parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a value";
  }
}

[[noreturn]] void wrong_type(const std::string& path, const char* expected, const Json& got) {
  throw ApiError::invalid(fmt::format("'{}' must be {}, got {}", path, expected, type_name(got)), path);
}

// A member that is absent or null reads as absent: clients send null for "not set".
const Json* member(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> get_string(const Json& o, const char* key, const std::string& path) {
  const Json* v = member(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(join(path, key), "a string", *v);
  return v->get<std::string>();
}

std::optional<bool> get_bool(const Json& o, const char* key, const std::string& path) {
  const Json* v = member(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(join(path, key), "a boolean", *v);
  return v->get<bool>();
}

// A number that becomes a float: one past float's range would be undefined to convert, so it is refused.
std::optional<float> get_number(const Json& o, const char* key, const std::string& path) {
  const Json* v = member(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(join(path, key), "a number", *v);
  const double x = v->get<double>();
  if (!(std::abs(x) <= std::numeric_limits<float>::max())) {
    throw ApiError::invalid(fmt::format("'{}' is out of range, got {}", join(path, key), v->dump()), join(path, key));
  }
  return static_cast<float>(x);
}

std::optional<std::int64_t> get_int(const Json& o, const char* key, const std::string& path,
                                    std::int64_t lo, std::int64_t hi) {
  const Json* v = member(o, key);
  if (v == nullptr) return std::nullopt;
  std::int64_t value = 0;
  if (v->is_number_integer()) {
    value = v->get<std::int64_t>();
  } else if (v->is_number_unsigned()) {
    auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) {
      throw ApiError::invalid(fmt::format("'{}' must be in [{}, {}], got {}", join(path, key), lo, hi, u),
                              join(path, key));
    }
    value = static_cast<std::int64_t>(u);
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
    // 1.0 from loosely typed clients; 1e30 is an integer out of any range.
    if (!(std::abs(v->get<double>()) < 9e15)) {
      throw ApiError::invalid(fmt::format("'{}' must be in [{}, {}], got {}", join(path, key), lo, hi, v->dump()),
                              join(path, key));
    }
    value = static_cast<std::int64_t>(v->get<double>());
  } else {
    wrong_type(join(path, key), "an integer", *v);
  }
  if (value < lo || value > hi) {
    throw ApiError::invalid(
        fmt::format("'{}' must be in [{}, {}], got {}", join(path, key), lo, hi, v->dump()),
        join(path, key));
  }
  return value;
}

const Json& require_object(const Json& v, const std::string& path) {
  if (!v.is_object()) wrong_type(path, "an object", v);
  return v;
}

// stop: a string or an array of non-empty strings.
std::vector<std::string> parse_stop(const Json& v, const std::string& path) {
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 16) {
      throw ApiError::invalid(fmt::format("'{}' may hold at most 16 strings, got {}", path, v.size()),
                              path);
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) wrong_type(at(path, i), "a string", v[i]);
      stops.push_back(v[i].get<std::string>());
    }
  } else {
    wrong_type(path, "a string or an array of strings", v);
  }
  for (std::size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      throw ApiError::invalid(fmt::format("'{}' holds an empty stop string", path), path);
    }
  }
  return stops;
}

// Extension "speculative": "ngram", "draft" or "off", or {"mode": ..., "k": 0..16} (k 0: adaptive).
std::optional<SpeculativeOptions> parse_speculative(const Json& body, const std::string& scope) {
  const Json* v = member(body, "speculative");
  if (v == nullptr) return std::nullopt;
  const std::string path = scope.empty() ? "speculative" : scope + ".speculative";
  SpeculativeOptions out;
  auto mode = [&](const Json& m, const std::string& where) {
    if (!m.is_string()) wrong_type(where, "\"ngram\", \"draft\" or \"off\"", m);
    const std::string name = m.get<std::string>();
    if (name == "ngram") return DraftMode::ngram;
    if (name == "draft") return DraftMode::draft;  // the server's draft model (--spec draft=MODEL)
    if (name == "off") return DraftMode::off;
    throw ApiError::invalid(fmt::format("'{}' must be \"ngram\", \"draft\" or \"off\", got \"{}\"", where, name),
                            where);
  };
  if (v->is_string()) {
    out.mode = mode(*v, path);
  } else if (v->is_object()) {
    if (const Json* m = member(*v, "mode")) out.mode = mode(*m, path + ".mode");
    if (auto k = get_int(*v, "k", path, 0, kMaxDraftTokens)) out.k = static_cast<std::int32_t>(*k);
    for (const auto& [key, value] : v->items()) {
      if (key != "mode" && key != "k") {
        throw ApiError::invalid(fmt::format("'{}' has an unknown field '{}' (mode, k)", path, key), path);
      }
    }
  } else {
    wrong_type(path, "a string or an object", *v);
  }
  return out;
}

// Fields shared by OpenAI's chat and text completions.
void parse_openai_common(const Json& body, GenerationParams& p) {
  p.model = get_string(body, "model", "").value_or("");
  SamplingParams& s = p.sampling;
  if (auto v = get_number(body, "temperature", "")) s.temperature = *v;
  if (auto v = get_number(body, "top_p", "")) s.top_p = *v;
  if (auto v = get_int(body, "top_k", "", 0, std::numeric_limits<std::int32_t>::max())) {
    s.top_k = static_cast<std::int32_t>(*v);
  }
  if (auto v = get_number(body, "min_p", "")) s.min_p = *v;
  if (auto v = get_number(body, "presence_penalty", "")) s.presence_penalty = *v;
  if (auto v = get_number(body, "frequency_penalty", "")) s.frequency_penalty = *v;
  if (auto v = get_number(body, "repetition_penalty", "")) s.repetition_penalty = *v;
  if (auto v = get_int(body, "seed", "", std::numeric_limits<std::int64_t>::min(),
                       std::numeric_limits<std::int64_t>::max())) {
    s.seed = static_cast<std::uint64_t>(*v);
  }
  if (const Json* bias = member(body, "logit_bias")) {
    require_object(*bias, "logit_bias");
    for (const auto& [key, value] : bias->items()) {
      std::int32_t token = 0;
      try {
        std::size_t used = 0;
        long long id = std::stoll(key, &used);
        if (used != key.size() || id < 0 || id > std::numeric_limits<std::int32_t>::max()) throw 0;
        token = static_cast<std::int32_t>(id);
      } catch (...) {
        throw ApiError::invalid(
            fmt::format("'logit_bias' keys must be token ids, got \"{}\"", key), "logit_bias");
      }
      if (!value.is_number()) wrong_type(fmt::format("logit_bias.{}", key), "a number", value);
      s.logit_bias.emplace_back(token, *get_number(*bias, key.c_str(), "logit_bias"));
    }
  }
  if (auto v = get_int(body, "n", "", 1, 128)) p.n = static_cast<std::int32_t>(*v);
  const std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();
  if (auto v = get_int(body, "max_tokens", "", 1, kMaxTokens)) p.max_tokens = static_cast<std::int32_t>(*v);
  if (auto v = get_int(body, "max_completion_tokens", "", 1, kMaxTokens)) {
    p.max_tokens = static_cast<std::int32_t>(*v);
  }
  if (const Json* stop = member(body, "stop")) p.stop = parse_stop(*stop, "stop");
  p.stream = get_bool(body, "stream", "").value_or(false);
  if (const Json* options = member(body, "stream_options")) {
    require_object(*options, "stream_options");
    if (!p.stream) {
      throw ApiError::invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    p.include_usage = get_bool(*options, "include_usage", "stream_options").value_or(false);
  }

  p.constraint = parse_constraint(body);
  // Extension: per-token detail (sampled or forced, tokens the mask allowed) in the response.
  p.token_detail = get_bool(body, "token_detail", "").value_or(false);
  p.speculative = parse_speculative(body, "");
}

}  // namespace

Constraint parse_constraint(const Json& body) {
  if (!body.is_object()) throw ApiError::invalid("the request must be a JSON object", {}, "invalid_json");
  Constraint c;
  // Extensions: a GBNF or Lark grammar, or a regex, the output must match.
  int n_constraints = 0;
  if (auto grammar = get_string(body, "grammar", "")) {
    c = {Constraint::Kind::grammar, {}, *grammar, "grammar"};
    ++n_constraints;
  }
  if (auto lark = get_string(body, "lark", "")) {
    c = {Constraint::Kind::lark, {}, *lark, "lark"};
    ++n_constraints;
  }
  if (auto regex = get_string(body, "regex", "")) {
    c = {Constraint::Kind::regex, {}, *regex, "regex"};
    ++n_constraints;
  }
  if (const Json* format = member(body, "response_format")) {
    require_object(*format, "response_format");
    auto type = get_string(*format, "type", "response_format");
    if (!type) {
      throw ApiError::invalid("'response_format.type' is required", "response_format.type");
    }
    if (*type == "json_object") {
      c = {Constraint::Kind::json_object, Json{{"type", "object"}}, {}, "response_format"};
      ++n_constraints;
    } else if (*type == "json_schema") {
      const Json* spec = member(*format, "json_schema");
      if (spec == nullptr) {
        throw ApiError::invalid("'response_format.json_schema' is required when type is json_schema",
                                "response_format.json_schema");
      }
      require_object(*spec, "response_format.json_schema");
      auto name = get_string(*spec, "name", "response_format.json_schema");
      if (!name || name->empty()) {
        throw ApiError::invalid("'response_format.json_schema.name' is required",
                                "response_format.json_schema.name");
      }
      get_bool(*spec, "strict", "response_format.json_schema");  // type-checked; always enforced
      const Json* schema = member(*spec, "schema");
      Json value = schema != nullptr ? *schema : Json::object();  // no schema: any JSON object
      if (!value.is_object() && !value.is_boolean()) {
        wrong_type("response_format.json_schema.schema", "an object", value);
      }
      c = {Constraint::Kind::json_schema, std::move(value), {}, "response_format.json_schema.schema"};
      ++n_constraints;
    } else if (*type != "text") {
      throw ApiError::invalid(
          fmt::format("'response_format.type' must be text, json_object or json_schema, got \"{}\"",
                      *type),
          "response_format.type");
    }
  }
  if (n_constraints > 1) {
    throw ApiError::invalid("at most one of 'response_format', 'grammar', 'lark' and 'regex' may be given",
                            c.param);
  }
  return c;
}

namespace {

// Message content: a string, null, or an array of text parts (joined with newlines).
std::string parse_content(const Json& content, const std::string& path, bool allow_null) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) {
    if (allow_null) return {};
    throw ApiError::invalid(fmt::format("'{}' is required", path), path);
  }
  if (!content.is_array()) wrong_type(path, "a string or an array of content parts", content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    std::string part_path = at(path, i);
    const Json& part = require_object(content[i], part_path);
    auto type = get_string(part, "type", part_path);
    if (!type || *type != "text") {
      throw ApiError::invalid(
          fmt::format("'{}.type' must be \"text\" (this model reads text only), got {}", part_path,
                      type ? "\"" + *type + "\"" : "nothing"),
          join(part_path, "type"));
    }
    auto part_text = get_string(part, "text", part_path);
    if (!part_text) throw ApiError::invalid(fmt::format("'{}.text' is required", part_path), join(part_path, "text"));
    if (i > 0) text += '\n';
    text += *part_text;
  }
  return text;
}

// An assistant message's tool_calls, normalized: {id, type, function: {name, arguments}} with the
// arguments parsed to a JSON value when they are JSON text (templates print them with tojson).
Json parse_message_tool_calls(const Json& calls, const std::string& path) {
  if (!calls.is_array()) wrong_type(path, "an array", calls);
  Json out = Json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string call_path = at(path, i);
    const Json& call = require_object(calls[i], call_path);
    const Json* function = member(call, "function");
    if (function == nullptr) {
      throw ApiError::invalid(fmt::format("'{}.function' is required", call_path), join(call_path, "function"));
    }
    require_object(*function, join(call_path, "function"));
    auto name = get_string(*function, "name", join(call_path, "function"));
    if (!name) {
      throw ApiError::invalid(fmt::format("'{}.function.name' is required", call_path),
                              join(call_path, "function.name"));
    }
    Json arguments = Json::object();
    if (const Json* args = member(*function, "arguments")) {
      if (args->is_string()) {
        arguments = Json::parse(args->get<std::string>(), nullptr, false);
        if (arguments.is_discarded()) arguments = *args;
      } else {
        arguments = *args;  // Ollama sends an object
      }
    }
    Json normalized;
    normalized["id"] = get_string(call, "id", call_path).value_or(fmt::format("call_{}", i));
    normalized["type"] = "function";
    normalized["function"] = Json{{"name", *name}, {"arguments", std::move(arguments)}};
    out.push_back(std::move(normalized));
  }
  return out;
}

// Ollama's images (a message's or /api/generate's): this server's models read text only, so any image is
// refused, as OpenAI's image parts are, rather than dropped without a word.
void refuse_images(const Json& object, const std::string& path) {
  const Json* images = member(object, "images");
  if (images == nullptr) return;
  if (!images->is_array()) wrong_type(join(path, "images"), "an array", *images);
  if (!images->empty()) {
    throw ApiError::invalid(fmt::format("'{}': this model reads text only, not images", join(path, "images")),
                            join(path, "images"));
  }
}

Json parse_messages(const Json& body, bool ollama) {
  const Json* messages = member(body, "messages");
  if (messages == nullptr) throw ApiError::invalid("'messages' is required", "messages");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw ApiError::invalid("'messages' must hold at least one message", "messages");
  Json out = Json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    std::string path = at("messages", i);
    const Json& m = require_object((*messages)[i], path);
    auto role = get_string(m, "role", path);
    if (!role) throw ApiError::invalid(fmt::format("'{}.role' is required", path), join(path, "role"));
    if (*role == "developer") *role = "system";  // OpenAI's newer name for the system role
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool") {
      throw ApiError::invalid(
          fmt::format("'{}.role' must be system, developer, user, assistant or tool, got \"{}\"", path, *role),
          join(path, "role"));
    }
    if (ollama) refuse_images(m, path);
    Json normalized;
    normalized["role"] = *role;
    const Json* content = member(m, "content");
    bool has_calls = member(m, "tool_calls") != nullptr;
    normalized["content"] =
        parse_content(content != nullptr ? *content : Json(), join(path, "content"),
                      *role == "assistant");
    if (auto name = get_string(m, "name", path)) normalized["name"] = *name;
    if (*role == "tool") {
      auto id = get_string(m, "tool_call_id", path);
      if (id) normalized["tool_call_id"] = *id;
    }
    if (*role == "assistant") {
      if (has_calls) normalized["tool_calls"] = parse_message_tool_calls(m["tool_calls"], join(path, "tool_calls"));
      if (auto reasoning = get_string(m, "reasoning_content", path)) normalized["reasoning_content"] = *reasoning;
    }
    out.push_back(std::move(normalized));
  }
  return out;
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A call's arguments are a JSON object: a parameters schema whose "type" leaves no object out is refused
// here (a forced call could not be written), and one without "type" gets "type": "object" (the same
// conjunction), so that the tool grammar never writes other arguments, which would not parse as a call.
void object_arguments(Json& parameters, const std::string& path) {
  auto type = parameters.find("type");
  if (type == parameters.end()) {
    parameters["type"] = "object";
    return;
  }
  auto is_object = [](const Json& t) { return t.is_string() && (t == "object" || t == "dict"); };
  const bool allows_object =
      is_object(*type) || (type->is_array() && std::any_of(type->begin(), type->end(), is_object));
  if (!allows_object) {
    throw ApiError::invalid(fmt::format("'{}' must describe a JSON object (a call's arguments are one), got "
                                        "\"type\": {}",
                                        path, type->dump()),
                            join(path, "type"));
  }
  if (type->is_array()) *type = "object";
}

void parse_tools(const Json& body, ChatRequest& r) {
  const Json* tools = member(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    for (std::size_t i = 0; i < tools->size(); ++i) {
      std::string path = at("tools", i);
      const Json& t = require_object((*tools)[i], path);
      auto type = get_string(t, "type", path).value_or("function");
      if (type != "function") {
        throw ApiError::invalid(fmt::format("'{}.type' must be \"function\", got \"{}\"", path, type),
                                join(path, "type"));
      }
      const Json* function = member(t, "function");
      if (function == nullptr) {
        throw ApiError::invalid(fmt::format("'{}.function' is required", path), join(path, "function"));
      }
      std::string fpath = join(path, "function");
      require_object(*function, fpath);
      Tool tool;
      tool.name = get_string(*function, "name", fpath).value_or("");
      if (!valid_function_name(tool.name)) {
        throw ApiError::invalid(
            fmt::format("'{}.name' must be 1 to 64 of a-z, A-Z, 0-9, '_', '-', '.', got \"{}\"", fpath, tool.name),
            join(fpath, "name"));
      }
      for (const Tool& other : r.tools) {
        if (other.name == tool.name) {
          throw ApiError::invalid(fmt::format("'{}.name': tool \"{}\" is defined twice", fpath, tool.name),
                                  join(fpath, "name"));
        }
      }
      tool.description = get_string(*function, "description", fpath).value_or("");
      get_bool(*function, "strict", fpath);  // type-checked; arguments are always enforced
      const Json* parameters = member(*function, "parameters");
      tool.parameters = parameters != nullptr ? *parameters
                                              : Json{{"type", "object"}, {"properties", Json::object()}};
      if (!tool.parameters.is_object()) wrong_type(join(fpath, "parameters"), "an object", tool.parameters);
      object_arguments(tool.parameters, join(fpath, "parameters"));
      Json shaped;
      shaped["type"] = "function";
      shaped["function"]["name"] = tool.name;
      if (!tool.description.empty()) shaped["function"]["description"] = tool.description;
      shaped["function"]["parameters"] = tool.parameters;
      r.tools_json.push_back(std::move(shaped));
      r.tools.push_back(std::move(tool));
    }
  }
  r.tool_choice.mode = r.tools.empty() ? ToolChoice::Mode::none : ToolChoice::Mode::automatic;
  if (const Json* choice = member(body, "tool_choice")) {
    if (choice->is_string()) {
      std::string c = choice->get<std::string>();
      if (c == "none") r.tool_choice.mode = ToolChoice::Mode::none;
      else if (c == "auto") r.tool_choice.mode = ToolChoice::Mode::automatic;
      else if (c == "required") r.tool_choice.mode = ToolChoice::Mode::required;
      else {
        throw ApiError::invalid(
            fmt::format("'tool_choice' must be none, auto, required or a named function, got \"{}\"", c),
            "tool_choice");
      }
    } else if (choice->is_object()) {
      const Json* function = member(*choice, "function");
      std::optional<std::string> name;
      if (function != nullptr && function->is_object()) name = get_string(*function, "name", "tool_choice.function");
      if (!name) {
        throw ApiError::invalid("'tool_choice.function.name' is required for a named tool choice",
                                "tool_choice.function.name");
      }
      r.tool_choice.mode = ToolChoice::Mode::named;
      r.tool_choice.name = *name;
    } else {
      wrong_type("tool_choice", "a string or an object", *choice);
    }
    if ((r.tool_choice.mode == ToolChoice::Mode::required || r.tool_choice.mode == ToolChoice::Mode::named) && r.tools.empty()) {
      throw ApiError::invalid("'tool_choice' asks for a tool call but no 'tools' were given", "tool_choice");
    }
    if (r.tool_choice.mode == ToolChoice::Mode::named) {
      bool found = false;
      for (const Tool& t : r.tools) found = found || t.name == r.tool_choice.name;
      if (!found) {
        throw ApiError::invalid(
            fmt::format("'tool_choice' names the function \"{}\", which is not among 'tools'", r.tool_choice.name),
            "tool_choice");
      }
    }
  }
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls", "").value_or(true);
  if (r.tool_choice.mode != ToolChoice::Mode::none && r.params.constraint.kind != Constraint::Kind::none) {
    throw ApiError::invalid(
        fmt::format("'{}' cannot be combined with tools unless 'tool_choice' is \"none\"", r.params.constraint.param),
        r.params.constraint.param);
  }
}

// Ollama's options object and format field.
void parse_ollama_common(const Json& body, GenerationParams& p) {
  auto model = get_string(body, "model", "");
  if (!model) throw ApiError::invalid("'model' is required", "model");
  p.model = *model;
  p.stream = get_bool(body, "stream", "").value_or(true);
  p.include_usage = true;
  if (const Json* options = member(body, "options")) {
    require_object(*options, "options");
    SamplingParams& s = p.sampling;
    if (auto v = get_number(*options, "temperature", "options")) s.temperature = *v;
    if (auto v = get_number(*options, "top_p", "options")) s.top_p = *v;
    if (auto v = get_int(*options, "top_k", "options", 0, std::numeric_limits<std::int32_t>::max())) {
      s.top_k = static_cast<std::int32_t>(*v);
    }
    if (auto v = get_number(*options, "min_p", "options")) s.min_p = *v;
    if (auto v = get_number(*options, "repeat_penalty", "options")) s.repetition_penalty = *v;
    if (auto v = get_number(*options, "presence_penalty", "options")) s.presence_penalty = *v;
    if (auto v = get_number(*options, "frequency_penalty", "options")) s.frequency_penalty = *v;
    if (auto v = get_int(*options, "seed", "options", std::numeric_limits<std::int64_t>::min(),
                         std::numeric_limits<std::int64_t>::max())) {
      s.seed = static_cast<std::uint64_t>(*v);
    }
    p.speculative = parse_speculative(*options, "options");
    // num_predict: -1 (and -2) mean "until the context is full" in Ollama.
    if (auto v = get_int(*options, "num_predict", "options", -2, std::numeric_limits<std::int32_t>::max())) {
      if (*v > 0) p.max_tokens = static_cast<std::int32_t>(*v);
      if (*v == 0) throw ApiError::invalid("'options.num_predict' must not be 0", "options.num_predict");
    }
    if (const Json* stop = member(*options, "stop")) p.stop = parse_stop(*stop, "options.stop");
  }
  if (const Json* format = member(body, "format")) {
    if (format->is_string()) {
      if (format->get<std::string>() != "json") {
        throw ApiError::invalid(
            fmt::format("'format' must be \"json\" or a JSON schema, got \"{}\"", format->get<std::string>()),
            "format");
      }
      p.constraint = {Constraint::Kind::json_object, Json{{"type", "object"}}, {}, "format"};
    } else if (format->is_object()) {
      p.constraint = {Constraint::Kind::json_schema, *format, {}, "format"};
    } else {
      wrong_type("format", "\"json\" or a JSON schema object", *format);
    }
  }
}

}  // namespace

Json parse_body(const std::string& body) {
  // Where the parser is, for errors that name the field: a number too large for a double ("max_tokens":
  // 1e400) and nesting past the bound every later walk of the body relies on.
  struct Frame {
    bool array = false;
    std::size_t index = 0;  // array: the element being read
    std::string key;        // object: the member being read
  };
  std::vector<Frame> frames;
  // (The first 12 levels: enough to find the field, short enough for a message about a 20,000-deep one.)
  auto path = [&frames] {
    std::string out;
    for (std::size_t i = 0; i < frames.size() && i < 12; ++i) {
      const Frame& f = frames[i];
      out += f.array ? fmt::format("[{}]", f.index) : (out.empty() ? "" : ".") + f.key;
    }
    return frames.size() > 12 ? out + "..." : out;
  };
  auto track = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth + 1 > kMaxBodyNesting) {
          throw ApiError::invalid(
              fmt::format("the request body nests arrays and objects more than {} levels deep (at '{}')",
                          kMaxBodyNesting, path()),
              path(), "invalid_json");
        }
        frames.push_back(Frame{event == Json::parse_event_t::array_start, 0, {}});
        break;
      case Json::parse_event_t::key: frames.back().key = parsed.get<std::string>(); break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames.pop_back();
        [[fallthrough]];
      case Json::parse_event_t::value:
        if (!frames.empty() && frames.back().array) ++frames.back().index;
        break;
    }
    return true;
  };
  Json parsed;
  try {
    parsed = Json::parse(body, track);
  } catch (const Json::parse_error& e) {
    throw ApiError::invalid(fmt::format("the request body is not valid JSON (at byte {})", e.byte), {},
                            "invalid_json");
  } catch (const Json::out_of_range& e) {
    // 406: a number beyond a double's range.
    std::string field = path();
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
    throw ApiError::invalid(
        fmt::format("'{}' is out of range: {}", field.empty() ? "(the body)" : field, what), field);
  }
  if (!parsed.is_object()) {
    throw ApiError::invalid(fmt::format("the request body must be a JSON object, got {}", type_name(parsed)),
                            {}, "invalid_json");
  }
  return parsed;
}

ChatRequest parse_openai_chat(const Json& body) {
  ChatRequest r;
  parse_openai_common(body, r.params);
  if (auto logprobs = get_bool(body, "logprobs", "")) r.params.sampling.logprobs = *logprobs;
  if (auto top = get_int(body, "top_logprobs", "", 0, 20)) {
    if (!r.params.sampling.logprobs && *top > 0) {
      throw ApiError::invalid("'top_logprobs' needs 'logprobs' to be true", "top_logprobs");
    }
    r.params.sampling.top_logprobs = static_cast<std::int32_t>(*top);
  }
  r.messages = parse_messages(body, /*ollama=*/false);
  parse_tools(body, r);
  return r;
}

CompletionRequest parse_openai_completion(const Json& body) {
  CompletionRequest r;
  parse_openai_common(body, r.params);
  // Here logprobs is the number of alternatives (0..5), as in the legacy API.
  if (auto top = get_int(body, "logprobs", "", 0, 20)) {
    r.params.sampling.logprobs = true;
    r.params.sampling.top_logprobs = static_cast<std::int32_t>(*top);
  }
  r.echo = get_bool(body, "echo", "").value_or(false);
  if (auto suffix = get_string(body, "suffix", ""); suffix && !suffix->empty()) {
    throw ApiError::invalid("'suffix' (fill-in-the-middle) is not supported", "suffix");
  }
  if (auto best_of = get_int(body, "best_of", "", 1, 128); best_of && *best_of != r.params.n) {
    throw ApiError::invalid("'best_of' other than n is not supported", "best_of");
  }
  const Json* prompt = member(body, "prompt");
  if (prompt == nullptr) throw ApiError::invalid("'prompt' is required", "prompt");
  // One prompt: a string, a list of token ids, or a list holding exactly one of those.
  const Json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && (prompt->front().is_string() || prompt->front().is_array())) {
    if (prompt->size() != 1) {
      throw ApiError::invalid(
          fmt::format("'prompt' holds {} prompts; send one per request", prompt->size()), "prompt");
    }
    one = &prompt->front();
  }
  if (one->is_string()) {
    r.prompt_text = one->get<std::string>();
  } else if (one->is_array()) {
    for (std::size_t i = 0; i < one->size(); ++i) {
      const Json& id = (*one)[i];
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
        throw ApiError::invalid(fmt::format("'prompt[{}]' must be a token id, got {}", i, id.dump()), "prompt");
      }
      r.prompt_tokens.push_back(id.get<std::int32_t>());
    }
    if (r.prompt_tokens.empty()) throw ApiError::invalid("'prompt' is empty", "prompt");
  } else {
    wrong_type("prompt", "a string or an array of token ids", *one);
  }
  return r;
}

ChatRequest parse_ollama_chat(const Json& body) {
  ChatRequest r;
  parse_ollama_common(body, r.params);
  // No messages: Ollama loads the model and answers at once ("done_reason": "load").
  const Json* messages = member(body, "messages");
  if (messages == nullptr || (messages->is_array() && messages->empty())) {
    r.load_only = true;
    return r;
  }
  r.messages = parse_messages(body, /*ollama=*/true);
  parse_tools(body, r);
  return r;
}

OllamaGenerate parse_ollama_generate(const Json& body) {
  OllamaGenerate g;
  parse_ollama_common(body, g.completion.params);
  std::string prompt = get_string(body, "prompt", "").value_or("");
  if (auto suffix = get_string(body, "suffix", ""); suffix && !suffix->empty()) {
    throw ApiError::invalid("'suffix' (fill-in-the-middle) is not supported", "suffix");
  }
  refuse_images(body, "");
  // No prompt: Ollama loads the model and answers at once ("done_reason": "load"), generating nothing.
  if (prompt.empty()) {
    g.load_only = true;
    return g;
  }
  if (get_bool(body, "raw", "").value_or(false)) {
    g.completion.prompt_text = std::move(prompt);
    return g;
  }
  ChatRequest chat;
  chat.params = g.completion.params;
  if (auto system = get_string(body, "system", ""); system && !system->empty()) {
    chat.messages.push_back(Json{{"role", "system"}, {"content", *system}});
  }
  chat.messages.push_back(Json{{"role", "user"}, {"content", prompt}});
  g.chat = std::move(chat);
  return g;
}

}  // namespace pie::server

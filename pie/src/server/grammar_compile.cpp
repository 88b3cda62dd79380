#include "server/grammar_compile.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "pse/json_schema.h"
#include "pse/matcher.h"
#include "server/api_error.h"
#include "server/openai_format.h"

namespace pie::server {
namespace {

constexpr std::size_t kMaxCheckBytes = 1u << 20;

// Line and column (1-based, columns in characters) of byte `offset` of `text`.
Json text_location(const std::string& text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {  // a continuation byte is part of the character before it
      ++column;
    }
  }
  return Json{{"line", line}, {"column", column}};
}

// A schema sent as JSON text (the playground's editor): a syntax error says where.
// Nesting past the converter's bound is refused while the text is read: nlohmann's parser itself
// recurses (it copies values as it builds them), so a check after parse() would come too late.
Json parse_schema_text(const std::string& text) {
  const std::size_t limit = pse::JsonSchemaOptions{}.max_nesting;
  auto bound = [limit](int depth, Json::parse_event_t event, Json&) {
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (opens && static_cast<std::size_t>(depth) + 1 > limit) {
      throw ApiError::invalid(
          fmt::format("[json_schema] the schema nests arrays and objects more than {} levels deep", limit),
          "json_schema", "constraint_too_large");
    }
    return true;
  };
  try {
    return Json::parse(text, bound);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser gave up.
    Json location = text_location(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 9: ...".
    const auto colon = what.find(": ", what.find("parse error"));
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    throw ApiError::invalid(fmt::format("[json_schema] line {}, column {}: the schema is not valid JSON: {}",
                                        location["line"].get<std::size_t>(), location["column"].get<std::size_t>(),
                                        reason),
                            "json_schema", "invalid_json")
        .with_location(std::move(location));
  }
}

// Printable ASCII as is, the rest escaped, at most the last `max` bytes.
std::string excerpt(std::string_view text, std::size_t max) {
  if (text.size() > max) text = text.substr(text.size() - max);
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Feeds the text byte by byte to find the first byte the grammar refuses (none when it all fits).
Json check_text(const pse::CompiledGrammar& compiled, const std::string& text) {
  pse::Matcher whole(compiled);
  std::optional<std::size_t> rejected_at;
  bool complete = false;
  if (whole.accept_bytes(text)) {
    complete = whole.can_stop();
  } else {
    pse::Matcher m(compiled);
    std::size_t i = 0;
    while (i < text.size() && m.accept_bytes(std::string_view(text).substr(i, 1))) ++i;
    rejected_at = i;
  }
  std::string message;
  if (rejected_at) {
    const std::string_view before = std::string_view(text).substr(0, *rejected_at);
    message = fmt::format("rejected at byte {}: \"{}\" is not allowed after \"{}\"", *rejected_at,
                          excerpt(std::string_view(text).substr(*rejected_at, 1), 1), excerpt(before, 40));
  } else if (!complete) {
    const std::string next = whole.forced_continuation(64);
    message = fmt::format("incomplete: all {} bytes fit, but the grammar cannot stop here{}", text.size(),
                          next.empty() ? "" : fmt::format(" (it continues with \"{}\")", excerpt(next, 64)));
  } else {
    message = fmt::format("accepted: all {} bytes fit and the grammar may stop there", text.size());
  }
  return Json{{"accepted", !rejected_at && complete},
              {"complete", complete},
              {"bytes", text.size()},
              {"rejected_at", rejected_at ? Json(*rejected_at) : Json()},
              {"message", std::move(message)}};
}

double ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }

}  // namespace

CompileRequest parse_compile_request(const Json& body) {
  if (!body.is_object()) throw ApiError::invalid("the request must be a JSON object", {}, "invalid_json");
  CompileRequest out;
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw ApiError::invalid("'model' must be a string", "model");
    out.model = it->get<std::string>();
  }
  out.constraint = parse_constraint(body);
  if (auto it = body.find("json_schema"); it != body.end() && !it->is_null()) {
    if (out.constraint.kind != Constraint::Kind::none) {
      throw ApiError::invalid(
          "at most one of 'json_schema', 'response_format', 'grammar', 'lark' and 'regex' may be given",
          "json_schema");
    }
    Json schema = it->is_string() ? parse_schema_text(it->get<std::string>()) : *it;
    if (!schema.is_object() && !schema.is_boolean()) {
      throw ApiError::invalid("'json_schema' must be a JSON Schema (an object), or its JSON text", "json_schema");
    }
    out.constraint = {Constraint::Kind::json_schema, std::move(schema), {}, "json_schema"};
  }
  if (out.constraint.kind == Constraint::Kind::none) {
    throw ApiError::invalid(
        "one of 'json_schema', 'response_format' (json_object or json_schema), 'grammar', 'lark' or 'regex' is "
        "required");
  }
  if (auto it = body.find("json_layout"); it != body.end() && !it->is_null()) {
    const std::string layout = it->is_string() ? it->get<std::string>() : std::string();
    if (layout == "compact") {
      out.json_layout = pse::JsonLayout::kCompact;
    } else if (layout == "flexible") {
      out.json_layout = pse::JsonLayout::kFlexible;
    } else if (layout == "indented") {
      out.json_layout = pse::JsonLayout::kIndented;
    } else {
      throw ApiError::invalid(fmt::format("'json_layout' must be \"compact\", \"flexible\" or \"indented\", got {}",
                                          dump_json(*it)),
                              "json_layout");
    }
  }
  if (auto it = body.find("text"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw ApiError::invalid("'text' must be a string", "text");
    out.text = it->get<std::string>();
    if (out.text->size() > kMaxCheckBytes) {
      throw ApiError::invalid(
          fmt::format("'text' is {} bytes, over the limit of {} bytes", out.text->size(), kMaxCheckBytes), "text");
    }
  }
  return out;
}

Json compile_response(const ServedModel& model, const CompileRequest& request,
                      const std::function<bool()>& client_gone) {
  const std::optional<pse::Grammar> grammar =
      constraint_grammar(request.constraint, request.json_layout.value_or(model.json_layout()));
  const auto t0 = std::chrono::steady_clock::now();
  const CompiledConstraint compiled = [&] {
    try {
      return model.engine().compile(*grammar, {}, client_gone);
    } catch (...) {
      if (client_gone && client_gone()) {
        throw ApiError(499, "invalid_request_error", "the client closed the connection", {}, "client_closed_request");
      }
      throw api_error_from_exception(std::current_exception(), request.constraint.param);
    }
  }();
  // The tables built in the background count: a request waits for them at its first masks.
  const pse::CompileStats s = compiled.grammar.wait_for_tables();
  const double ready = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Json out;
  out["object"] = "grammar.compile";
  out["model"] = model.name();
  out["param"] = request.constraint.param;
  out["cached"] = compiled.cached;
  out["compile_ms"] = ms(compiled.seconds);
  out["ready_ms"] = ms(ready);
  out["stats"] = Json{{"rules", s.n_rules},
                      {"states", s.n_states},
                      {"scan_states", s.n_scan_states},
                      {"token_tables", s.n_tables},
                      {"shared_token_tables", s.n_shared_tables},
                      {"uncertain_tokens", s.n_uncertain},
                      {"memory_bytes", s.memory_bytes}};
  const pse::Vocabulary& vocab = compiled.grammar.vocabulary();
  out["vocabulary"] = Json{{"tokens", vocab.n_tokens()}, {"rows", vocab.n_rows()}};
  if (request.text) out["check"] = check_text(compiled.grammar, *request.text);
  return out;
}

}  // namespace pie::server

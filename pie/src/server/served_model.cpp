#include "server/served_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <span>

#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/lark.h"
#include "pse/regex.h"
#include "server/api_error.h"
#include "server/tool_prompt.h"

namespace pie::server {
namespace {

std::string special_text(const tokenizers::Tokenizer& tokenizer, std::optional<tokenizers::TokenId> id) {
  return id ? tokenizer.token_text(*id) : std::string();
}

std::int32_t resolve_context(const Engine& engine) {
  std::int32_t ctx = engine.options().context_length;
  if (ctx <= 0) ctx = std::min<std::int32_t>(engine.model().config.context_length, 8192);
  return std::max<std::int32_t>(ctx, 1);
}

}  // namespace

// JSON output is laid out as the server was told (compact by default): it starts at the first JSON byte
// and ends at the last, with no whitespace runs for the model to spend its tokens on.
std::optional<pse::Grammar> constraint_grammar(const Constraint& c, pse::JsonLayout layout) {
  try {
    switch (c.kind) {
      case Constraint::Kind::none:
        return std::nullopt;
      case Constraint::Kind::json_object:
      case Constraint::Kind::json_schema: {
        pse::JsonSchemaOptions options;
        options.layout = layout;
        return pse::json_schema_to_grammar(c.schema, options);
      }
      case Constraint::Kind::grammar:
        return pse::parse_gbnf(c.text);
      case Constraint::Kind::lark:
        return pse::parse_lark(c.text);
      case Constraint::Kind::regex:
        return pse::parse_regex(c.text);
    }
  } catch (...) {
    throw api_error_from_exception(std::current_exception(), c.param);
  }
  return std::nullopt;
}

namespace {

// Sampling, n, stop and max_tokens, shared by every route.
void fill_common(const ServedModel& model, const GenerationParams& p, PreparedRequest& out) {
  out.request.sampling = p.sampling;
  out.request.speculative = p.speculative;
  out.request.n = p.n;
  out.request.stop = p.stop;
  auto prompt_size = static_cast<std::int32_t>(out.request.prompt.size());
  // Unset max_tokens: the rest of the context, as OpenAI and Ollama do.
  out.request.max_tokens = p.max_tokens.value_or(std::max(model.context_length() - prompt_size, 1));
  // Tool-call ids are fresh for every request whatever its sampling seed: clients key state by them.
  std::random_device entropy;
  out.parse.id_seed = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy();
  out.constraint_param = p.constraint.param;
}

// templated: a rendered chat prompt, whose markup is read as special tokens except in `plain_text` (the
// text of the messages and tools); otherwise a raw prompt, all plain text.
std::vector<std::int32_t> tokenize(const ServedModel& model, const std::string& text, bool templated,
                                   std::span<const tokenizers::TextRange> plain_text = {}) {
  const tokenizers::Tokenizer& tok = *model.model().tokenizer;
  // A rendered template writes its own BOS text when the model wants one; adding another would double it.
  bool add_bos = tok.add_bos_by_default();
  if (add_bos && templated) {
    std::string bos = special_text(tok, tok.special_tokens().bos);
    if (!bos.empty() && text.starts_with(bos)) add_bos = false;
  }
  try {
    return tok.encode(text, {.add_bos = add_bos, .parse_special = templated, .plain_text = plain_text});
  } catch (const std::exception& e) {
    throw ApiError::invalid(fmt::format("the prompt does not tokenize: {}", e.what()),
                            templated ? "messages" : "prompt");
  }
}

}  // namespace

std::string model_name_slug(std::string_view text) {
  auto kept = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '+' || c == '-';
  };
  std::string out;
  for (char c : text) {
    if (kept(c)) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string served_model_name(const Model& model) {
  std::filesystem::path path = model.path;
  if (!path.empty() && !path.has_filename()) path = path.parent_path();  // "folder/"
  // A folder's name whole; a file's without its extension (".gguf", ".bin").
  std::error_code error;  // a path that cannot be examined is taken for a file
  std::string base = path.empty() ? std::string()
                     : std::filesystem::is_directory(path, error) ? path.filename().string()
                                                                  : path.stem().string();
  std::string name = model_name_slug(base);
  if (name.empty()) name = model_name_slug(model.name);
  return name.empty() ? "orchard" : name;
}

namespace {
void check_model_name(const std::string& name, const char* what) {
  if (name.empty()) throw Error(fmt::format("[server] the {} is empty", what));
  for (unsigned char c : name) {
    if (c <= ' ' || c == 0x7F) {
      throw Error(fmt::format("[server] the {} '{}' holds whitespace or a control character", what, name));
    }
  }
}
}  // namespace

ServedModel::ServedModel(std::shared_ptr<Engine> engine, std::string name, ServedModelOptions options)
    : engine_(std::move(engine)),
      name_(std::move(name)),
      template_(engine_->model().chat_template.empty() ? builtin_chat_template()
                                                       : engine_->model().chat_template) {
  check_model_name(name_, "model name");
  names_.push_back(name_);
  json_layout_ = options.json_layout;
  special_tokens_in_messages_ = options.special_tokens_in_messages;
  for (std::string& alias : options.aliases) {
    check_model_name(alias, "model alias");
    if (std::find(names_.begin(), names_.end(), alias) == names_.end()) names_.push_back(std::move(alias));
  }
  builtin_template_ = engine_->model().chat_template.empty();
  tool_format_ = detect_tool_call_format(template_.source());
  reasoning_format_ = detect_reasoning_format(template_.source());
  const tokenizers::Tokenizer& tok = *engine_->model().tokenizer;
  tokens_.bos_token = special_text(tok, tok.special_tokens().bos);
  tokens_.eos_token = special_text(tok, tok.special_tokens().eos);
  context_length_ = resolve_context(*engine_);
}

bool ServedModel::serves(const std::string& asked) const {
  if (asked.empty() || asked == "default") return true;
  // Ollama clients name models with a tag; the one model served is its own "latest".
  std::string_view untagged = asked;
  if (untagged.ends_with(":latest")) untagged.remove_suffix(7);
  return std::any_of(names_.begin(), names_.end(),
                     [&](const std::string& n) { return n == asked || n == untagged; });
}

struct Preparer {
  static RenderedText render(const ServedModel& model, const ChatRequest& r) {
    // The template's bound on nesting, checked before anything below copies or prints the values.
    try {
      check_template_value_depth(r.messages, "messages");
    } catch (const TemplateError& e) {
      throw ApiError::invalid(e.what(), "messages");
    }
    try {
      check_template_value_depth(r.tools_json, "tools");
    } catch (const TemplateError& e) {
      throw ApiError::invalid(e.what(), "tools");
    }
    bool tools_active = !r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::none;
    Json tools = tools_active ? r.tools_json : Json();
    try {
      Json messages = messages_for_template(model.template_.source(), model.tool_format_, r);
      return apply_chat_template_tracked(model.template_, messages, tools, /*add_generation_prompt=*/true,
                                         model.tokens_);
    } catch (const TemplateError& e) {
      // raise_exception() in templates is how they reject a conversation ("roles must alternate").
      throw ApiError::invalid(fmt::format("the model's chat template rejected the messages: {}", e.what()),
                              "messages");
    }
  }
};

PreparedRequest prepare_chat(const ServedModel& model, const ChatRequest& r) {
  PreparedRequest out;
  RenderedText rendered = Preparer::render(model, r);
  out.prompt_text = std::move(rendered.text);
  // What came from the messages and tools is plain text: a user cannot close their turn and open a
  // system one by writing the template's markup, unless the deployment allows it.
  std::vector<tokenizers::TextRange> plain_text;
  if (!model.special_tokens_in_messages()) {
    plain_text.reserve(rendered.tracked.size());
    for (const auto& [begin, end] : rendered.tracked) plain_text.push_back({begin, end});
  }
  out.request.prompt = tokenize(model, out.prompt_text, /*templated=*/true, plain_text);
  fill_common(model, r.params, out);
  out.tool_format = model.tool_format();
  ReasoningFormat reasoning = model.reasoning_format();
  // think_open only when the rendered prompt really ends inside the reasoning (templates may switch it off).
  if (reasoning == ReasoningFormat::think_open) {
    std::string_view tail = out.prompt_text;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
    if (!tail.ends_with(ReasoningMarkers{}.open)) reasoning = ReasoningFormat::think;
  }
  out.parse.reasoning = reasoning;

  std::optional<pse::Grammar> answer;
  if (r.tool_choice.mode != ToolChoice::Mode::none && !r.tools.empty()) {
    ToolGrammar tg = build_tool_grammar(r.tools_json, r.tool_choice, r.parallel_tool_calls, out.tool_format);
    answer = std::move(tg.grammar);
    out.request.grammar_special_tokens = std::move(tg.special_tokens);
    out.parse_tool_calls = true;
    out.constraint_param = "tools";
  } else {
    answer = constraint_grammar(r.params.constraint, model.json_layout());
  }
  if (answer && reasoning != ReasoningFormat::none) {
    // The constraint applies to the answer; the model thinks freely first.
    answer = wrap_with_reasoning(*answer, reasoning);
    ReasoningMarkers markers;
    out.request.grammar_special_tokens.push_back(markers.open);
    out.request.grammar_special_tokens.push_back(markers.close);
  }
  out.request.grammar = std::move(answer);
  return out;
}

PreparedRequest prepare_completion(const ServedModel& model, const CompletionRequest& r) {
  PreparedRequest out;
  if (r.prompt_text) {
    out.prompt_text = *r.prompt_text;
    out.request.prompt = tokenize(model, out.prompt_text, /*templated=*/false);
  } else {
    out.request.prompt = r.prompt_tokens;
    const tokenizers::Tokenizer& tok = *model.model().tokenizer;
    for (std::size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      if (r.prompt_tokens[i] >= static_cast<std::int32_t>(tok.vocab_size())) {
        throw ApiError::invalid(fmt::format("'prompt[{}]' is token {}, outside the vocabulary of {} tokens", i,
                                            r.prompt_tokens[i], tok.vocab_size()),
                                "prompt");
      }
    }
    if (r.echo) out.prompt_text = tok.decode(r.prompt_tokens);
  }
  if (out.request.prompt.empty()) throw ApiError::invalid("'prompt' is empty", "prompt");
  fill_common(model, r.params, out);
  // The echoed prompt comes with its tokens' logprobs, as the legacy API and vLLM give them.
  out.request.prompt_logprobs = r.echo && r.params.sampling.logprobs;
  out.request.grammar = constraint_grammar(r.params.constraint, model.json_layout());
  return out;
}

}  // namespace pie::server

// build_tool_grammar: the language of a model's answer to a set of tools, per tool-call format.
#include <set>
#include <string>
#include <vector>

#include "pie/error.h"
#include "pie/tool_calls.h"
#include "pse/error.h"
#include "tools/grammar_parts.h"

namespace pie {
namespace {

using pse::ExprId;
using pse::Grammar;
using tools_detail::add_text_not_starting_with;
using tools_detail::add_text_without;
using tools_detail::add_whitespace;

struct Tool {
  std::string name;
  nlohmann::ordered_json parameters;
  std::size_t index = 0;  // in the request's tools array, for error messages
};

std::vector<Tool> read_tools(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                             bool normalize, bool closed_objects) {
  if (!tools.is_array())
    throw RequestError("[tool_calls] tools must be an array, got " + std::string(tools.type_name()),
                       "tools");
  std::vector<Tool> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw RequestError("[tool_calls] " + where + " must be an object", "tools");
    if (auto type = t.find("type"); type != t.end() && *type != "function") continue;
    const auto function = t.find("function");
    if (function == t.end() || !function->is_object()) {
      throw RequestError("[tool_calls] " + where + ".function must be an object", "tools");
    }
    const auto name = function->find("name");
    if (name == function->end() || !name->is_string() ||
        name->get_ref<const std::string&>().empty()) {
      throw RequestError("[tool_calls] " + where + ".function.name must be a non-empty string",
                         "tools");
    }
    Tool tool{name->get<std::string>(), nlohmann::ordered_json(), i};
    if (!names.insert(tool.name).second) {
      throw RequestError(
          "[tool_calls] " + where + ": duplicate function name \"" + tool.name + "\"", "tools");
    }
    const auto params = function->find("parameters");
    nlohmann::ordered_json schema = params == function->end() ? nlohmann::ordered_json() : *params;
    if (!schema.is_null() && !schema.is_object() && !schema.is_boolean()) {
      throw RequestError(
          "[tool_calls] " + where + ".function.parameters must be a JSON Schema object",
          where + ".function.parameters");
    }
    if (normalize) {
      try {
        schema = normalize_tool_parameters(schema);
      } catch (const RequestError& e) {
        throw RequestError(std::string(e.what()) + " (in " + where + ".function.parameters)",
                           where + ".function.parameters");
      }
    } else if (schema.is_null()) {
      schema = {{"type", "object"}};
    }
    tool.parameters = closed_objects ? close_object_schemas(schema) : std::move(schema);
    if (choice.mode != ToolChoice::Mode::named || tool.name == choice.name)
      out.push_back(std::move(tool));
  }
  if (out.empty()) {
    if (choice.mode == ToolChoice::Mode::named) {
      throw RequestError(
          "[tool_calls] tool_choice names function \"" + choice.name + "\", which is not in tools",
          "tool_choice");
    }
    throw RequestError("[tool_calls] tools has no function tool", "tools");
  }
  return out;
}

class Builder {
 public:
  explicit Builder(const ToolGrammarOptions& options) : options_(options) {
    if (flexible()) {
      ws_rule_ = g_.declare_rule("ws");
      g_.define_rule(ws_rule_, add_whitespace(g_, options_.schema.max_whitespace_run));
    }
  }

  Grammar& g() { return g_; }
  // Whitespace between the wrapper's JSON tokens: none unless the layout is flexible.
  ExprId ws() { return flexible() ? g_.add_rule_ref(ws_rule_) : g_.add_empty(); }
  // Where the format writes a newline (around and between hermes blocks): that newline, or flexible
  // whitespace.
  ExprId newline() { return flexible() ? ws() : lit("\n"); }
  ExprId lit(std::string s) { return g_.add_bytes(std::move(s)); }
  ExprId seq(std::vector<ExprId> c) { return g_.add_sequence(std::move(c)); }
  ExprId alt(std::vector<ExprId> c) { return g_.add_choice(std::move(c)); }
  ExprId rule(const std::string& name, ExprId body) {
    return g_.add_rule_ref(g_.add_rule(name, body));
  }

  // The arguments object of each tool, one rule each.
  void add_arguments(const std::vector<Tool>& tools) {
    for (std::size_t k = 0; k < tools.size(); ++k) {
      pse::Grammar args;
      try {
        args = pse::json_schema_to_grammar(tools[k].parameters, options_.schema);
      } catch (const pse::SchemaError& e) {
        const std::string param =
            "tools[" + std::to_string(tools[k].index) + "].function.parameters";
        throw RequestError("[tool_calls] " + param + e.pointer() + ": " + e.what(), param);
      } catch (const pse::Error& e) {
        const std::string param =
            "tools[" + std::to_string(tools[k].index) + "].function.parameters";
        throw RequestError("[tool_calls] " + param + ": " + e.what(), param);
      }
      arguments_.push_back(rule("args_" + std::to_string(k),
                                g_.embed(args, "f" + std::to_string(k) + "_")));
    }
  }

  // {"name": "<name>", "<args_key>": <arguments>[, "id": "<9 alphanumerics>"]}, one alternative per
  // tool.
  ExprId json_call(const std::vector<Tool>& tools, const std::string& args_key, bool optional_id) {
    std::vector<ExprId> options;
    for (std::size_t k = 0; k < tools.size(); ++k) {
      const std::string name = nlohmann::ordered_json(tools[k].name).dump();
      options.push_back(seq({lit(name), ws(), lit(","), ws(), lit("\"" + args_key + "\""), ws(),
                             lit(":"), ws(), arguments_[k]}));
    }
    std::vector<ExprId> body = {lit("{"), ws(), lit("\"name\""),        ws(),
                                lit(":"), ws(), alt(std::move(options))};
    if (optional_id) {
      const ExprId id =
          g_.add_repeat(g_.add_char_class({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}}), 9, 9);
      body.push_back(g_.add_repeat(seq({ws(), lit(","), ws(), lit("\"id\""), ws(), lit(":"), ws(),
                                        lit("\""), id, lit("\"")}),
                                   0, 1));
    }
    body.push_back(ws());
    body.push_back(lit("}"));
    return rule("call", seq(std::move(body)));
  }

  // <function=NAME>{...}</function>, one alternative per tool.
  ExprId functionary_call(const std::vector<Tool>& tools) {
    std::vector<ExprId> options;
    for (std::size_t k = 0; k < tools.size(); ++k) {
      options.push_back(
          seq({lit("<function=" + tools[k].name + ">"), arguments_[k], lit("</function>")}));
    }
    return rule("call", alt(std::move(options)));
  }

  // `item` once, or (parallel) 1..max times separated by `separator`.
  ExprId repeated(ExprId item, ExprId separator, bool parallel) {
    if (!parallel || options_.max_parallel_calls <= 1) return item;
    return seq({item, g_.add_repeat(seq({separator, item}), 0, options_.max_parallel_calls - 1)});
  }

  Grammar finish(ExprId root) {
    g_.set_root(g_.add_rule("root", root));
    return std::move(g_);
  }

 private:
  bool flexible() const { return options_.schema.layout == pse::JsonLayout::kFlexible; }

  const ToolGrammarOptions& options_;
  Grammar g_;
  pse::RuleId ws_rule_ = 0;
  std::vector<ExprId> arguments_;
};

}  // namespace

ToolGrammar build_tool_grammar(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                               bool parallel_tool_calls, ToolCallFormat format,
                               const ToolGrammarOptions& options) {
  if (options.max_parallel_calls < 1 || options.max_parallel_calls > 64) {
    throw RequestError("[tool_calls] max_parallel_calls must be in [1, 64], got " +
                           std::to_string(options.max_parallel_calls),
                       "parallel_tool_calls");
  }
  ToolGrammar out;
  // Validate the tools even for "none": a malformed request is an error whatever the choice.
  const std::vector<Tool> list =
      read_tools(tools, choice, options.normalize, options.closed_objects);
  if (choice.mode == ToolChoice::Mode::none) return out;
  const bool automatic = choice.mode == ToolChoice::Mode::automatic;
  Builder b(options);
  b.add_arguments(list);
  ExprId root = 0;
  switch (format) {
    case ToolCallFormat::hermes: {
      const ExprId block =
          b.seq({b.lit("<tool_call>"), b.newline(), b.json_call(list, "arguments", false),
                 b.newline(), b.lit("</tool_call>")});
      const ExprId calls = b.repeated(block, b.newline(), parallel_tool_calls);
      root = automatic ? b.seq({add_text_without(b.g(), "<tool_call>", "content_"),
                                b.g().add_repeat(calls, 0, 1)})
                       : calls;
      out.special_tokens = {"<tool_call>", "</tool_call>"};
      break;
    }
    case ToolCallFormat::mistral:
    case ToolCallFormat::firefunction_v2: {
      const bool mistral = format == ToolCallFormat::mistral;
      const std::string marker = mistral ? "[TOOL_CALLS]" : "functools";
      const ExprId call = b.json_call(list, "arguments", mistral);
      const ExprId calls =
          b.seq({b.lit(marker + "["), b.ws(),
                 b.repeated(call, b.seq({b.ws(), b.lit(","), b.ws()}), parallel_tool_calls), b.ws(),
                 b.lit("]")});
      root =
          automatic
              ? b.seq({add_text_without(b.g(), marker, "content_"), b.g().add_repeat(calls, 0, 1)})
              : calls;
      out.special_tokens = {marker};
      break;
    }
    case ToolCallFormat::functionary_v3_1: {
      const ExprId calls = b.repeated(b.functionary_call(list), b.ws(), parallel_tool_calls);
      root = automatic ? b.seq({add_text_without(b.g(), "<function=", "content_"),
                                b.g().add_repeat(calls, 0, 1)})
                       : calls;
      out.special_tokens = {"<function=", "</function>"};
      break;
    }
    case ToolCallFormat::llama3_json: {
      const ExprId call = b.json_call(list, "parameters", false);
      const ExprId calls =
          b.seq({b.g().add_repeat(b.lit("<|python_tag|>"), 0, 1),
                 b.repeated(call, b.seq({b.ws(), b.lit(";"), b.ws()}), parallel_tool_calls)});
      if (automatic) {
        // No marker: text that cannot be mistaken for a call (does not start with "{",
        // "<|python_tag|>" or whitespace), or calls.
        auto& g = b.g();
        const ExprId any = g.add_repeat(g.add_char_class({}, true), 0, pse::kUnbounded);
        const ExprId text = b.alt(
            {g.add_empty(),
             b.seq({g.add_char_class(
                        {{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}, {'<', '<'}, {'{', '{'}}, true),
                    any}),
             b.seq({b.lit("<"), add_text_not_starting_with(g, "|python_tag|>")})});
        root = b.alt({b.rule("content", text), calls});
      } else {
        root = calls;
      }
      out.special_tokens = {"<|python_tag|>"};
      break;
    }
    case ToolCallFormat::generic: {
      const ExprId call = b.json_call(list, "arguments", false);
      const ExprId calls = b.seq(
          {b.lit("{"), b.ws(), b.lit("\"tool_calls\""), b.ws(), b.lit(":"), b.ws(), b.lit("["),
           b.ws(), b.repeated(call, b.seq({b.ws(), b.lit(","), b.ws()}), parallel_tool_calls),
           b.ws(), b.lit("]"), b.ws(), b.lit("}")});
      if (automatic) {
        const ExprId str = b.g().embed(
            pse::json_schema_to_grammar(nlohmann::ordered_json{{"type", "string"}}, options.schema),
            "content_");
        const ExprId content = b.seq({b.lit("{"), b.ws(), b.lit("\"content\""), b.ws(), b.lit(":"),
                                      b.ws(), str, b.ws(), b.lit("}")});
        root = b.alt({calls, content});
      } else {
        root = calls;
      }
      break;
    }
  }
  out.grammar = b.finish(root);
  return out;
}

}  // namespace pie

#include "pie/modelfile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tensor/gguf.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

enum class ParamType { kInt, kFloat, kStrings, kBool };

// Ollama's parameters. All are recorded; the server and `orchard run` apply the sampling ones.
const std::vector<std::pair<std::string_view, ParamType>>& parameter_types() {
  static const std::vector<std::pair<std::string_view, ParamType>> kTypes = {
      {"num_ctx", ParamType::kInt},
      {"num_predict", ParamType::kInt},
      {"num_keep", ParamType::kInt},
      {"num_batch", ParamType::kInt},
      {"num_gpu", ParamType::kInt},
      {"num_thread", ParamType::kInt},
      {"top_k", ParamType::kInt},
      {"seed", ParamType::kInt},
      {"repeat_last_n", ParamType::kInt},
      {"mirostat", ParamType::kInt},
      {"temperature", ParamType::kFloat},
      {"top_p", ParamType::kFloat},
      {"min_p", ParamType::kFloat},
      {"typical_p", ParamType::kFloat},
      {"repeat_penalty", ParamType::kFloat},
      {"presence_penalty", ParamType::kFloat},
      {"frequency_penalty", ParamType::kFloat},
      {"mirostat_eta", ParamType::kFloat},
      {"mirostat_tau", ParamType::kFloat},
      {"stop", ParamType::kStrings},
      {"penalize_newline", ParamType::kBool},
  };
  return kTypes;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  Modelfile parse() {
    Modelfile out;
    nlohmann::json parameters = nlohmann::json::object();
    nlohmann::json messages = nlohmann::json::array();
    bool have_from = false;
    while (skip_blank_and_comments()) {
      const std::int32_t line = line_, column = column_;
      std::string word;
      while (!at_end() && !std::isspace(static_cast<unsigned char>(peek()))) word += next();
      std::string upper = word;
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char c) { return std::toupper(c); });
      skip_spaces();
      if (upper == "FROM") {
        if (have_from) fail(line, column, "a second FROM (a Modelfile has one)");
        have_from = true;
        out.from = value(line, column, upper);
      } else if (upper == "TEMPLATE") {
        out.chat_template = value(line, column, upper);
      } else if (upper == "SYSTEM") {
        out.system = value(line, column, upper);
      } else if (upper == "ADAPTER") {
        out.adapters.push_back(value(line, column, upper));
      } else if (upper == "LICENSE") {
        out.licenses.push_back(value(line, column, upper));
      } else if (upper == "PARAMETER") {
        parameter(parameters, line, column);
      } else if (upper == "MESSAGE") {
        const std::int32_t role_line = line_, role_column = column_;
        const std::string role = word_value();
        if (role != "system" && role != "user" && role != "assistant") {
          fail(role_line, role_column,
               fmt::format("MESSAGE role '{}' is not one of system, user, assistant", role));
        }
        skip_spaces();
        messages.push_back({{"role", role}, {"content", value(line, column, upper)}});
      } else {
        fail(line, column,
             fmt::format("unknown instruction '{}' (FROM, PARAMETER, TEMPLATE, SYSTEM, ADAPTER, "
                         "LICENSE, MESSAGE)",
                         word));
      }
    }
    if (!have_from) fail(line_, column_, "no FROM instruction (the model to start from)");
    if (!parameters.empty()) out.parameters = parameters.dump();
    if (!messages.empty()) out.messages = messages.dump();
    return out;
  }

 private:
  [[noreturn]] void fail(std::int32_t line, std::int32_t column, const std::string& what) const {
    throw ModelfileError(fmt::format("[modelfile] {}:{}:{}: {}", file_, line, column, what), line,
                         column);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }
  char next() {
    const char c = text_[pos_++];
    if (c == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    return c;
  }
  void skip_spaces() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r')) next();
  }
  // Moves to the next instruction; false at the end.
  bool skip_blank_and_comments() {
    while (!at_end()) {
      skip_spaces();
      if (at_end()) return false;
      if (peek() == '#') {
        while (!at_end() && peek() != '\n') next();
      } else if (peek() == '\n') {
        next();
      } else {
        return true;
      }
    }
    return false;
  }
  // One word (up to whitespace), for PARAMETER's name and MESSAGE's role.
  std::string word_value() {
    std::string out;
    while (!at_end() && !std::isspace(static_cast<unsigned char>(peek()))) out += next();
    return out;
  }
  // The rest of the line, a "quoted" or a """triple quoted""" string; then the end of the line.
  std::string value(std::int32_t line, std::int32_t column, const std::string& instruction) {
    std::string out;
    const std::int32_t start_line = line_, start_column = column_;
    if (text_.substr(pos_).starts_with("\"\"\"")) {
      for (int i = 0; i < 3; ++i) next();
      const std::size_t end = text_.find("\"\"\"", pos_);
      if (end == std::string_view::npos)
        fail(start_line, start_column, "unterminated \"\"\" string");
      while (pos_ < end) out += next();
      for (int i = 0; i < 3; ++i) next();
    } else if (!at_end() && peek() == '"') {
      next();
      while (true) {
        if (at_end() || peek() == '\n') fail(start_line, start_column, "unterminated \" string");
        char c = next();
        if (c == '"') break;
        if (c == '\\' && !at_end() && (peek() == '"' || peek() == '\\')) c = next();
        out += c;
      }
    } else {
      while (!at_end() && peek() != '\n') out += next();
      while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
      if (out.empty()) fail(line, column, fmt::format("{} needs a value", instruction));
      return out;
    }
    skip_spaces();
    if (!at_end() && peek() != '\n' && peek() != '#') {
      fail(line_, column_, fmt::format("unexpected text after {}'s value", instruction));
    }
    return out;
  }
  void parameter(nlohmann::json& parameters, std::int32_t line, std::int32_t column) {
    const std::int32_t name_line = line_, name_column = column_;
    const std::string name = word_value();
    if (name.empty()) fail(line, column, "PARAMETER needs a name and a value");
    const auto& types = parameter_types();
    const auto it =
        std::find_if(types.begin(), types.end(), [&](const auto& p) { return p.first == name; });
    if (it == types.end())
      fail(name_line, name_column, fmt::format("unknown parameter '{}'", name));
    skip_spaces();
    const std::int32_t value_line = line_, value_column = column_;
    const std::string text = value(line, column, "PARAMETER " + name);
    auto bad = [&](const char* what) {
      fail(value_line, value_column,
           fmt::format("parameter '{}' must be {}, got '{}'", name, what, text));
    };
    switch (it->second) {
      case ParamType::kInt: {
        long long v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size()) bad("an integer");
        parameters[name] = v;
        break;
      }
      case ParamType::kFloat: {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
          bad("a number");
        parameters[name] = v;
        break;
      }
      case ParamType::kBool:
        if (text != "true" && text != "false") bad("true or false");
        parameters[name] = text == "true";
        break;
      case ParamType::kStrings:
        if (!parameters.contains(name)) parameters[name] = nlohmann::json::array();
        parameters[name].push_back(text);
        break;
    }
  }

  std::string_view text_;
  std::string_view file_;
  std::size_t pos_ = 0;
  std::int32_t line_ = 1;
  std::int32_t column_ = 1;
};

std::string quoted(const std::string& text) {
  return text.find('\n') == std::string::npos && text.find('"') == std::string::npos
             ? text
             : "\"\"\"" + text + "\"\"\"";
}

}  // namespace

Modelfile parse_modelfile(std::string_view text, std::string_view file_name) {
  return Parser(text, file_name).parse();
}

StoredModel create_model(const ModelStore& store, std::string_view name, const Modelfile& modelfile,
                         const fs::path& base_dir, const StoreProgress& progress) {
  ModelName::parse(name);  // a bad name is refused before anything is stored
  ModelRecipe recipe;
  std::string digest;
  std::string source;
  const fs::path from_path =
      fs::path(modelfile.from).is_absolute() ? fs::path(modelfile.from) : base_dir / modelfile.from;
  std::error_code ec;
  if (fs::is_regular_file(from_path, ec)) {
    try {
      tensor::gguf::File::open(from_path);
    } catch (const std::exception& e) {
      throw ModelError(
          fmt::format("[create] FROM {}: not a GGUF model file: {}", from_path.string(), e.what()));
    }
    digest = store.put_blob_file(from_path, progress);
    source = fs::absolute(from_path).string();
  } else if (ModelName::valid(modelfile.from) && store.contains(modelfile.from)) {
    const StoredModel base = store.find(modelfile.from);
    digest = base.digest;
    source = base.source;
    recipe.chat_template = base.chat_template;
    recipe.system = base.system;
    recipe.parameters = base.parameters;
    recipe.licenses = base.licenses;
    recipe.adapters = base.adapters;
    recipe.messages = base.messages;
  } else {
    throw ModelNotFoundError(
        fmt::format("[create] FROM '{}': no such file, nor a model stored in {}", modelfile.from,
                    store.root().string()));
  }
  if (!modelfile.chat_template.empty()) recipe.chat_template = modelfile.chat_template;
  if (!modelfile.system.empty()) recipe.system = modelfile.system;
  if (!modelfile.parameters.empty()) recipe.parameters = modelfile.parameters;
  if (!modelfile.licenses.empty()) recipe.licenses = modelfile.licenses;
  if (!modelfile.messages.empty()) recipe.messages = modelfile.messages;
  for (const std::string& adapter : modelfile.adapters) {
    const fs::path path = fs::path(adapter).is_absolute() ? fs::path(adapter) : base_dir / adapter;
    if (!fs::is_regular_file(path, ec)) {
      throw ModelError(fmt::format("[create] ADAPTER {}: no such file", path.string()));
    }
    recipe.adapters.push_back(path);
  }
  return store.write_model(name, digest, recipe, source);
}

nlohmann::json sampling_options(const StoredModel& model) {
  static constexpr std::string_view kSampling[] = {"temperature",
                                                   "top_p",
                                                   "top_k",
                                                   "min_p",
                                                   "seed",
                                                   "stop",
                                                   "repeat_penalty",
                                                   "presence_penalty",
                                                   "frequency_penalty",
                                                   "num_predict"};
  nlohmann::json out = nlohmann::json::object();
  if (model.parameters.empty()) return out;
  const nlohmann::json params = nlohmann::json::parse(model.parameters, nullptr, false);
  if (!params.is_object()) return out;
  for (std::string_view key : kSampling) {
    if (params.contains(key)) out[std::string(key)] = params[std::string(key)];
  }
  return out;
}

nlohmann::json openai_sampling_fields(const StoredModel& model) {
  nlohmann::json out = sampling_options(model);
  if (out.contains("num_predict")) {
    if (out["num_predict"].is_number_integer() && out["num_predict"].get<std::int64_t>() > 0) {
      out["max_tokens"] = out["num_predict"];
    }
    out.erase("num_predict");
  }
  if (out.contains("repeat_penalty")) {
    out["repetition_penalty"] = out["repeat_penalty"];
    out.erase("repeat_penalty");
  }
  return out;
}

std::string modelfile_text(const StoredModel& model) {
  std::string out = fmt::format("FROM {}\n", model.name.str());
  if (!model.chat_template.empty())
    out += fmt::format("TEMPLATE {}\n", quoted(model.chat_template));
  if (!model.system.empty()) out += fmt::format("SYSTEM {}\n", quoted(model.system));
  if (!model.parameters.empty()) {
    const nlohmann::json params = nlohmann::json::parse(model.parameters, nullptr, false);
    if (params.is_object()) {
      for (const auto& [key, value] : params.items()) {
        if (value.is_array()) {
          for (const auto& v : value)
            out += fmt::format("PARAMETER {} {}\n", key, quoted(v.get<std::string>()));
        } else {
          out += fmt::format("PARAMETER {} {}\n", key, value.dump());
        }
      }
    }
  }
  for (const fs::path& adapter : model.adapters)
    out += fmt::format("ADAPTER {}\n", adapter.string());
  for (const std::string& license : model.licenses)
    out += fmt::format("LICENSE {}\n", quoted(license));
  return out;
}

}  // namespace pie

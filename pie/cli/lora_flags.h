// --lora [NAME=]PATH[:SCALE] (repeatable), the LoRA option of the commands that generate (run, chat,
// serve): each adapter (a PEFT folder or a GGUF adapter) is attached to the engine under NAME (default:
// the folder's or file's stem). run and chat apply every one, stacked, at its SCALE (default 1); serve
// attaches them for requests to select (`model` naming one, or `lora`).
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "pie/engine.h"

namespace orchard::cli {

struct LoraSpec {
  std::string name;
  std::filesystem::path path;
  float scale = 1.0f;
  bool scale_given = false;  // :SCALE was written
};

// Throws UsageError on an empty path or a SCALE that is not a finite number.
inline LoraSpec parse_lora_spec(const std::string& text) {
  LoraSpec spec;
  std::string rest = text;
  // NAME= only before the path's first separator, so that a path with '=' in a folder name still reads.
  const auto eq = rest.find('=');
  if (eq != std::string::npos && rest.find('/') > eq) {
    spec.name = rest.substr(0, eq);
    rest = rest.substr(eq + 1);
  }
  // :SCALE when what follows the last ':' is a number (a path may hold ':' too).
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos && colon + 1 < rest.size()) {
    const std::string tail = rest.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    if (end != nullptr && *end == '\0') {
      if (!(std::fabs(v) <= 1e6)) throw UsageError("--lora: SCALE must be a number in [-1e6, 1e6] in '" + text + "'");
      spec.scale = static_cast<float>(v);
      spec.scale_given = true;
      rest = rest.substr(0, colon);
    }
  }
  if (rest.empty()) throw UsageError("--lora: no PATH in '" + text + "' (expected [NAME=]PATH[:SCALE])");
  spec.path = rest;
  if (spec.name.empty()) {
    std::filesystem::path p = spec.path;
    if (!p.has_filename()) p = p.parent_path();
    spec.name = p.stem().string();
  }
  if (spec.name.empty()) throw UsageError("--lora: no NAME for '" + text + "'");
  return spec;
}

struct LoraFlags {
  std::vector<std::string> values;

  void add_options(ArgParser& p) {
    p.multi_option("lora", 0, "[NAME=]PATH[:SCALE]",
                   "a LoRA adapter (PEFT folder or GGUF adapter) at SCALE (default 1); repeatable (stacked)",
                   &values);
  }

  std::vector<LoraSpec> specs() const {
    std::vector<LoraSpec> out;
    for (const std::string& v : values) out.push_back(parse_lora_spec(v));
    return out;
  }

  // Attaches every adapter to `engine` (pie::LoraError when one cannot be read or does not fit) and
  // returns them as a request's adapters.
  std::vector<pie::LoraRequest> attach(pie::Engine& engine) const {
    std::vector<pie::LoraRequest> out;
    for (const LoraSpec& s : specs()) {
      engine.attach_lora(s.name, s.path);
      out.push_back({s.name, s.scale});
    }
    return out;
  }

  // The same as the chat request field `lora` ([{id, scale}]).
  static nlohmann::ordered_json field(const std::vector<pie::LoraRequest>& loras) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const pie::LoraRequest& l : loras) out.push_back({{"id", l.name}, {"scale", l.scale}});
    return out;
  }
};

}  // namespace orchard::cli

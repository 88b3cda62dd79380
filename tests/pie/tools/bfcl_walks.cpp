// BFCL random walks through tool-call grammars.
#include "bfcl_walks.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "llama3_vocabulary.h"
#include "pse/compiler.h"
#include "pse/matcher.h"

namespace pie::testing {
namespace {

bool all_bytes_in(const std::string& s, std::string_view set) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return set.find(c) != std::string_view::npos; });
}

nlohmann::ordered_json to_tools(const nlohmann::ordered_json& functions) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const auto& f : functions) tools.push_back({{"type", "function"}, {"function", f}});
  return tools;
}

}  // namespace

std::shared_ptr<const pse::Vocabulary> llama3_tool_vocabulary(
    const std::string& encoder_json, const std::vector<std::string>& text_specials) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<std::string>>,
                  std::shared_ptr<const pse::Vocabulary>>
      cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[{encoder_json, text_specials}];
  if (slot) return slot;
  const auto base = pse::testing::load_llama3_vocabulary(encoder_json);
  std::vector<std::string> tokens;
  std::vector<pse::TokenId> special;
  for (std::size_t i = 0; i < base->n_tokens(); ++i) {
    const auto id = static_cast<pse::TokenId>(i);
    tokens.push_back(base->token_bytes(id));
    const bool as_text =
        std::find(text_specials.begin(), text_specials.end(), tokens.back()) != text_specials.end();
    if (base->is_special(id) && !base->is_eos(id) && !as_text) special.push_back(id);
  }
  slot = std::make_shared<const pse::Vocabulary>(std::move(tokens), std::move(special),
                                                 base->eos_ids());
  return slot;
}

EntryResult walk_entry(const nlohmann::ordered_json& entry, bool parallel,
                       const std::string& encoder_json, const WalkOptions& options) {
  EntryResult r;
  r.id = entry.value("id", "");
  r.parallel = parallel;
  const auto tools = to_tools(entry.at("function"));
  std::optional<pse::CompiledGrammar> compiled;
  try {
    for (const auto& f : entry.at("function")) {
      r.tools[f.at("name").get<std::string>()] =
          normalize_tool_parameters(f.value("parameters", nlohmann::ordered_json()));
    }
    ToolGrammarOptions grammar_options;
    grammar_options.closed_objects = options.closed_objects;
    const ToolGrammar tg = build_tool_grammar(tools, {ToolChoice::Mode::required, ""}, parallel,
                                              options.format, grammar_options);
    const auto vocab = llama3_tool_vocabulary(encoder_json, tg.special_tokens);
    pse::CompileOptions co;
    co.tables = options.precompute ? pse::TableBuild::kInCompile : pse::TableBuild::kAtFirstUse;
    co.max_compile_ms = options.max_compile_ms;
    const auto t0 = std::chrono::steady_clock::now();
    compiled = pse::compile_grammar(*tg.grammar, vocab, co);
    r.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.compiled = true;
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  const pse::Vocabulary& vocab = compiled->vocabulary();
  std::mt19937_64 rng(options.seed ^ std::hash<std::string>{}(r.id));
  for (int w = 0; w < options.walks; ++w) {
    WalkResult walk;
    pse::Matcher m(*compiled);
    std::vector<std::uint32_t> mask(m.mask_words());
    std::vector<pse::TokenId> allowed, tier;
    while (walk.n_tokens < options.max_tokens) {
      const std::string forced = m.forced_continuation(64);
      if (!forced.empty()) {
        if (!m.accept_bytes(forced)) break;  // cannot happen: the continuation is valid
        walk.text += forced;
        ++walk.n_tokens;
        continue;
      }
      // Where the output may end (after a call, with parallel calls on), stop half of the time, so
      // walks also write several calls; past half the token budget, always.
      if (m.can_stop() &&
          (m.must_stop() || walk.n_tokens > options.max_tokens / 2 || rng() % 2 == 0)) {
        walk.finished = true;
        break;
      }
      m.fill_next_token_bitmask(mask);
      allowed.clear();
      for (std::size_t word = 0; word < mask.size(); ++word) {
        for (std::uint32_t bits = mask[word]; bits != 0; bits &= bits - 1) {
          const auto id =
              static_cast<pse::TokenId>(word * 32 + static_cast<std::size_t>(__builtin_ctz(bits)));
          if (!vocab.is_eos(id)) allowed.push_back(id);
        }
      }
      if (allowed.empty()) break;
      const std::vector<pse::TokenId>* pool = &allowed;
      if (walk.n_tokens > options.bias_after) {
        // Closing bias: tokens made only of closers, else separators, else JSON punctuation and
        // digits, else the shortest allowed.
        for (std::string_view set :
             {std::string_view("\"}]"), std::string_view(",:"),
              std::string_view("\"}],:[{0123456789-. "), std::string_view()}) {
          tier.clear();
          if (set.empty()) {
            std::size_t shortest = SIZE_MAX;
            for (auto id : allowed) shortest = std::min(shortest, vocab.token_bytes(id).size());
            for (auto id : allowed) {
              if (vocab.token_bytes(id).size() == shortest) tier.push_back(id);
            }
          } else {
            for (auto id : allowed) {
              if (all_bytes_in(vocab.token_bytes(id), set)) tier.push_back(id);
            }
          }
          if (!tier.empty()) break;
        }
        pool = &tier;
      }
      const pse::TokenId id = (*pool)[rng() % pool->size()];
      if (!m.accept_token(id)) break;
      walk.text += vocab.token_bytes(id);
      ++walk.n_tokens;
    }
    ParseOptions parse_options;
    parse_options.id_seed = options.seed;
    walk.parsed = parse_tool_calls(walk.text, options.format, parse_options);
    r.walks.push_back(std::move(walk));
  }
  return r;
}

nlohmann::ordered_json entry_json(const EntryResult& r, const WalkOptions& options) {
  nlohmann::ordered_json j;
  j["id"] = r.id;
  j["format"] = tool_call_format_name(options.format);
  j["parallel"] = r.parallel;
  j["compiled"] = r.compiled;
  if (!r.error.empty()) j["error"] = r.error;
  j["compile_ms"] = r.compile_ms;
  j["tools"] = r.tools;
  j["walks"] = nlohmann::ordered_json::array();
  for (const WalkResult& w : r.walks) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (const ToolCall& c : w.parsed.tool_calls)
      calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
    // The text may hold invalid UTF-8 only if the grammar allowed it; replace so the line stays
    // JSON.
    j["walks"].push_back({{"finished", w.finished},
                          {"n_tokens", w.n_tokens},
                          {"content", w.parsed.content},
                          {"calls", std::move(calls)},
                          {"text", w.text}});
  }
  return j;
}

}  // namespace pie::testing

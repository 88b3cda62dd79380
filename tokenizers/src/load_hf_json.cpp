// Loads a Hugging Face tokenizer.json: models BPE (byte-level or SentencePiece-style with byte fallback)
// and WordPiece; the common normalizers, pre-tokenizers, decoders, post-processors and added tokens.
#include <fmt/format.h>
#include <re2/re2.h>

#include <nlohmann/json.hpp>

#include "tokenizer_impl.h"

namespace tokenizers {

namespace {

using nlohmann::json;

class JsonLoader {
 public:
  JsonLoader(std::string name, Tokenizer::Impl& impl) : name_(std::move(name)), impl_(impl) {}

  FormatError error(std::string_view path, std::string_view what) const {
    return FormatError(fmt::format("[tokenizer] {}: {}: {}", name_, path, what));
  }
  const json& member(const json& obj, std::string_view path, const char* key) const {
    if (!obj.is_object()) throw error(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) throw error(fmt::format("{}/{}", path, key), "missing");
    return *it;
  }
  std::string str(const json& obj, std::string_view path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_string()) throw error(fmt::format("{}/{}", path, key), "expected a string");
    return v.get<std::string>();
  }
  std::string str_or(const json& obj, std::string_view path, const char* key, std::string dflt) const {
    if (!obj.is_object()) throw error(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_string()) throw error(fmt::format("{}/{}", path, key), "expected a string");
    return it->get<std::string>();
  }
  bool flag(const json& obj, std::string_view path, const char* key, bool dflt) const {
    if (!obj.is_object()) throw error(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) throw error(fmt::format("{}/{}", path, key), "expected true or false");
    return it->get<bool>();
  }
  // A {"String": s} or {"Regex": r} pattern, as a regex.
  std::string pattern(const json& obj, std::string_view path) const {
    const json& p = member(obj, path, "pattern");
    const std::string pp = fmt::format("{}/pattern", path);
    if (p.is_object() && p.contains("Regex")) return str(p, pp, "Regex");
    if (p.is_object() && p.contains("String")) return RE2::QuoteMeta(str(p, pp, "String"));
    throw error(pp, "expected {\"String\": ...} or {\"Regex\": ...}");
  }

  // Nested Sequences deeper than this are corrupt, not a real file (and would exhaust the stack).
  static constexpr int kMaxDepth = 32;
  struct DepthGuard {
    const JsonLoader& loader;
    std::string_view path;
    DepthGuard(const JsonLoader& l, std::string_view p) : loader(l), path(p) {
      if (++loader.depth_ > kMaxDepth) {
        --loader.depth_;
        throw loader.error(p, fmt::format("nested more than {} levels deep", kMaxDepth));
      }
    }
    ~DepthGuard() { --loader.depth_; }
  };

  void normalizer(const json& n, const std::string& path) {
    if (n.is_null()) return;
    const DepthGuard guard(*this, path);
    const std::string type = str(n, path, "type");
    using Kind = detail::NormalizerStep::Kind;
    detail::NormalizerStep st;
    if (type == "Sequence") {
      const json& list = member(n, path, "normalizers");
      if (!list.is_array()) throw error(path + "/normalizers", "expected an array");
      for (std::size_t i = 0; i < list.size(); ++i) normalizer(list[i], fmt::format("{}/normalizers/{}", path, i));
      return;
    } else if (type == "Prepend") {
      st.kind = Kind::kPrepend;
      st.text = str(n, path, "prepend");
    } else if (type == "Replace") {
      const std::string content = str(n, path, "content");
      const json& p = member(n, path, "pattern");
      if (p.is_object() && p.contains("String")) {
        st.kind = Kind::kReplace;
        st.pattern = str(p, path + "/pattern", "String");
        st.text = content;
      } else {
        st.kind = Kind::kReplaceRegex;
        RE2::Options o;
        o.set_log_errors(false);
        auto re = std::make_shared<RE2>(pattern(n, path), o);
        if (!re->ok()) throw error(path + "/pattern", fmt::format("regex does not compile: {}", re->error()));
        st.regex = re;
        // RE2 rewrite strings treat backslashes specially.
        for (char c : content) {
          if (c == '\\') st.text += '\\';
          st.text += c;
        }
      }
    } else if (type == "NFC") {
      st.kind = Kind::kNfc;
    } else if (type == "NFD") {
      st.kind = Kind::kNfd;
    } else if (type == "Lowercase") {
      st.kind = Kind::kLowercase;
    } else if (type == "StripAccents") {
      st.kind = Kind::kStripAccents;
    } else if (type == "Strip") {
      st.kind = Kind::kStrip;
      st.left = flag(n, path, "strip_left", true);
      st.right = flag(n, path, "strip_right", true);
    } else if (type == "BertNormalizer") {
      st.kind = Kind::kBert;
      st.clean_text = flag(n, path, "clean_text", true);
      st.handle_chinese_chars = flag(n, path, "handle_chinese_chars", true);
      st.lowercase = flag(n, path, "lowercase", true);
      st.strip_accents = flag(n, path, "strip_accents", st.lowercase);
    } else {
      throw error(path + "/type", fmt::format("normalizer \"{}\" is not supported", type));
    }
    impl_.normalizer.add(std::move(st));
  }

  static detail::SplitBehavior behavior(const std::string& b) {
    if (b == "Removed") return detail::SplitBehavior::kRemoved;
    if (b == "MergedWithPrevious") return detail::SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return detail::SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return detail::SplitBehavior::kContiguous;
    return detail::SplitBehavior::kIsolated;
  }

  void pre_tokenizer(const json& p, const std::string& path) {
    if (p.is_null()) return;
    const DepthGuard guard(*this, path);
    const std::string type = str(p, path, "type");
    const std::string where = name_ + ": " + path;
    if (type == "Sequence") {
      const json& list = member(p, path, "pretokenizers");
      if (!list.is_array()) throw error(path + "/pretokenizers", "expected an array");
      for (std::size_t i = 0; i < list.size(); ++i) pre_tokenizer(list[i], fmt::format("{}/pretokenizers/{}", path, i));
    } else if (type == "ByteLevel") {
      byte_level_ = true;
      if (flag(p, path, "add_prefix_space", false)) {
        detail::NormalizerStep st;
        st.kind = detail::NormalizerStep::Kind::kPrepend;
        st.text = " ";
        st.pattern = " ";
        late_normalizers_.push_back(st);
      }
      if (flag(p, path, "use_regex", true)) {
        impl_.pre.add_regex(std::string(detail::kGpt2Regex) + "|\\s+", detail::SplitBehavior::kIsolated, false, where);
      }
    } else if (type == "Split") {
      const std::string b = str_or(p, path, "behavior", "Isolated");
      impl_.pre.add_regex(pattern(p, path), behavior(b), flag(p, path, "invert", false), where);
    } else if (type == "Punctuation") {
      detail::PreTokenizerStep st;
      st.kind = detail::PreTokenizerStep::Kind::kPunctuation;
      st.behavior = behavior(str_or(p, path, "behavior", "Isolated"));
      impl_.pre.add_step(st);
    } else if (type == "Digits") {
      // Hugging Face's Digits splits ASCII digits only (char::is_ascii_digit).
      impl_.pre.add_regex(flag(p, path, "individual_digits", false) ? "[0-9]" : "[0-9]+",
                          detail::SplitBehavior::kIsolated, false, where);
    } else if (type == "Whitespace") {
      impl_.pre.add_regex("\\w+|[^\\w\\s]+", detail::SplitBehavior::kRemoved, true, where);
    } else if (type == "WhitespaceSplit") {
      impl_.pre.add_regex("\\s+", detail::SplitBehavior::kRemoved, false, where);
    } else if (type == "BertPreTokenizer") {
      detail::PreTokenizerStep st;
      st.kind = detail::PreTokenizerStep::Kind::kBertSplit;
      impl_.pre.add_step(st);
    } else if (type == "CharDelimiterSplit") {
      impl_.pre.add_regex(RE2::QuoteMeta(str(p, path, "delimiter")), detail::SplitBehavior::kRemoved, false, where);
    } else if (type == "Metaspace") {
      const std::string rep = str_or(p, path, "replacement", "\xE2\x96\x81");
      std::string scheme = str_or(p, path, "prepend_scheme", "");
      if (scheme.empty()) scheme = flag(p, path, "add_prefix_space", true) ? "always" : "never";
      detail::NormalizerStep r;
      r.kind = detail::NormalizerStep::Kind::kReplace;
      r.pattern = " ";
      r.text = rep;
      late_normalizers_.push_back(r);
      if (scheme != "never") {
        detail::NormalizerStep st;
        st.kind = detail::NormalizerStep::Kind::kPrepend;
        st.text = rep;
        st.pattern = rep;
        st.first_only = scheme == "first";
        late_normalizers_.push_back(st);
        impl_.strip_leading_space = true;
      }
      if (flag(p, path, "split", true)) {
        if (rep != "\xE2\x96\x81") throw error(path + "/replacement", "only U+2581 is supported as a splitting replacement");
        detail::PreTokenizerStep st;
        st.kind = detail::PreTokenizerStep::Kind::kMetaspaceSplit;
        st.behavior = detail::SplitBehavior::kMergedWithNext;
        impl_.pre.add_step(st);
      }
    } else {
      throw error(path + "/type", fmt::format("pre-tokenizer \"{}\" is not supported", type));
    }
  }

  // Ids of the special tokens around the sequence in a post-processor.
  void post_processor(const json& p, const std::string& path) {
    if (p.is_null()) return;
    const DepthGuard guard(*this, path);
    const std::string type = str(p, path, "type");
    if (type == "Sequence") {
      const json& list = member(p, path, "processors");
      if (!list.is_array()) throw error(path + "/processors", "expected an array");
      for (std::size_t i = 0; i < list.size(); ++i) post_processor(list[i], fmt::format("{}/processors/{}", path, i));
    } else if (type == "TemplateProcessing") {
      const json& single = member(p, path, "single");
      if (!single.is_array()) throw error(path + "/single", "expected an array");
      const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
      bool seen_sequence = false;
      for (std::size_t i = 0; i < single.size(); ++i) {
        const std::string ip = fmt::format("{}/single/{}", path, i);
        const json& item = single[i];
        if (item.is_object() && item.contains("Sequence")) {
          seen_sequence = true;
          continue;
        }
        if (!item.is_object() || !item.contains("SpecialToken")) throw error(ip, "expected Sequence or SpecialToken");
        const std::string tok = str(item["SpecialToken"], ip + "/SpecialToken", "id");
        TokenId id = -1;
        if (specials.is_object() && specials.contains(tok)) {
          const json& ids = member(specials[tok], path + "/special_tokens/" + tok, "ids");
          if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer()) {
            throw error(path + "/special_tokens/" + tok + "/ids", "expected one integer id");
          }
          id = ids[0].get<TokenId>();
        } else if (auto it = vocab_ids_.find(tok); it != vocab_ids_.end()) {
          id = it->second;
        } else {
          throw error(ip, fmt::format("special token \"{}\" is not in the vocabulary", tok));
        }
        if (!seen_sequence) {
          impl_.special.bos = id;
          impl_.add_bos = true;
        } else {
          impl_.special.eos = id;
          impl_.add_eos = true;
        }
      }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      for (const char* key : {"cls", "sep"}) {
        const json& pair = member(p, path, key);
        if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
          throw error(fmt::format("{}/{}", path, key), "expected [token, id]");
        }
        const TokenId id = pair[1].get<TokenId>();
        if (std::string_view(key) == "cls") {
          impl_.special.cls = impl_.special.bos = id;
          impl_.add_bos = true;
        } else {
          impl_.special.sep = impl_.special.eos = id;
          impl_.add_eos = true;
        }
      }
    } else if (type == "ByteLevel") {
      // Offsets only.
    } else {
      throw error(path + "/type", fmt::format("post-processor \"{}\" is not supported", type));
    }
  }

  void decoder(const json& d, const std::string& path) {
    if (d.is_null()) return;
    const DepthGuard guard(*this, path);
    const std::string type = str(d, path, "type");
    if (type == "Sequence") {
      const json& list = member(d, path, "decoders");
      if (!list.is_array()) throw error(path + "/decoders", "expected an array");
      for (std::size_t i = 0; i < list.size(); ++i) decoder(list[i], fmt::format("{}/decoders/{}", path, i));
    } else if (type == "Strip") {
      const std::string content = str_or(d, path, "content", " ");
      if (content == " " && d.contains("start") && d["start"].is_number_integer() && d["start"].get<int>() > 0) {
        impl_.strip_leading_space = true;
      }
    } else if (type == "Metaspace") {
      const std::string scheme = str_or(d, path, "prepend_scheme", "");
      if (scheme == "always" || scheme == "first" || (scheme.empty() && flag(d, path, "add_prefix_space", true))) {
        impl_.strip_leading_space = true;
      }
    } else if (type == "WordPiece") {
      impl_.strip_leading_space = true;
    }
    // ByteLevel, ByteFallback, Fuse, Replace: what token_bytes() already does.
  }

  void load(const std::string& content) {
    json j;
    try {
      j = json::parse(content);
    } catch (const json::exception& e) {
      throw FormatError(fmt::format("[tokenizer] {}: malformed JSON: {}", name_, e.what()));
    }
    if (!j.is_object()) throw error("/", "expected an object");
    const json& model = member(j, "", "model");
    std::string type = str_or(model, "/model", "type", "");
    if (type.empty()) type = model.contains("merges") ? "BPE" : "WordPiece";
    const json& vocab = member(model, "/model", "vocab");
    if (!vocab.is_object()) throw error("/model/vocab", type == "Unigram" ? "Unigram models are not supported" : "expected an object");
    if (type != "BPE" && type != "WordPiece") throw error("/model/type", fmt::format("model \"{}\" is not supported (BPE and WordPiece are)", type));

    // Vocabulary and added tokens.
    std::int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer()) throw error("/model/vocab/" + it.key(), "expected an integer id");
      const std::int64_t id = it.value().get<std::int64_t>();
      if (id < 0 || id > 0x7FFFFFF) throw error("/model/vocab/" + it.key(), fmt::format("id {} is out of range", id));
      max_id = std::max(max_id, id);
    }
    const json added = j.contains("added_tokens") && !j["added_tokens"].is_null() ? j["added_tokens"] : json::array();
    if (!added.is_array()) throw error("/added_tokens", "expected an array");
    for (std::size_t i = 0; i < added.size(); ++i) {
      const json& id = member(added[i], fmt::format("/added_tokens/{}", i), "id");
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > 0x7FFFFFF) {
        throw error(fmt::format("/added_tokens/{}/id", i), "expected an id in [0, 2^27)");
      }
      max_id = std::max(max_id, id.get<std::int64_t>());
    }
    if (max_id < 0) throw error("/model/vocab", "the vocabulary is empty");
    // Ids leave few holes in a real file; a huge id in a small file is corrupt (and would allocate).
    if (static_cast<std::size_t>(max_id) >= 2 * (vocab.size() + added.size()) + 1024) {
      throw error("/model/vocab", fmt::format("largest id {} is far beyond the {} entries", max_id, vocab.size() + added.size()));
    }
    const auto n = static_cast<std::size_t>(max_id + 1);
    impl_.texts.assign(n, std::string());
    impl_.types.assign(n, TokenType::kUnused);
    impl_.attrs.assign(n, AddedTokenAttrs{});
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = static_cast<std::size_t>(it.value().get<std::int64_t>());
      impl_.texts[id] = it.key();
      impl_.types[id] = TokenType::kNormal;
      vocab_ids_[it.key()] = static_cast<TokenId>(id);
    }
    for (std::size_t i = 0; i < added.size(); ++i) {
      const std::string path = fmt::format("/added_tokens/{}", i);
      const auto id = static_cast<std::size_t>(added[i]["id"].get<std::int64_t>());
      impl_.texts[id] = str(added[i], path, "content");
      impl_.types[id] = flag(added[i], path, "special", false) ? TokenType::kControl : TokenType::kUserDefined;
      impl_.attrs[id].lstrip = flag(added[i], path, "lstrip", false);
      impl_.attrs[id].rstrip = flag(added[i], path, "rstrip", false);
      impl_.attrs[id].single_word = flag(added[i], path, "single_word", false);
      vocab_ids_[impl_.texts[id]] = static_cast<TokenId>(id);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (impl_.types[i] == TokenType::kUnused) impl_.texts[i] = fmt::format("<unused_{}>", i);
    }

    normalizer(j.contains("normalizer") ? j["normalizer"] : json(), "/normalizer");
    pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), "/pre_tokenizer");
    for (auto& st : late_normalizers_) impl_.normalizer.add(st);
    decoder(j.contains("decoder") ? j["decoder"] : json(), "/decoder");
    if (j.contains("decoder") && j["decoder"].is_object() && j["decoder"].value("type", "") == "ByteLevel") byte_level_ = true;

    const std::string unk = str_or(model, "/model", "unk_token", "");
    if (!unk.empty()) {
      auto it = vocab_ids_.find(unk);
      if (it == vocab_ids_.end()) throw error("/model/unk_token", fmt::format("\"{}\" is not in the vocabulary", unk));
      impl_.special.unk = it->second;
      if (impl_.types[static_cast<std::size_t>(it->second)] == TokenType::kNormal) {
        impl_.types[static_cast<std::size_t>(it->second)] = TokenType::kUnknown;
      }
    }

    if (type == "BPE") {
      for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (!str_or(model, "/model", key, "").empty()) {
          throw error(fmt::format("/model/{}", key), "a non-empty value is not supported");
        }
      }
      const json& ml = member(model, "/model", "merges");
      if (!ml.is_array()) throw error("/model/merges", "expected an array");
      std::vector<std::pair<std::string, std::string>> merges;
      merges.reserve(ml.size());
      for (std::size_t i = 0; i < ml.size(); ++i) {
        const json& m = ml[i];
        const std::string mp = fmt::format("/model/merges/{}", i);
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          // Parts may themselves hold spaces (llama2's "   "): take the first split whose parts are tokens.
          std::size_t at = s.find(' ');
          if (s.find(' ', at + 1) != std::string::npos) {
            for (std::size_t c = s.find(' '); c != std::string::npos; c = s.find(' ', c + 1)) {
              if (vocab_ids_.count(s.substr(0, c)) && vocab_ids_.count(s.substr(c + 1))) {
                at = c;
                break;
              }
            }
          }
          if (at == std::string::npos || at == 0 || at + 1 >= s.size()) {
            throw error(mp, fmt::format("merge \"{}\" is not two parts separated by a space", s));
          }
          merges.emplace_back(s.substr(0, at), s.substr(at + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
          throw error(mp, "expected \"a b\" or [\"a\", \"b\"]");
        }
      }
      impl_.ignore_merges = flag(model, "/model", "ignore_merges", false);
      if (byte_level_) {
        impl_.kind = ModelKind::kBytePairByteLevel;
        detail::setup_byte_level_bpe(impl_, merges);
        // The GGUF pre-tokenizer name of the family, when the first split is one llama.cpp knows.
        impl_.pre_name = "tokenizer.json";
        const auto& steps = impl_.pre.steps();
        if (!steps.empty() && steps[0].kind == detail::PreTokenizerStep::Kind::kGpt2) impl_.pre_name = "gpt-2";
        if (!steps.empty() && steps[0].kind == detail::PreTokenizerStep::Kind::kLlama3) {
          impl_.pre_name = steps[0].max_digits == 3 ? "llama-bpe" : "qwen2";
        }
      } else {
        impl_.kind = ModelKind::kSentencePiece;
        impl_.spm_scores = false;
        impl_.byte_fallback = flag(model, "/model", "byte_fallback", false);
        impl_.fuse_unk = flag(model, "/model", "fuse_unk", false);
        detail::setup_char_bpe(impl_, merges);
        impl_.pre_name = "default";
      }
    } else {
      impl_.kind = ModelKind::kWordPiece;
      impl_.pre_name = "bert";
      const std::string prefix = str_or(model, "/model", "continuing_subword_prefix", "##");
      if (model.contains("max_input_chars_per_word")) {
        const json& m = model["max_input_chars_per_word"];
        if (!m.is_number_unsigned()) throw error("/model/max_input_chars_per_word", "expected a non-negative integer");
        impl_.wp_max_word_chars = m.get<std::size_t>();
      } else {
        impl_.wp_max_word_chars = 100;
      }
      impl_.bytes.resize(n);
      impl_.wp_keys.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::string& t = impl_.texts[i];
        const TokenType ty = impl_.types[i];
        const bool cont = !prefix.empty() && t.starts_with(prefix);
        impl_.wp_keys[i] = cont ? t.substr(prefix.size()) : t;
        if (ty == TokenType::kControl || ty == TokenType::kUnknown || ty == TokenType::kUserDefined || ty == TokenType::kUnused) {
          impl_.bytes[i] = t;
        } else {
          impl_.bytes[i] = cont ? impl_.wp_keys[i] : " " + t;
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (impl_.types[i] == TokenType::kUnused || impl_.wp_keys[i].empty()) continue;
        const bool cont = !prefix.empty() && impl_.texts[i].starts_with(prefix);
        (cont ? impl_.wp_cont : impl_.wp_start).insert(impl_.wp_keys[i], static_cast<TokenId>(i));
        impl_.wp_max_piece_bytes = std::max(impl_.wp_max_piece_bytes, impl_.wp_keys[i].size());
      }
      impl_.strip_leading_space = true;
    }

    post_processor(j.contains("post_processor") ? j["post_processor"] : json(), "/post_processor");
    // Roles the file does not name: the usual texts.
    auto by_text = [&](std::optional<TokenId>& slot, std::initializer_list<const char*> texts) {
      if (slot) return;
      for (const char* t : texts) {
        if (auto it = vocab_ids_.find(t); it != vocab_ids_.end()) {
          slot = it->second;
          return;
        }
      }
    };
    by_text(impl_.special.bos, {"<s>", "<|begin_of_text|>", "[CLS]", "<|endoftext|>"});
    by_text(impl_.special.eos, {"</s>", "<|end_of_text|>", "<|endoftext|>", "[SEP]"});
    by_text(impl_.special.unk, {"<unk>", "[UNK]"});
    by_text(impl_.special.pad, {"<pad>", "[PAD]"});
    by_text(impl_.special.sep, {"[SEP]"});
    by_text(impl_.special.cls, {"[CLS]"});
    by_text(impl_.special.mask, {"[MASK]", "<mask>"});
    impl_.finish();
  }

 private:
  std::string name_;
  Tokenizer::Impl& impl_;
  bool byte_level_ = false;
  mutable int depth_ = 0;
  std::vector<detail::NormalizerStep> late_normalizers_;
  std::unordered_map<std::string, TokenId> vocab_ids_;
};

}  // namespace

std::shared_ptr<Tokenizer::Impl> load_hf_json(const std::string& content, const std::string& name) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = name;
  JsonLoader(name, *impl).load(content);
  return impl;
}

}  // namespace tokenizers

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "pie/speculation.h"
#include "tokenizers/tokenizer.h"

namespace pie {

std::vector<std::int32_t> prompt_lookup(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                        std::int32_t min_ngram, std::int32_t max_ngram) {
  std::vector<std::int32_t> out;
  const auto n = static_cast<std::int64_t>(context.size());
  if (max_tokens <= 0 || min_ngram < 1) return out;
  for (std::int64_t g = std::min<std::int64_t>(max_ngram, n - 1); g >= min_ngram; --g) {
    const std::span<const std::int32_t> suffix = context.subspan(static_cast<std::size_t>(n - g));
    // The latest earlier place the suffix occurs (it may overlap the suffix itself, as a repeat does).
    for (std::int64_t at = n - g - 1; at >= 0; --at) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + at)) continue;
      const std::int64_t from = at + g;
      // A key that earlier places follow with different tokens predicts none of them (JSON's `":"` before
      // every value): no guess, rather than one that is mostly rejected. A shorter suffix recurs in those
      // places too, so the search ends here.
      for (std::int64_t other = at - 1; other >= 0; --other) {
        if (std::equal(suffix.begin(), suffix.end(), context.begin() + other) &&
            context[static_cast<std::size_t>(other + g)] != context[static_cast<std::size_t>(from)]) {
          return out;
        }
      }
      const std::int64_t count = std::min<std::int64_t>(max_tokens, n - from);
      out.assign(context.begin() + from, context.begin() + from + count);
      return out;
    }
  }
  return out;
}

namespace {

constexpr std::size_t kMinKeyBytes = 3, kMaxKeyBytes = 32;
constexpr std::size_t kAgreeBytes = 4;  // what every place of a key must go on with alike
constexpr std::size_t kSpanBytes = 96;  // the source text spelled into a guess

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::vector<std::int32_t> text_lookup(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                      const tokenizers::Tokenizer& tokenizer) {
  std::vector<std::int32_t> out;
  if (max_tokens <= 0 || context.empty()) return out;
  const auto n_vocab = static_cast<std::int64_t>(tokenizer.vocab_size());
  std::string text;
  std::vector<std::size_t> starts(context.size());  // where each token's bytes start in text
  for (std::size_t i = 0; i < context.size(); ++i) {
    starts[i] = text.size();
    if (context[i] >= 0 && context[i] < n_vocab) text += tokenizer.token_bytes(context[i]);
  }
  const std::string_view view(text);
  const std::size_t end = text.size();
  // The longest suffix that occurs earlier, every place of it going on alike.
  std::size_t key_len = 0, at = std::string_view::npos;
  for (std::size_t len = std::min(kMaxKeyBytes, end); len >= kMinKeyBytes && key_len == 0; --len) {
    if (len == end) continue;  // nothing before it
    const std::string_view key = view.substr(end - len);
    // A key of punctuation (JSON's `y":"`) finds the output's own structure, not a copied span.
    if (std::count_if(key.begin(), key.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }) <
        static_cast<std::ptrdiff_t>(kMinKeyBytes)) {
      continue;
    }
    const std::size_t found = view.rfind(key, end - len - 1);
    if (found == std::string_view::npos) continue;
    const std::string_view next = view.substr(found + len, kAgreeBytes);
    for (std::size_t p = found; p > 0;) {
      const std::size_t prev = view.rfind(key, p - 1);
      if (prev == std::string_view::npos) break;
      if (view.substr(prev + len, kAgreeBytes) != next) return out;  // shorter keys recur there too
      p = prev;
    }
    key_len = len;
    at = found;
  }
  if (key_len == 0) return out;
  // From the start of the first token that covers the key, the tokenizer spells the key and what followed
  // it there; the tokens past the context's end are the guess.
  std::size_t first = context.size();
  while (first > 0 && starts[first - 1] > end - key_len) --first;
  if (first > 0) --first;
  const std::size_t anchor = starts[first];
  std::size_t span_end = std::min(end, at + key_len + kSpanBytes);
  if (at + key_len >= end) return out;
  while (span_end > at + key_len && span_end < end && continuation_byte(text[span_end])) --span_end;
  const std::string spelled = text.substr(anchor, end - anchor) + text.substr(at + key_len, span_end - at - key_len);
  std::vector<tokenizers::TokenId> ids;
  try {
    ids = tokenizer.encode(spelled);
  } catch (const std::exception&) {
    return out;  // not whole characters
  }
  std::size_t pos = 0, i = 0;
  const std::size_t covered = end - anchor;
  while (i < ids.size() && pos < covered) pos += tokenizer.token_bytes(ids[i++]).size();
  if (pos != covered) return out;  // the spelling straddles the context's end
  // The last token may merge with the text after the span.
  for (; i + 1 < ids.size() && static_cast<std::int32_t>(out.size()) < max_tokens; ++i) {
    if (tokenizer.is_special(ids[i])) break;
    out.push_back(ids[i]);
  }
  return out;
}

namespace {

class PromptLookupDrafter final : public Drafter {
 public:
  explicit PromptLookupDrafter(const tokenizers::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  void propose(std::span<Row> rows) override {
    for (Row& row : rows) {
      row.draft = prompt_lookup(row.context, row.max_tokens);
      if (row.draft.empty() && tokenizer_ != nullptr) row.draft = text_lookup(row.context, row.max_tokens, *tokenizer_);
    }
  }

 private:
  const tokenizers::Tokenizer* tokenizer_;
};

}  // namespace

std::unique_ptr<Drafter> make_prompt_lookup_drafter(const tokenizers::Tokenizer* tokenizer) {
  return std::make_unique<PromptLookupDrafter>(tokenizer);
}

}  // namespace pie

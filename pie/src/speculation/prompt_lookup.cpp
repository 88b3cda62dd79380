#include <algorithm>

#include "pie/speculation.h"

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

class PromptLookupDrafter final : public Drafter {
 public:
  void propose(std::span<Row> rows) override {
    for (Row& row : rows) row.draft = prompt_lookup(row.context, row.max_tokens);
  }
};

}  // namespace

std::unique_ptr<Drafter> make_prompt_lookup_drafter() { return std::make_unique<PromptLookupDrafter>(); }

}  // namespace pie

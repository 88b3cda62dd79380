#include "grammar_vocabulary.h"

#include <string>
#include <vector>

namespace orchard::cli {

std::shared_ptr<const pse::Vocabulary> grammar_vocabulary(const tokenizers::Tokenizer& tokenizer,
                                                          std::size_t n_rows) {
  const std::size_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<pse::TokenId> special;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<tokenizers::TokenId>(i);
    if (tokenizer.is_special(id)) {
      special.push_back(static_cast<pse::TokenId>(i));
    } else {
      bytes[i] = tokenizer.token_bytes(id);
    }
  }
  const tokenizers::SpecialTokens& st = tokenizer.special_tokens();
  std::vector<pse::TokenId> eos(st.end_of_generation.begin(), st.end_of_generation.end());
  if (st.eos) eos.push_back(*st.eos);
  return std::make_shared<pse::Vocabulary>(std::move(bytes), std::move(special), std::move(eos), n_rows);
}

}  // namespace orchard::cli

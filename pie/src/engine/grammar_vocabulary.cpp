#include "pie/grammar_vocabulary.h"

#include <algorithm>
#include <string>
#include <vector>

#include "pie/error.h"

namespace pie {

std::shared_ptr<const pse::Vocabulary> grammar_vocabulary(const tokenizers::Tokenizer& tokenizer,
                                                          std::size_t n_rows,
                                                          const std::vector<std::string>& text_specials) {
  const std::size_t n = tokenizer.vocab_size();
  std::vector<bool> as_text(n, false);
  for (std::size_t i = 0; i < text_specials.size(); ++i) {
    const auto id = tokenizer.find(text_specials[i]);
    if (!id || !tokenizer.is_special(*id)) {
      throw RequestError("[request] grammar_special_tokens[" + std::to_string(i) + "]: \"" + text_specials[i] +
                             "\" is not a special token of the model's tokenizer",
                         "grammar_special_tokens");
    }
    as_text[static_cast<std::size_t>(*id)] = true;
  }
  // (A special token's bytes are its name, by which a grammar's token terminal may name it: `<think>`.)
  std::vector<std::string> bytes(n);
  std::vector<pse::TokenId> special;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<tokenizers::TokenId>(i);
    if (tokenizer.is_special(id) && !as_text[i]) special.push_back(static_cast<pse::TokenId>(i));
    bytes[i] = tokenizer.token_bytes(id);
  }
  const tokenizers::SpecialTokens& st = tokenizer.special_tokens();
  std::vector<pse::TokenId> eos;
  for (tokenizers::TokenId id : st.end_of_generation) {
    if (!as_text[static_cast<std::size_t>(id)]) eos.push_back(id);
  }
  if (st.eos && !as_text[static_cast<std::size_t>(*st.eos)] &&
      std::find(eos.begin(), eos.end(), *st.eos) == eos.end()) {
    eos.push_back(*st.eos);
  }
  return std::make_shared<pse::Vocabulary>(std::move(bytes), std::move(special), std::move(eos), n_rows);
}

}  // namespace pie

#include "server/token_detail.h"

namespace pie::server {
namespace {

// Raw bytes: a token may hold part of a UTF-8 character; dump_json replaces what is not valid UTF-8.
Json entry(const tokenizers::Tokenizer& tokenizer, std::int32_t id, bool forced, std::int32_t allowed) {
  const std::string& text = tokenizer.is_special(id) ? tokenizer.token_text(id) : tokenizer.token_bytes(id);
  return Json{{"id", id}, {"token", text}, {"forced", forced}, {"allowed", allowed >= 0 ? Json(allowed) : Json()}};
}

}  // namespace

Json token_detail_json(const Event& event, const tokenizers::Tokenizer& tokenizer) {
  Json out = Json::array();
  for (std::size_t i = 0; i < event.tokens.size(); ++i) {
    // tokens[0] was sampled under the step's mask; the rest were forced.
    out.push_back(entry(tokenizer, event.tokens[i], i > 0, i == 0 ? event.n_allowed : -1));
  }
  if (event.end_token >= 0) {
    Json end = entry(tokenizer, event.end_token, false, event.n_allowed);
    end["end"] = true;
    out.push_back(std::move(end));
  }
  return out;
}

}  // namespace pie::server

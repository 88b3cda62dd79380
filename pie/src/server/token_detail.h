// The token_detail extension of the OpenAI routes: what the grammar did at each step of a sample, for a
// client that shows it (the web page's playground). Each token of an engine event becomes
//   {"id": 90, "token": "{\"", "forced": false, "allowed": 2}
// "forced": appended by the grammar's jump-forward (the only text it allowed), not sampled; "allowed": how
// many tokens the grammar's mask allowed when the token was sampled (null for a forced token or a sample
// without a grammar). A sample that ends by sampling end-of-sequence adds that token with "end": true.
#pragma once

#include "pie/engine.h"
#include "server/api_request.h"
#include "tokenizers/tokenizer.h"

namespace pie::server {

// The entries of one event (an empty array when it carries no token).
Json token_detail_json(const Event& event, const tokenizers::Tokenizer& tokenizer);

}  // namespace pie::server

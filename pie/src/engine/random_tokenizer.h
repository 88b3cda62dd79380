// The random-weight model's tokenizer and chat template (random_model.cpp builds the model on them).
#pragma once

#include <string>

namespace pie::detail {

// tokenizer.json text of a byte-level BPE: 256 byte tokens, merges of common English and JSON pieces,
// then <s> and </s> (special). Deterministic.
std::string random_tokenizer_json();
// A ChatML-shaped Jinja template over <s> / </s>.
const char* random_chat_template();

}  // namespace pie::detail

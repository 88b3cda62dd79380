// The Llama 3.1 vocabulary (128,256 tokens) as a pse::Vocabulary, built straight from the shared
// encoder.json (GPT-2 byte-to-unicode encoded) plus the 256 special tokens of data/README.md. For tests
// and benchmarks that must not depend on the tokenizers layer.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pse/vocabulary.h"

namespace pse::testing {

// GPT-2's byte <-> unicode map: printable Latin-1 bytes map to themselves, the others to U+0100.. in
// byte order.
inline std::array<int, 512> gpt2_unicode_to_byte() {
  std::array<int, 512> out;
  out.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[printable ? b : 256 + n++] = b;
  }
  return out;
}

inline std::shared_ptr<const Vocabulary> load_llama3_vocabulary(const std::filesystem::path& encoder_json) {
  std::ifstream in(encoder_json);
  if (!in) throw std::runtime_error("cannot open " + encoder_json.string());
  nlohmann::json j = nlohmann::json::parse(in);
  static const std::array<int, 512> map = gpt2_unicode_to_byte();
  std::vector<std::string> tokens(128'256);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const std::size_t id = it.value().get<std::size_t>();
    std::string bytes;
    for (std::size_t i = 0; i < key.size();) {
      unsigned c = static_cast<unsigned char>(key[i]);
      unsigned cp;
      if (c < 0x80) {
        cp = c;
        i += 1;
      } else if ((c & 0xE0) == 0xC0) {
        cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(key[i + 1]) & 0x3F);
        i += 2;
      } else {
        throw std::runtime_error("encoder.json: unexpected character in " + key);
      }
      if (cp >= 512 || map[cp] < 0) throw std::runtime_error("encoder.json: unmapped character in " + key);
      bytes.push_back(static_cast<char>(map[cp]));
    }
    if (id >= 128'000) throw std::runtime_error("encoder.json: id out of range");
    tokens[id] = std::move(bytes);
  }
  const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                         "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                         "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  std::vector<TokenId> special;
  for (int i = 0; i < 256; ++i) {
    tokens[128'000 + i] = i < 11 ? named[i] : "<|reserved_special_token_" + std::to_string(i - 8) + "|>";
    special.push_back(128'000 + i);
  }
  // End of generation: <|end_of_text|>, <|eom_id|>, <|eot_id|>.
  return std::make_shared<Vocabulary>(std::move(tokens), std::move(special),
                                      std::vector<TokenId>{128'001, 128'008, 128'009});
}

}  // namespace pse::testing

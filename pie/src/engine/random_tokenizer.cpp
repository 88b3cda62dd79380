// The random-weight model's tokenizer: a byte-level BPE (GPT-2 byte alphabet and pre-tokenizer) whose 256
// byte tokens are followed by merges of common English and JSON pieces listed below, and the specials <s> and
// </s>. It is written as tokenizer.json text and parsed by tokenizers::Tokenizer::parse, so it behaves
// exactly as a tokenizer loaded from a file.
#include "random_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pie::detail {

namespace {

// Pieces that become tokens, in merge order (a piece's parts must be tokens by the time it is merged:
// each is split at the longest prefix that is already a token). Words carry GPT-2's leading space.
constexpr const char* kPieces[] = {
    // English: frequent letter pairs, then words.
    " t", " a", "he", "in", "re", "on", " th", "er", " s", "at", " w", " o", "en", " c", "it", "is", "an",
    "or", "es", " b", "ed", " f", "ing", " p", "ou", " in", "ar", " m", "al", " d", "nd", " h", "ic", " l",
    "as", "le", "om", "ion", "st", " re", "ent", " n", " g", "ll", "ro", "ve", " e", "ly", "ad", "ow", "et",
    "ut", "ot", "ay", "id", "im", "ir", "ac", "ur", "ig", "ld", "ch", "ce", "se", "ct", "ation", "ter",
    "ver", "all", "ould", "ight", "her", "his", " the", " to", " of", " and", " is", " that", " for", " it",
    " was", " on", " with", " as", " be", " at", " by", " this", " have", " from", " or", " an", " not",
    " are", " but", " they", " you", " he", " she", " we", " his", " her", " had", " one", " all", " there",
    " can", " will", " said", " what", " when", " which", " their", " time", " about", " would", " up",
    " out", " so", " if", " no", " my", " day", " do", " go", " like", " very", " big", " little", " saw",
    " girl", " boy", " play", " happy", " friend", " named", " once", " upon", " Once", " The", " He",
    " She", " It", " They", " In", " I", " A", "The", "He", "She", "It", "They", "In", "I", "A", " name",
    " age", " city", " email", " phone", " address", " person", " user", " data", " value", " number",
    " string", " list", " true", " false", " null", " yes", " Alice", " Bob", " John", " London", " Paris",
    // JSON structure and common keys.
    "\":", "\": ", "\",", "\", ", "{\"", "[\"", "\"}", "\"]", "]}", "},", "}]", "{}", "[]", "\n ", "  ",
    "    ", "\n  ", "\n    ", "  \"", "    \"", " {", " [", " \"", " }", " ]", ": ", ", ", "null", "true",
    "false", "id", "\"id", "name", "\"name", "type", "\"type", "value", "\"value", "age", "\"age", "email",
    "\"email", "items", "\"items", "title", "\"title", "description", "\"description", "properties",
    "\"properties", "required", "\"required", "string", "\"string", "number", "\"number", "integer",
    "\"integer", "object", "\"object", "array", "\"array", "boolean", "\"boolean", "date", "time", "url",
    "text", "key", "status", "count", "price", "tags", "city", "country", "first", "last", "address",
    "phone", "user", "users", "list", "data", "info", "result", "error", "message", "content", "role",
    "query", "code", "config", "version", "enabled", "default", "format", "minimum", "maximum", "pattern",
    "enum", "const", "2023", "2024", "00", "01", "10", "12", "20", "19", "-0", "-1", ".0", ".5", "0.",
    "1.", "://", "http", "https", "www", ".com", "@", "example", "@example", "@example.com", "_id", "_name",
    "Name", "Id", "Type", "ment", "tion", "ness", "able", "ful", "less", "ous", "ive", "ers", "est", "ies",
    "ity", "ure", "ise", "ize", "ate", "ine", "ome", "ame", "ake", "ook", "ood", "own", "ound", "ain",
    "ear", "eat", "ell", "ick", "ill", "ink", "ong", "ight", " ne", " ex", " un", " de", " con", " pro",
    " com", " per", " sp", " st", " tr", " pl", " cl", " gr", " br", " fr", " wh", " sh", " ch", " Th",
    " wor", " work", " world", " good", " new", " first", " look", " make", " know", " take", " come",
    " see", " want", " thing", " home", " tree", " dog", " cat", " sun", " ball", " toy", " mom", " dad",
    " Lily", " Tim", " Ben", " Sue", " ran", " run", " fun", " help", " love", " loved", " wanted",
    " went", " found", " felt", " sad", " kind", " nice", " red", " blue", " green", " park", " sky",
    ".\n", ",\n", "!\n", "?\n", "\n\n", " \n", "\":\"", "\",\"", "\":{", "\":[", "\":{\"", "\":[\"",
    "\":\"\"", "\":0", "\":1", "\":true", "\":false", "\":null", "},{", "},{\"", "}}", "]]", "\\n",
    "\\\"", "\"\n", "\n}", "\n]", "\n  }", "\n  ]",
};

// GPT-2's byte -> code point mapping (printable bytes map to themselves, the rest to 256 + n).
std::string byte_level(std::string_view bytes) {
  static const auto table = [] {
    std::vector<std::uint32_t> t(256);
    std::uint32_t n = 0;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : 256 + n++;
    }
    return t;
  }();
  std::string out;
  for (char c : bytes) {
    const std::uint32_t cp = table[static_cast<unsigned char>(c)];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {  // all mapped code points are below 0x800: two UTF-8 bytes
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace

std::string random_tokenizer_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::unordered_map<std::string, int> ids;  // raw bytes -> id
  for (int b = 0; b < 256; ++b) {
    const std::string raw(1, static_cast<char>(b));
    ids[raw] = b;
    vocab[byte_level(raw)] = b;
  }
  nlohmann::json merges = nlohmann::json::array();
  int next = 256;
  for (const char* piece : kPieces) {
    const std::string p(piece);
    if (p.size() < 2 || ids.count(p)) continue;
    // Longest prefix that is a token, with a suffix that is one too.
    for (std::size_t k = p.size() - 1; k >= 1; --k) {
      const std::string left = p.substr(0, k), right = p.substr(k);
      if (ids.count(left) && ids.count(right)) {
        merges.push_back(byte_level(left) + " " + byte_level(right));
        ids[p] = next;
        vocab[byte_level(p)] = next++;
        break;
      }
    }
  }
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array({
      {{"id", next}, {"content", "<s>"}, {"special", true}, {"single_word", false}, {"lstrip", false},
       {"rstrip", false}, {"normalized", false}},
      {{"id", next + 1}, {"content", "</s>"}, {"special", true}, {"single_word", false}, {"lstrip", false},
       {"rstrip", false}, {"normalized", false}},
  });
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}};
  return j.dump();
}

const char* random_chat_template() {
  // ChatML's shape with the model's own specials: <s>role\ncontent</s>\n per message.
  return "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
         "{% if add_generation_prompt %}<s>assistant\n{% endif %}";
}

}  // namespace pie::detail

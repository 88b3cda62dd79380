#include "pre_tokenizer.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <algorithm>

#include "tokenizers/error.h"
#include "unicode.h"

namespace tokenizers::detail {

const char* const kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

// ---------------------------------------------------------------------------------------------------
// Character classes for the hand-written splitters.
enum : std::uint8_t { kClsLetter = 1, kClsNumber = 2, kClsSpace = 4 };

struct AsciiTable {
  std::uint8_t cls[128];
  AsciiTable() {
    for (std::uint32_t c = 0; c < 128; ++c) {
      const auto cat = unicode::category(c);
      cls[c] = static_cast<std::uint8_t>((unicode::is_letter(cat) ? kClsLetter : 0) |
                                         (unicode::is_number(cat) ? kClsNumber : 0) |
                                         (unicode::is_whitespace(c) ? kClsSpace : 0));
    }
  }
};
const AsciiTable kAscii;

inline std::uint8_t char_class(std::uint32_t cp) {
  if (cp < 128) return kAscii.cls[cp];
  const std::uint8_t f = unicode::raw_flags(cp);
  const auto cat = static_cast<unicode::Category>(f & 0x1F);
  return static_cast<std::uint8_t>((unicode::is_letter(cat) ? kClsLetter : 0) |
                                   (unicode::is_number(cat) ? kClsNumber : 0) | ((f & 0x20) ? kClsSpace : 0));
}

// A fragment decoded into code points with their classes and byte offsets.
struct Decoded {
  std::vector<std::uint32_t> cps;
  std::vector<std::uint8_t> cls;
  std::vector<std::uint32_t> off;  // [n + 1] byte offset of each code point, relative to the fragment
  void decode(std::string_view text) {
    cps.clear(), cls.clear(), off.clear();
    std::size_t pos = 0;
    while (pos < text.size()) {
      off.push_back(static_cast<std::uint32_t>(pos));
      const std::uint32_t cp = unicode::decode_valid(text, pos);
      cps.push_back(cp);
      cls.push_back(char_class(cp));
    }
    off.push_back(static_cast<std::uint32_t>(text.size()));
  }
};

constexpr std::uint32_t kOutOfRange = 0xFFFFFFFF;

// ---------------------------------------------------------------------------------------------------
// Regex conversion: llama.cpp / Hugging Face regex -> RE2.

constexpr const char* kWhitespaceClass = "\\t\\n\\x0B\\f\\r ";

bool category_in(std::string_view name, unicode::Category c, bool* known) {
  *known = true;
  using namespace unicode;
  if (name == "L") return is_letter(c);
  if (name == "N") return is_number(c);
  if (name == "P") return is_punctuation(c);
  if (name == "S") return is_symbol(c);
  if (name == "M") return is_mark(c);
  if (name == "L_notlower") return is_letter(c);  // ASCII part handled by the caller
  if (name == "L_notupper") return is_letter(c);
  if (name == "Lu") return c == kLu;
  if (name == "Ll") return c == kLl;
  if (name == "Lt") return c == kLt;
  if (name == "Lm") return c == kLm;
  if (name == "Lo") return c == kLo;
  if (name == "Mn") return c == kMn;
  if (name == "Mc") return c == kMc;
  if (name == "Me") return c == kMe;
  if (name == "Nd") return c == kNd;
  if (name == "Nl") return c == kNl;
  if (name == "No") return c == kNo;
  if (name == "Pc") return c == kPc;
  if (name == "Pd") return c == kPd;
  if (name == "Ps") return c == kPs;
  if (name == "Pe") return c == kPe;
  if (name == "Pi") return c == kPi;
  if (name == "Pf") return c == kPf;
  if (name == "Po") return c == kPo;
  if (name == "Sm") return c == kSm;
  if (name == "Sc") return c == kSc;
  if (name == "Sk") return c == kSk;
  if (name == "So") return c == kSo;
  if (name == "W") return is_letter(c) || is_mark(c) || is_number(c) || c == kPc;  // \w
  *known = false;
  return false;
}

// Members of a category in the collapsed alphabet: ASCII characters keep their value, other code points
// become 0x80 + category, whitespace becomes 0x0B.
std::string collapsed_class_content(std::string_view name, std::string_view where) {
  std::string out;
  bool known = true;
  for (std::uint32_t c = 0; c < 128; ++c) {
    if (unicode::is_whitespace(c)) continue;
    bool in = category_in(name, unicode::category(c), &known);
    if (!known) throw FormatError(fmt::format("[tokenizer] {}: unsupported Unicode class \\p{{{}}} in regex", where, name));
    if (name == "L_notlower" && c >= 'a' && c <= 'z') in = false;
    if (name == "L_notupper" && c >= 'A' && c <= 'Z') in = false;
    if (name == "W" && c == '_') in = true;
    if (in) out += fmt::format("\\x{{{:02X}}}", c);
  }
  for (int cat = 0; cat < 30; ++cat) {
    if (cat == unicode::kZs || cat == unicode::kZl || cat == unicode::kZp) continue;  // all whitespace
    if (category_in(name, static_cast<unicode::Category>(cat), &known)) {
      out += fmt::format("\\x{{{:02X}}}", 0x80 + cat);
    }
  }
  return out;
}

std::string utf8_class_content(std::string_view name, std::string_view where) {
  if (name == "W") return "\\pL\\pM\\pN\\p{Pc}";
  if (name == "L_notlower" || name == "L_notupper") {
    throw FormatError(fmt::format("[tokenizer] {}: a letter-case lookahead together with non-ASCII literals is not supported", where));
  }
  bool known = true;
  category_in(name, unicode::kCn, &known);
  if (!known) throw FormatError(fmt::format("[tokenizer] {}: unsupported Unicode class \\p{{{}}} in regex", where, name));
  return fmt::format("\\p{{{}}}", name);
}

std::string convert_regex(std::string_view p, bool collapsed, std::string_view where) {
  std::string out;
  bool in_class = false;
  std::size_t class_start = 0;
  auto cls = [&](std::string_view name) {
    return collapsed ? collapsed_class_content(name, where) : utf8_class_content(name, where);
  };
  auto unsupported = [&](std::string_view what, std::size_t at) {
    return FormatError(fmt::format("[tokenizer] {}: regex offset {}: {} is not supported: {}", where, at, what, p));
  };
  for (std::size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) throw unsupported("a trailing backslash", i);
      const char d = p[i + 1];
      std::string content;
      bool negated = false;
      std::size_t next = i + 2;
      if (d == 'p' || d == 'P') {
        std::string name;
        if (next < p.size() && p[next] == '{') {
          const std::size_t close = p.find('}', next);
          if (close == std::string_view::npos) throw unsupported("an unterminated \\p{", i);
          name = std::string(p.substr(next + 1, close - next - 1));
          next = close + 1;
        } else if (next < p.size()) {
          name = std::string(1, p[next]);
          ++next;
        }
        content = cls(name);
        negated = d == 'P';
      } else if (d == 's' || d == 'S') {
        content = kWhitespaceClass;
        negated = d == 'S';
      } else if (d == 'w' || d == 'W') {
        content = cls("W");
        negated = d == 'W';
      } else if (d == 'u' && i + 5 < p.size() + 0 && i + 6 <= p.size()) {
        out += fmt::format("\\x{{{}}}", p.substr(i + 2, 4));
        i += 6;
        continue;
      } else {
        out += p.substr(i, 2);
        i += 2;
        continue;
      }
      if (in_class) {
        if (negated) throw unsupported("a negated class inside [...]", i);
        out += content;
      } else {
        out += negated ? "[^" : "[";
        out += content;
        out += ']';
      }
      i = next;
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) {
        in_class = false;
        out += ']';
      } else if (c == '[') {
        out += "\\[";
      } else {
        out += c;
      }
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += '[';
      ++i;
      if (i < p.size() && p[i] == '^') {
        out += '^';
        ++i;
      }
      class_start = i;
      if (i < p.size() && p[i] == ']') {  // a literal ] first in the class
        out += "\\]";
        ++i;
        class_start = i;
      }
      continue;
    }
    if (c == '(') {
      if (i + 1 < p.size() && p[i + 1] == '?') {
        if (i + 2 < p.size() && (p[i + 2] == '=' || p[i + 2] == '!' || p[i + 2] == '<')) {
          throw unsupported("a lookaround other than \\s+(?!\\S) and (?=[\\p{L}])([^a-z])", i);
        }
        out += "(?";
        i += 2;
        continue;
      }
      out += "(?:";
      ++i;
      continue;
    }
    out += c;
    ++i;
  }
  if (in_class) throw unsupported("an unterminated [", p.size());
  return out;
}

// Top-level alternatives of a pattern.
std::vector<std::string> split_alternatives(std::string_view p) {
  std::vector<std::string> alts;
  int depth = 0;
  bool in_class = false;
  std::size_t start = 0, class_start = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_start = i + 1;
      if (class_start < p.size() && p[class_start] == '^') ++class_start;
      if (class_start < p.size() && p[class_start] == ']') ++class_start, ++i;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      alts.emplace_back(p.substr(start, i - start));
      start = i + 1;
    }
  }
  alts.emplace_back(p.substr(start));
  return alts;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

bool has_non_ascii(std::string_view p) {
  if (std::any_of(p.begin(), p.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) return true;
  // \x{...} escapes above U+007F count as non-ASCII literals.
  for (std::size_t at = p.find("\\x{"); at != std::string_view::npos; at = p.find("\\x{", at + 3)) {
    if (std::strtoul(std::string(p.substr(at + 3, 8)).c_str(), nullptr, 16) >= 0x80) return true;
  }
  // \uXXXX escapes above U+007F count as non-ASCII literals.
  for (std::size_t at = p.find("\\u"); at != std::string_view::npos; at = p.find("\\u", at + 2)) {
    if (at + 6 <= p.size()) {
      const unsigned v = static_cast<unsigned>(std::strtoul(std::string(p.substr(at + 2, 4)).c_str(), nullptr, 16));
      if (v >= 0x80) return true;
    }
  }
  return false;
}

}  // namespace

class RegexStep {
 public:
  bool collapsed = true;
  std::unique_ptr<RE2> full;  // the pattern, with \s+(?!\S) as capture group 1 when present
  std::unique_ptr<RE2> rest;  // the alternatives after the lookahead one (may be null)
  bool has_lookahead = false;
};

std::shared_ptr<const RegexStep> compile_regex(std::string_view pattern_in, std::string_view where) {
  std::string pattern(pattern_in);
  // Letter-case lookaheads of the GPT-4o / Tekken patterns as llama.cpp adapts them: a letter that is not
  // a lowercase (uppercase) ASCII letter.
  replace_all(pattern, "((?=[\\p{L}])([^a-z]))", "\\p{L_notlower}");
  replace_all(pattern, "((?=[\\p{L}])([^A-Z]))", "\\p{L_notupper}");
  replace_all(pattern, "(?=[\\p{L}])([^a-z])", "\\p{L_notlower}");
  replace_all(pattern, "(?=[\\p{L}])([^A-Z])", "\\p{L_notupper}");
  auto step = std::make_shared<RegexStep>();
  step->collapsed = !has_non_ascii(pattern);
  const auto alts = split_alternatives(pattern);
  std::string full, rest;
  int lookahead_index = -1;
  for (std::size_t i = 0; i < alts.size(); ++i) {
    if (alts[i] == "\\s+(?!\\S)") {
      if (lookahead_index >= 0) {
        throw FormatError(fmt::format("[tokenizer] {}: regex has \\s+(?!\\S) twice: {}", where, pattern_in));
      }
      lookahead_index = static_cast<int>(i);
    }
  }
  for (std::size_t i = 0; i < alts.size(); ++i) {
    if (!full.empty() || i > 0) full += '|';
    if (static_cast<int>(i) == lookahead_index) {
      full += std::string("([") + kWhitespaceClass + "]+)";
      continue;
    }
    const std::string converted = convert_regex(alts[i], step->collapsed, where);
    full += "(?:" + converted + ")";
    if (lookahead_index >= 0 && static_cast<int>(i) > lookahead_index) {
      if (!rest.empty()) rest += '|';
      rest += "(?:" + converted + ")";
    }
  }
  RE2::Options options;
  options.set_log_errors(false);
  options.set_encoding(step->collapsed ? RE2::Options::EncodingLatin1 : RE2::Options::EncodingUTF8);
  options.set_dot_nl(false);
  step->full = std::make_unique<RE2>(full, options);
  if (!step->full->ok()) {
    throw FormatError(fmt::format("[tokenizer] {}: regex does not compile ({}): {}", where, step->full->error(), pattern_in));
  }
  step->has_lookahead = lookahead_index >= 0;
  if (!rest.empty()) {
    step->rest = std::make_unique<RE2>(rest, options);
    if (!step->rest->ok()) {
      throw FormatError(fmt::format("[tokenizer] {}: regex does not compile ({}): {}", where, step->rest->error(), pattern_in));
    }
  }
  return step;
}

void regex_matches(const RegexStep& step, std::string_view text, std::vector<Piece>& out) {
  // The text the regex runs on, and the byte offset in `text` of each of its bytes.
  thread_local std::string buf;
  thread_local std::vector<std::uint32_t> map;
  buf.clear();
  map.clear();
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    const std::uint32_t cp = unicode::decode_valid(text, pos);
    if (cp < 128) {
      buf.push_back(static_cast<char>(cp));
      map.push_back(static_cast<std::uint32_t>(start));
    } else if (unicode::is_whitespace(cp)) {
      buf.push_back('\x0B');
      map.push_back(static_cast<std::uint32_t>(start));
    } else if (step.collapsed) {
      buf.push_back(static_cast<char>(0x80 + unicode::category(cp)));
      map.push_back(static_cast<std::uint32_t>(start));
    } else {
      for (std::size_t k = start; k < pos; ++k) {
        buf.push_back(text[k]);
        map.push_back(static_cast<std::uint32_t>(k));
      }
    }
  }
  map.push_back(static_cast<std::uint32_t>(text.size()));
  const re2::StringPiece input(buf);
  const std::size_t n = buf.size();
  auto char_len = [&](std::size_t at) {
    return step.collapsed ? 1 : unicode::utf8_length(static_cast<unsigned char>(buf[at]));
  };
  re2::StringPiece groups[2];
  std::size_t search = 0;
  while (search <= n) {
    if (!step.full->Match(input, search, n, RE2::UNANCHORED, groups, step.has_lookahead ? 2 : 1)) break;
    std::size_t ms = static_cast<std::size_t>(groups[0].data() - buf.data());
    std::size_t me = ms + groups[0].size();
    if (step.has_lookahead && groups[1].data() != nullptr && me < n) {
      // \s+(?!\S): the run is followed by a non-space; give back its last character, or fail here.
      if (me - ms > 1) {
        me -= 1;  // whitespace is one byte in both alphabets
      } else {
        re2::StringPiece m;
        if (step.rest && step.rest->Match(input, ms, n, RE2::ANCHOR_START, &m, 1)) {
          me = ms + m.size();
        } else {
          search = ms + char_len(ms);
          continue;
        }
      }
    }
    if (me == ms) {  // an empty match splits nothing
      if (ms >= n) break;
      search = ms + char_len(ms);
      continue;
    }
    out.push_back({map[ms], map[me]});
    search = me;
  }
}

// ---------------------------------------------------------------------------------------------------
// Hand-written splitters (byte offsets relative to `text`, plus `base`).

void split_gpt2(std::string_view text, std::uint32_t base, std::vector<Piece>& out) {
  thread_local Decoded d;
  d.decode(text);
  const std::size_t n = d.cps.size();
  auto cp_at = [&](std::size_t i) { return i < n ? d.cps[i] : kOutOfRange; };
  auto cls_at = [&](std::size_t i) -> std::uint8_t { return i < n ? d.cls[i] : 0; };
  std::size_t prev = 0, pos = 0;
  auto add = [&](std::size_t end) {
    if (end > prev) out.push_back({base + d.off[prev], base + d.off[end]});
    prev = end;
  };
  while (pos < n) {
    const std::uint32_t c = d.cps[pos];
    const std::uint8_t f = d.cls[pos];
    if (c == '\'' && pos + 1 < n) {
      const std::uint32_t c1 = d.cps[pos + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        pos += 2;
        add(pos);
        continue;
      }
      if (pos + 2 < n) {
        const std::uint32_t c2 = d.cps[pos + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          pos += 3;
          add(pos);
          continue;
        }
      }
    }
    const bool space = c == ' ';
    const std::uint8_t f2 = space ? cls_at(pos + 1) : f;
    const bool valid2 = space ? pos + 1 < n : true;
    if (valid2 && (f2 & kClsLetter)) {
      pos += space;
      while (cls_at(pos) & kClsLetter) ++pos;
      add(pos);
      continue;
    }
    if (valid2 && (f2 & kClsNumber)) {
      pos += space;
      while (cls_at(pos) & kClsNumber) ++pos;
      add(pos);
      continue;
    }
    if (valid2 && !(f2 & (kClsLetter | kClsNumber | kClsSpace))) {
      pos += space;
      while (pos < n && !(d.cls[pos] & (kClsLetter | kClsNumber | kClsSpace))) ++pos;
      add(pos);
      continue;
    }
    std::size_t n_ws = 0;
    while (cls_at(pos + n_ws) & kClsSpace) ++n_ws;
    if (n_ws > 1 && cp_at(pos + n_ws) != kOutOfRange) {
      pos += n_ws - 1;
      add(pos);
      continue;
    }
    if (n_ws > 0) {
      pos += n_ws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

void split_llama3(std::string_view text, std::uint32_t base, int max_digits, std::vector<Piece>& out) {
  thread_local Decoded d;
  d.decode(text);
  const std::size_t n = d.cps.size();
  auto cp_at = [&](std::size_t i) { return i < n ? d.cps[i] : kOutOfRange; };
  auto cls_at = [&](std::size_t i) -> std::uint8_t { return i < n ? d.cls[i] : 0; };
  std::size_t prev = 0, pos = 0;
  auto add = [&](std::size_t end) {
    if (end > prev) out.push_back({base + d.off[prev], base + d.off[end]});
    prev = end;
  };
  auto lower = [](std::uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; };
  while (pos < n) {
    const std::uint32_t c = d.cps[pos];
    const std::uint8_t f = d.cls[pos];
    if (c == '\'' && pos + 1 < n) {
      const std::uint32_t c1 = lower(d.cps[pos + 1]);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        pos += 2;
        add(pos);
        continue;
      }
      if (pos + 2 < n) {
        const std::uint32_t c2 = lower(d.cps[pos + 2]);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          pos += 3;
          add(pos);
          continue;
        }
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || (f & kClsNumber))) {
      if ((f & kClsLetter) || (cls_at(pos + 1) & kClsLetter)) {
        ++pos;
        while (cls_at(pos) & kClsLetter) ++pos;
        add(pos);
        continue;
      }
    }
    // \p{N}{1,max_digits}
    if (f & kClsNumber) {
      std::size_t ini = pos;
      while (cls_at(pos) & kClsNumber) {
        if (++pos - ini >= static_cast<std::size_t>(max_digits)) {
          add(pos);
          ini = pos;
        }
      }
      add(pos);
      continue;
    }
    // ?[^\s\p{L}\p{N}]+[\r\n]*
    const bool space = c == ' ';
    const bool valid2 = space ? pos + 1 < n : true;
    const std::uint8_t f2 = space ? cls_at(pos + 1) : f;
    if (valid2 && !(f2 & (kClsLetter | kClsNumber | kClsSpace))) {
      pos += space;
      while (pos < n && !(d.cls[pos] & (kClsLetter | kClsNumber | kClsSpace))) ++pos;
      while (cp_at(pos) == '\r' || cp_at(pos) == '\n') ++pos;
      add(pos);
      continue;
    }
    // \s*[\r\n]+
    std::size_t n_ws = 0, last_rn = 0;
    while (cls_at(pos + n_ws) & kClsSpace) {
      const std::uint32_t c2 = d.cps[pos + n_ws];
      if (c2 == '\r' || c2 == '\n') last_rn = pos + n_ws + 1;
      ++n_ws;
    }
    if (last_rn > 0) {
      pos = last_rn;
      add(pos);
      continue;
    }
    // \s+(?!\S)
    if (n_ws > 1 && cp_at(pos + n_ws) != kOutOfRange) {
      pos += n_ws - 1;
      add(pos);
      continue;
    }
    // \s+
    if (n_ws > 0) {
      pos += n_ws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

namespace {

bool is_hf_punctuation(std::uint32_t cp) {
  if (cp < 128) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  }
  return unicode::is_punctuation(unicode::category(cp));
}

void apply_behavior(const std::vector<std::pair<Piece, bool>>& segs, SplitBehavior behavior, std::vector<Piece>& out) {
  const std::size_t first = out.size();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segs) out.push_back(s.first);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.second) out.push_back(s.first);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [piece, is_match] : segs) {
        if (is_match && !previous_match && out.size() > first) {
          out.back().end = piece.end;
        } else {
          out.push_back(piece);
        }
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext: {
      std::vector<Piece> acc;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->second && !previous_match && !acc.empty()) {
          acc.back().begin = it->first.begin;
        } else {
          acc.push_back(it->first);
        }
        previous_match = it->second;
      }
      out.insert(out.end(), acc.rbegin(), acc.rend());
      break;
    }
    case SplitBehavior::kContiguous:
      for (const auto& [piece, is_match] : segs) {
        if (is_match == previous_match && out.size() > first) {
          out.back().end = piece.end;
        } else {
          out.push_back(piece);
        }
        previous_match = is_match;
      }
      break;
  }
}

}  // namespace

void PreTokenizer::add_regex(std::string_view pattern, SplitBehavior behavior, bool invert, std::string_view where) {
  PreTokenizerStep step;
  step.behavior = behavior;
  step.invert = invert;
  const bool plain = behavior == SplitBehavior::kIsolated && !invert;
  std::string p(pattern);
  const std::string gpt2 = kGpt2Regex;
  const std::string llama3 = kLlama3Regex;
  const std::string llama3_hf =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+";
  auto with_single_digit = [](std::string s) {
    replace_all(s, "\\p{N}{1,3}", "\\p{N}");
    return s;
  };
  if (plain && (p == gpt2 || p == gpt2 + "|\\s+")) {
    step.kind = PreTokenizerStep::Kind::kGpt2;
  } else if (plain && (p == llama3 || p == llama3_hf)) {
    step.kind = PreTokenizerStep::Kind::kLlama3;
    step.max_digits = 3;
  } else if (plain && (p == with_single_digit(llama3) || p == with_single_digit(llama3_hf))) {
    step.kind = PreTokenizerStep::Kind::kLlama3;
    step.max_digits = 1;
  } else {
    step.kind = PreTokenizerStep::Kind::kRegex;
    step.regex = compile_regex(pattern, where);
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, static_cast<std::uint32_t>(text.size())});
  std::vector<Piece> next, matches;
  std::vector<std::pair<Piece, bool>> segs;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    next.reserve(out.size() * 2);
    for (const Piece& piece : out) {
      const std::string_view frag = text.substr(piece.begin, piece.end - piece.begin);
      switch (step.kind) {
        case PreTokenizerStep::Kind::kGpt2:
          split_gpt2(frag, piece.begin, next);
          continue;
        case PreTokenizerStep::Kind::kLlama3:
          split_llama3(frag, piece.begin, step.max_digits, next);
          continue;
        case PreTokenizerStep::Kind::kBertSplit: {
          // Whitespace removed, punctuation isolated.
          std::size_t pos = 0, word = 0;
          auto flush = [&](std::size_t end) {
            if (end > word) next.push_back({piece.begin + static_cast<std::uint32_t>(word), piece.begin + static_cast<std::uint32_t>(end)});
          };
          while (pos < frag.size()) {
            const std::size_t start = pos;
            const std::uint32_t cp = unicode::decode_valid(frag, pos);
            if (unicode::is_whitespace(cp)) {
              flush(start);
              word = pos;
            } else if (is_hf_punctuation(cp)) {
              flush(start);
              next.push_back({piece.begin + static_cast<std::uint32_t>(start), piece.begin + static_cast<std::uint32_t>(pos)});
              word = pos;
            }
          }
          flush(frag.size());
          continue;
        }
        default:
          break;
      }
      matches.clear();
      if (step.kind == PreTokenizerStep::Kind::kRegex) {
        regex_matches(*step.regex, frag, matches);
      } else {
        std::size_t pos = 0;
        while (pos < frag.size()) {
          const std::size_t start = pos;
          const std::uint32_t cp = unicode::decode_valid(frag, pos);
          const bool hit = step.kind == PreTokenizerStep::Kind::kPunctuation ? is_hf_punctuation(cp) : cp == 0x2581;
          if (hit) matches.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(pos)});
        }
      }
      segs.clear();
      std::uint32_t at = 0;
      for (const Piece& m : matches) {
        if (m.begin > at) segs.push_back({{piece.begin + at, piece.begin + m.begin}, step.invert});
        segs.push_back({{piece.begin + m.begin, piece.begin + m.end}, !step.invert});
        at = m.end;
      }
      if (at < frag.size()) segs.push_back({{piece.begin + at, piece.end}, step.invert});
      apply_behavior(segs, step.behavior, next);
    }
    out.swap(next);
  }
}

std::vector<std::string> gguf_pre_regexes(std::string_view pre, bool* ok) {
  *ok = true;
  const std::string gpt2 = kGpt2Regex;
  const std::string llama3 = kLlama3Regex;
  std::string qwen2 = llama3;
  replace_all(qwen2, "\\p{N}{1,3}", "\\p{N}");
  auto is = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), pre) != names.end();
  };
  if (is({"default"})) {
    return {"[\\p{P}\\$\\+<=>\\^~\\|]+", gpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
  }
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
          "smaug-bpe", "glm4", "chatglm-bpe", "hunyuan", "kimi-k2"})) {
    return {llama3};
  }
  // Non-ASCII ranges are written as \x{...} escapes: several of llama.cpp's literal characters are
  // canonical singletons (U+1F7D, U+2126, U+212A, ...) that an editor's normalization would change.
  const std::string cjk = "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
  if (is({"deepseek-llm"})) {
    return {"[\r\n]",
            "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
            "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
            "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
            "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
            "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
            "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
            "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
            "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
            "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
            "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
            "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
            "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
            "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
            "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
            "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
            "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$", cjk,
            "\\p{N}+"};
  }
  if (is({"deepseek-coder"})) {
    return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", cjk, "\\p{N}"};
  }
  if (is({"deepseek-v3", "deepseek-r1"})) {
    return {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
            "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"falcon"})) {
    return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", gpt2, "[0-9][0-9][0-9]"};
  }
  if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    return {"\\p{N}", gpt2};
  }
  if (is({"gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "jina-es", "jina-de", "gigachat", "jina-v1-en",
          "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "granite-docling"})) {
    return {gpt2};
  }
  if (is({"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan-dense", "qwen35"})) {
    return {qwen2};
  }
  if (is({"poro-chat", "bloom", "gpt3-finnish"})) {
    return {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"};
  }
  if (is({"viking"})) {
    return {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+", "\\p{N}"};
  }
  if (is({"tekken"})) {
    return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"chameleon"})) {
    return {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
            "[\\p{P}!-/:-@\\[-`{-~]", gpt2};
  }
  if (is({"gpt-4o", "llama4"})) {
    return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"seed-coder"})) {
    return {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"superbpe"})) {
    return {"\\p{N}+", "(?=(\\d{3})+(?!\\d))"};
  }
  if (is({"bailingmoe", "bailingmoe2", "llada-moe"})) {
    return {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
  }
  *ok = false;
  return {};
}

PreTokenizer PreTokenizer::for_gguf_pre(std::string_view pre, std::string_view key_for_errors) {
  bool ok = false;
  const auto regexes = gguf_pre_regexes(pre, &ok);
  if (!ok) {
    throw FormatError(fmt::format("[tokenizer] {}: unknown pre-tokenizer type \"{}\"", key_for_errors, pre));
  }
  PreTokenizer p;
  for (const auto& r : regexes) p.add_regex(r, SplitBehavior::kIsolated, false, key_for_errors);
  return p;
}

}  // namespace tokenizers::detail

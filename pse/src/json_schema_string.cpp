// JSON Schema strings: the JSON string body (raw characters and escapes), minLength / maxLength in code
// points, values excluded by `not`, `pattern` (an unanchored ECMA-262 search through pse::add_regex) and
// `format`. Patterns and formats describe the decoded string; their grammar is re-encoded as JSON text:
// a character is written raw when JSON allows it, and '"', '\\' and control characters as escapes (the
// short form or \u00XX). \u escapes of characters that need none are accepted only in strings without
// pattern, format, enum or exclusions (see docs/json-schema.md).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>

#include "json_schema_internal.h"
#include "pse/regex.h"

namespace pse::json_schema_detail {
namespace {

bool contains(const std::vector<CharRange>& ranges, std::uint32_t cp) {
  return std::any_of(ranges.begin(), ranges.end(), [&](const CharRange& r) { return r.lo <= cp && cp <= r.hi; });
}

const char* short_escape(std::uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '/': return "\\/";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return nullptr;
  }
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<std::uint32_t> decode(const std::string& s) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = b;
    std::size_t len = 1;
    if (b >= 0xF0) {
      cp = b & 0x07;
      len = 4;
    } else if (b >= 0xE0) {
      cp = b & 0x0F;
      len = 3;
    } else if (b >= 0xC0) {
      cp = b & 0x1F;
      len = 2;
    }
    for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

}  // namespace

// The JSON encodings of any one code point in `ranges` (scalar values). The escapes part depends only
// on which of the few escapable code points the ranges hold, so it is built once per such set and the
// same expression is reused.
static ExprId encode_ranges(Grammar& g, std::map<std::string, ExprId>& cache, const std::vector<CharRange>& ranges) {
  std::vector<CharRange> raw;
  for (const auto& r : ranges) {
    // Raw: everything but controls, '"' and '\\'.
    std::uint32_t lo = std::max<std::uint32_t>(r.lo, 0x20);
    if (lo > r.hi) continue;
    std::uint32_t start = lo;
    for (std::uint32_t special : {std::uint32_t{'"'}, std::uint32_t{'\\'}}) {
      if (special >= start && special <= r.hi) {
        if (special > start) raw.push_back({start, special - 1});
        start = special + 1;
      }
    }
    if (start <= r.hi) raw.push_back({start, r.hi});
  }
  std::vector<ExprId> alts;
  if (!raw.empty()) alts.push_back(g.add_char_class(raw));
  std::vector<std::uint32_t> escaped;
  for (const auto& r : ranges) {
    for (std::uint32_t cp = r.lo; cp <= std::min<std::uint32_t>(r.hi, 0x1F); ++cp) escaped.push_back(cp);
  }
  for (std::uint32_t cp : {std::uint32_t{'"'}, std::uint32_t{'/'}, std::uint32_t{'\\'}}) {
    if (contains(ranges, cp)) escaped.push_back(cp);
  }
  if (!escaped.empty()) {
    // Keyed by which of the 35 escapable code points are in (a bit each): a key spelled code point by code
    // point with fmt::format took about a third of a large schema's conversion (strings excluding keys).
    std::uint64_t bits = 0;
    for (std::uint32_t cp : escaped)
      bits |= std::uint64_t{1} << (cp < 0x20 ? cp : cp == '"' ? 32 : cp == '/' ? 33 : 34);
    const std::string key = fmt::format("escapes {:x}", bits);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto hex = [&](unsigned v) {  // one hex digit, either case
        const char lower = "0123456789abcdef"[v];
        const char upper = "0123456789ABCDEF"[v];
        return lower == upper ? g.add_bytes(std::string(1, lower))
                              : g.add_char_class({{static_cast<std::uint32_t>(upper), static_cast<std::uint32_t>(upper)},
                                                  {static_cast<std::uint32_t>(lower), static_cast<std::uint32_t>(lower)}});
      };
      // One expression shaped as a trie ("\\" then a short escape letter or "u00", a high nibble and its
      // low nibbles): spelled as one alternative per escape, every use would cost some seventy automaton
      // states instead of about ten.
      std::vector<CharRange> letters;
      std::map<unsigned, std::vector<CharRange>> low_digits;  // by high nibble
      auto add_digit = [](std::vector<CharRange>& to, unsigned v) {
        to.push_back({static_cast<std::uint32_t>("0123456789abcdef"[v]), static_cast<std::uint32_t>("0123456789abcdef"[v])});
        to.push_back({static_cast<std::uint32_t>("0123456789ABCDEF"[v]), static_cast<std::uint32_t>("0123456789ABCDEF"[v])});
      };
      for (std::uint32_t cp : escaped) {
        if (const char* e = short_escape(cp)) letters.push_back({static_cast<unsigned char>(e[1]), static_cast<unsigned char>(e[1])});
        add_digit(low_digits[cp >> 4], cp & 0xF);
      }
      std::vector<ExprId> after_u;
      for (auto& [high, lows] : low_digits) after_u.push_back(g.add_sequence({hex(high), g.add_char_class(std::move(lows))}));
      std::vector<ExprId> after_backslash;
      if (!letters.empty()) after_backslash.push_back(g.add_char_class(std::move(letters)));
      after_backslash.push_back(g.add_sequence({g.add_bytes("u00"), after_u.size() == 1 ? after_u[0] : g.add_choice(after_u)}));
      const ExprId esc = g.add_sequence(
          {g.add_bytes("\\"), after_backslash.size() == 1 ? after_backslash[0] : g.add_choice(after_backslash)});
      it = cache.emplace(key, esc).first;
    }
    alts.push_back(it->second);
  }
  if (alts.empty()) return g.add_char_class({});
  return alts.size() == 1 ? alts[0] : g.add_choice(alts);
}

ExprId Converter::json_char() {
  auto it = cache_.find("json_char");
  if (it != cache_.end()) return it->second;
  ExprId raw = g_.add_char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, /*negated=*/true);
  ExprId hex = g_.add_char_class({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
  ExprId hex2 = g_.add_repeat(hex, 2, 2);
  ExprId d = g_.add_char_class({{'D', 'D'}, {'d', 'd'}});
  // \uXXXX that is not a surrogate, or a surrogate pair.
  ExprId non_surrogate = g_.add_choice({
      g_.add_sequence({g_.add_char_class({{'0', '9'}, {'A', 'C'}, {'a', 'c'}, {'E', 'F'}, {'e', 'f'}}), hex, hex2}),
      g_.add_sequence({d, g_.add_char_class({{'0', '7'}}), hex2})});
  ExprId high = g_.add_sequence({d, g_.add_char_class({{'8', '9'}, {'A', 'B'}, {'a', 'b'}}), hex2});
  ExprId low = g_.add_sequence({d, g_.add_char_class({{'C', 'F'}, {'c', 'f'}}), hex2});
  ExprId u = g_.add_sequence({g_.add_bytes("u"), g_.add_choice({non_surrogate, g_.add_sequence({high, g_.add_bytes("\\u"), low})})});
  ExprId esc = g_.add_sequence({g_.add_bytes("\\"), g_.add_choice({g_.add_char_class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}), u})});
  ExprId ch = g_.add_choice({raw, esc});
  cache_["json_char"] = ch;
  return ch;
}

ExprId Converter::string_literal(const std::string& text) {
  std::vector<ExprId> parts{g_.add_bytes("\"")};
  std::string run;
  for (std::uint32_t cp : decode(text)) {
    if (cp >= 0x20 && cp != '"' && cp != '\\' && cp != '/') {
      run += utf8(cp);
      continue;
    }
    if (!run.empty()) parts.push_back(g_.add_bytes(run));
    run.clear();
    parts.push_back(encode_ranges(g_, cache_, {{cp, cp}}));
  }
  if (!run.empty()) parts.push_back(g_.add_bytes(run));
  parts.push_back(g_.add_bytes("\""));
  return g_.add_sequence(parts);
}

// Bodies (without quotes) of strings that differ from every string of `excluded`: the trie of the
// excluded strings as a graph, where leaving the trie (a character that no excluded string continues with)
// leads to one shared state that reads any string. Spelled as nested choices instead, the rest of the
// string would be copied at every trie node (thousands of automaton states for a dozen keys).
ExprId Converter::string_body_excluding(const std::vector<std::string>& excluded, const std::string& pointer,
                                        const std::string& keyword) {
  // Bounded like the grammar itself: a trie node per distinct prefix of the excluded strings.
  auto dfa = detail::dfa_excluding(excluded, options_.max_grammar_exprs);
  if (!dfa) {
    throw LimitError(fmt::format("[json_schema] {}/{}: the {} excluded strings need a trie of more than {} states",
                                 pointer, keyword, excluded.size(), options_.max_grammar_exprs));
  }
  const std::vector<CharRange> every = detail::scalar_ranges({}, true);
  // Off the trie every character may be escaped; on it, \u escapes of ordinary characters are not offered
  // (they could spell an excluded string).
  return detail::dfa_to_expr(*dfa, g_, [&](const std::vector<CharRange>& r) { return r == every ? json_char() : json_chars(r); });
}

ExprId Converter::copy_regex_as_string_body(const Grammar& scratch, ExprId root,
                                            const std::string& pointer,
                                            const std::string& keyword) {
  std::vector<ExprId> map(scratch.exprs().size());
  for (ExprId i = 0; i <= root; ++i) {
    const Expr& e = scratch.expr(i);
    std::vector<ExprId> children;
    for (ExprId c : e.children) children.push_back(map[c]);
    switch (e.kind) {
      case ExprKind::kEmpty: map[i] = g_.add_empty(); break;
      case ExprKind::kBytes: {
        std::vector<ExprId> parts;
        for (std::uint32_t cp : decode(e.bytes)) parts.push_back(encode_ranges(g_, cache_, {{cp, cp}}));
        map[i] = parts.empty() ? g_.add_empty() : g_.add_sequence(parts);
        break;
      }
      case ExprKind::kCharClass: map[i] = encode_ranges(g_, cache_, detail::scalar_ranges(e.ranges, e.negated)); break;
      case ExprKind::kSequence: map[i] = g_.add_sequence(std::move(children)); break;
      case ExprKind::kChoice: map[i] = g_.add_choice(std::move(children)); break;
      case ExprKind::kRepeat: map[i] = g_.add_repeat(children.at(0), e.min, e.max); break;
      case ExprKind::kGraph: map[i] = g_.add_graph(e.graph_states, e.edges, e.accepting, std::move(children)); break;
      case ExprKind::kRuleRef:
      case ExprKind::kToken:
        fail(pointer, keyword, "internal: a regex produced a rule reference or a token");
    }
  }
  return map[root];
}

ExprId Converter::add_schema_regex(Grammar& scratch, const std::string& regex, bool full_match, const std::string& pointer,
                                   const char* keyword) {
  try {
    RegexOptions ro;
    ro.full_match = full_match;
    return add_regex(scratch, regex, ro);
  } catch (const Error& e) {
    fail(pointer, keyword, fmt::format("{} \"{}\" cannot be enforced: {}", keyword, regex, e.what()));
  }
}

ExprId Converter::pattern_expr(const std::string& pattern, const std::string& pointer) {
  Grammar scratch;
  const ExprId root = add_schema_regex(scratch, pattern, false, pointer, "pattern");
  // Copy into g_, re-encoding every character as JSON string text.
  ExprId body = copy_regex_as_string_body(scratch, root, pointer, "pattern");
  check_size();
  return body;
}

namespace {

// Regexes (over the decoded string) of the formats whose definition is a regular language.
const std::map<std::string, std::string>& format_regexes() {
  static const std::map<std::string, std::string> formats = [] {
    std::map<std::string, std::string> f;
    const std::string leap_year = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)";
    const std::string month_day =
        "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
    const std::string date = "([0-9]{4}-" + month_day + "|" + leap_year + "-02-29)";
    const std::string offset = "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    const std::string frac = "(\\.[0-9]+)?";
    // Second 60 only in a leap second, which is 23:59:60 UTC: the local time is 23:59 plus the offset, so
    // each local time HH:MM has its own two offsets. Written as a trie (hour, then minute, then the two
    // offsets), each local time's ":60" and fraction are spelled once: as 2,880 whole alternatives they
    // were about 66,000 automaton states, most of every date-time schema's compile.
    std::map<int, std::vector<std::string>> offsets_at;  // local minute of the day -> its offsets
    offsets_at[23 * 60 + 59] = {"[Zz]", "[+-]00:00"};
    for (int sign : {1, -1}) {
      for (int h = 0; h < 24; ++h) {
        for (int m = 0; m < 60; ++m) {
          if (h == 0 && m == 0) continue;
          int local = ((23 * 60 + 59 + sign * (h * 60 + m)) % 1440 + 1440) % 1440;
          offsets_at[local].push_back(fmt::format("{}{:02}:{:02}", sign > 0 ? "\\+" : "-", h, m));
        }
      }
    }
    std::string leap = "(";
    for (int h = 0; h < 24; ++h) {
      leap += fmt::format("{}{:02}:(", h == 0 ? "" : "|", h);
      for (int m = 0; m < 60; ++m) {
        leap += fmt::format("{}{:02}:60{}(", m == 0 ? "" : "|", m, frac);
        const auto& offsets = offsets_at.at(h * 60 + m);
        for (std::size_t i = 0; i < offsets.size(); ++i) leap += (i == 0 ? "" : "|") + offsets[i];
        leap += ")";
      }
      leap += ")";
    }
    leap += ")";
    const std::string time = "(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" + frac + offset + "|" + leap + ")";
    f["date"] = date;
    f["time"] = time;
    f["date-time"] = date + "[Tt]" + time;
    const std::string dur_time = "T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)";
    f["duration"] = "P(([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M([0-9]+D)?)?)(" + dur_time + ")?|" + dur_time + "|[0-9]+W)";
    f["uuid"] = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    const std::string ipv4 = octet + "\\." + octet + "\\." + octet + "\\." + octet;
    f["ipv4"] = ipv4;
    const std::string h16 = "[0-9a-fA-F]{1,4}";
    const std::string ls32 = "(" + h16 + ":" + h16 + "|" + ipv4 + ")";
    const std::string ipv6 = "((" + h16 + ":){6}" + ls32 + "|::(" + h16 + ":){5}" + ls32 + "|(" + h16 + ")?::(" + h16 +
                             ":){4}" + ls32 + "|((" + h16 + ":){0,1}" + h16 + ")?::(" + h16 + ":){3}" + ls32 + "|((" +
                             h16 + ":){0,2}" + h16 + ")?::(" + h16 + ":){2}" + ls32 + "|((" + h16 + ":){0,3}" + h16 +
                             ")?::" + h16 + ":" + ls32 + "|((" + h16 + ":){0,4}" + h16 + ")?::" + ls32 + "|((" + h16 +
                             ":){0,5}" + h16 + ")?::" + h16 + "|((" + h16 + ":){0,6}" + h16 + ")?::)";
    f["ipv6"] = ipv6;
    // "hostname" is not here: its total length bound and the A-label (Punycode) rules are not enforceable.
    // RFC 5321 Mailbox.
    const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
    const std::string local = "(" + atext + "+(\\." + atext + "+)*|\"([ !#-\\[\\]-~]|\\\\[ -~])*\")";
    const std::string subdomain = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?";
    const std::string domain = "(" + subdomain + "(\\." + subdomain + ")*|\\[(" + ipv4 + "|IPv6:" + ipv6 + ")\\])";
    f["email"] = local + "@" + domain;
    // RFC 3986 URI and URI reference; RFC 3987 IRI adds ucschar (and iprivate in queries).
    auto uri = [&](const std::string& extra_unreserved, const std::string& extra_query) {
      const std::string unreserved = "[A-Za-z0-9._~" + extra_unreserved + "-]";
      const std::string pct = "%[0-9A-Fa-f]{2}";
      const std::string sub = "[!$&'()*+,;=]";
      const std::string pchar = "(" + unreserved + "|" + pct + "|" + sub + "|[:@])";
      const std::string scheme = "[A-Za-z][A-Za-z0-9+.-]*";
      const std::string userinfo = "(" + unreserved + "|" + pct + "|" + sub + "|:)*";
      const std::string ipfuture = "[vV][0-9A-Fa-f]+\\.(" + unreserved + "|" + sub + "|:)+";
      const std::string host = "(\\[(" + ipv6 + "|" + ipfuture + ")\\]|" + ipv4 + "|(" + unreserved + "|" + pct + "|" + sub + ")*)";
      const std::string authority = "(" + userinfo + "@)?" + host + "(:[0-9]*)?";
      const std::string segment = pchar + "*";
      const std::string segment_nz = pchar + "+";
      const std::string segment_nz_nc = "(" + unreserved + "|" + pct + "|" + sub + "|@)+";
      const std::string path_abempty = "(/" + segment + ")*";
      const std::string path_absolute = "/(" + segment_nz + "(/" + segment + ")*)?";
      const std::string path_rootless = segment_nz + "(/" + segment + ")*";
      const std::string path_noscheme = segment_nz_nc + "(/" + segment + ")*";
      const std::string query = "(\\?(" + pchar + "|[/?]" + extra_query + ")*)?";
      const std::string fragment = "(#(" + pchar + "|[/?])*)?";
      const std::string hier = "(//" + authority + path_abempty + "|" + path_absolute + "|" + path_rootless + "|)";
      const std::string full = scheme + ":" + hier + query + fragment;
      const std::string relative = "(//" + authority + path_abempty + "|" + path_absolute + "|" + path_noscheme + "|)" + query + fragment;
      return std::make_pair(full, "(" + full + "|" + relative + ")");
    };
    auto [u, ur] = uri("", "");
    f["uri"] = u;
    f["uri-reference"] = ur;
    const std::string ucschar =
        "\\u00A0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF\\u{10000}-\\u{1FFFD}\\u{20000}-\\u{2FFFD}\\u{30000}-\\u{3FFFD}"
        "\\u{40000}-\\u{4FFFD}\\u{50000}-\\u{5FFFD}\\u{60000}-\\u{6FFFD}\\u{70000}-\\u{7FFFD}\\u{80000}-\\u{8FFFD}"
        "\\u{90000}-\\u{9FFFD}\\u{A0000}-\\u{AFFFD}\\u{B0000}-\\u{BFFFD}\\u{C0000}-\\u{CFFFD}\\u{D0000}-\\u{DFFFD}"
        "\\u{E1000}-\\u{EFFFD}";
    const std::string iprivate = "|[\\uE000-\\uF8FF\\u{F0000}-\\u{FFFFD}\\u{100000}-\\u{10FFFD}]";
    auto [i, ir] = uri(ucschar, iprivate);
    f["iri"] = i;
    f["iri-reference"] = ir;
    f["json-pointer"] = "(/([^/~]|~[01])*)*";
    f["relative-json-pointer"] = "(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)";
    const std::string literal = "([!#$&(-;=?-\\[\\]_a-z~\\u00A0-\\uD7FF\\uE000-\\uFFFD\\u{10000}-\\u{10FFFD}]|%[0-9A-Fa-f]{2})";
    const std::string varchar = "([A-Za-z0-9_]|%[0-9A-Fa-f]{2})";
    const std::string varspec = varchar + "(\\.?" + varchar + ")*(:[1-9][0-9]{0,3}|\\*)?";
    f["uri-template"] = "(" + literal + "|\\{[+#./;?&=,!@|]?" + varspec + "(," + varspec + ")*\\})*";
    return f;
  }();
  return formats;
}

// Every format of drafts 04 to 2020-12 (draft 2020-12 section 7.3 and its predecessors).
const std::vector<std::string>& defined_formats() {
  static const std::vector<std::string> names = {
      "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
      "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
      "relative-json-pointer", "regex"};
  return names;
}

std::string format_key(const std::string& name) {
  std::string key;
  for (char ch : name) {
    if (ch != '-' && ch != '_') key += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return key;
}

// A format's language as a minimal DFA over code points, built once per process (formats are fixed
// text): written as a regex, a format repeats what a DFA merges (the leap second's local times each
// followed by a fraction and two offsets: 42,000 automaton states as the regex, about a quarter of that as
// the minimal DFA). nullptr when the DFA would pass kMaxFormatDfaStates: the regex is used instead.
constexpr std::size_t kMaxFormatDfaStates = 1 << 15;

const detail::CodePointDfa* minimal_format_dfa(const std::string& format) {
  static std::mutex mutex;
  static std::map<std::string, std::optional<detail::CodePointDfa>> built;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(format);
  if (it == built.end()) {
    std::optional<detail::CodePointDfa> dfa;
    auto regex = format_regexes().find(format);
    if (regex != format_regexes().end()) {
      Grammar scratch;
      dfa = detail::dfa_from_expr(scratch, add_regex(scratch, regex->second, RegexOptions{}), kMaxFormatDfaStates);
      if (dfa) dfa = detail::minimize(*dfa);
    }
    it = built.emplace(format, std::move(dfa)).first;
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace

bool is_defined_format(const std::string& name) {
  const auto& names = defined_formats();
  return std::find(names.begin(), names.end(), name) != names.end();
}

const std::string* defined_format_ignoring_case(const std::string& name) {
  const std::string key = format_key(name);
  for (const std::string& f : defined_formats())
    if (format_key(f) == key) return &f;
  return nullptr;
}

ExprId Converter::format_expr(const std::string& format, const std::string& pointer) {
  auto cached = cache_.find("format:" + format);
  if (cached != cache_.end()) return cached->second;
  const auto& table = format_regexes();
  auto it = table.find(format);
  if (it == table.end()) {
    fail(pointer, "format", fmt::format("format \"{}\" is not supported (it cannot be enforced exactly)", format));
  }
  ExprId body;
  if (const detail::CodePointDfa* dfa = minimal_format_dfa(format)) {
    body = detail::dfa_to_expr(*dfa, g_, [&](const std::vector<CharRange>& ranges) { return json_chars(ranges); },
                               /*minimal=*/true);
  } else {
    Grammar scratch;
    body = copy_regex_as_string_body(scratch, add_regex(scratch, it->second, RegexOptions{}), pointer, "format");
  }
  check_size();
  cache_["format:" + format] = body;
  return body;
}

namespace {

std::vector<std::string> excluded_strings(const Constraints& c) {
  std::vector<std::string> out;
  for (const auto& v : c.excluded)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

// Distinct formats (the same format twice is one constraint).
std::vector<std::pair<std::string, std::string>> distinct_formats(const std::vector<std::pair<std::string, std::string>>& formats) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : formats)
    if (std::none_of(out.begin(), out.end(), [&](const auto& x) { return x.first == f.first; })) out.push_back(f);
  return out;
}

}  // namespace

ExprId Converter::json_chars(const std::vector<CharRange>& ranges) {
  std::string key(ranges.size() * sizeof(CharRange), '\0');
  if (!ranges.empty()) std::memcpy(key.data(), ranges.data(), key.size());
  auto [it, fresh] = chars_cache_.try_emplace(std::move(key), 0);
  if (fresh) it->second = encode_ranges(g_, cache_, ranges);
  return it->second;
}

detail::CodePointDfa Converter::key_pattern_dfa(const std::string& pattern, const std::string& pointer) {
  Grammar scratch;
  const ExprId root = add_schema_regex(scratch, pattern, false, pointer, "patternProperties");
  auto dfa = detail::dfa_from_expr(scratch, root, 4096);
  if (!dfa) fail(pointer, "patternProperties", fmt::format("pattern \"{}\" needs more than 4096 automaton states", pattern));
  return std::move(*dfa);
}

bool Converter::needs_string_dfa(const Constraints& c) {
  const bool has_length = c.min_length > 0 || c.max_length != kUnbounded;
  const std::size_t shapes = c.patterns.size() + distinct_formats(c.formats).size() + (has_length ? 1 : 0) +
                             (excluded_strings(c).empty() ? 0 : 1);
  return shapes > 1 || !c.not_patterns.empty() || !c.not_formats.empty();
}

std::string Converter::string_signature(const Constraints& c) {
  std::string key = fmt::format("{} {}", c.min_length, c.max_length);
  for (const auto* list : {&c.patterns, &c.formats, &c.not_patterns, &c.not_formats}) {
    key += " |";
    for (const auto& [x, at] : *list) key += " " + std::to_string(x.size()) + ":" + x;
  }
  for (const auto& e : excluded_strings(c)) key += " !" + std::to_string(e.size()) + ":" + e;
  return key;
}

ExprId Converter::emit_string(const Constraints& c) {
  if (c.min_length > c.max_length) return g_.add_char_class({});
  // Strings with the same constraints (a maxLength on many properties) are one expression, which the
  // automaton emits once as a rule when it is large; their DFA products are computed once.
  const std::string key = "string:" + string_signature(c);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  const std::vector<std::string> excluded = excluded_strings(c);
  const auto formats = distinct_formats(c.formats);
  ExprId body;
  if (needs_string_dfa(c)) {
    const detail::CodePointDfa dfa = string_dfa(c);
    if (dfa.empty()) return g_.add_char_class({});
    body = detail::dfa_to_expr(dfa, g_, [&](const std::vector<CharRange>& ranges) { return json_chars(ranges); });
    check_size();
  } else if (!c.patterns.empty()) {
    body = pattern_expr(c.patterns[0].first, c.patterns[0].second);
  } else if (!formats.empty()) {
    body = format_expr(formats[0].first, formats[0].second);
  } else if (!excluded.empty()) {
    body = string_body_excluding(excluded, c.values_pointer, "not");
  } else {
    body = g_.add_repeat(json_char(), c.min_length, c.max_length);
  }
  const ExprId string = g_.add_sequence({g_.add_bytes("\""), body, g_.add_bytes("\"")});
  cache_.emplace(key, string);
  return string;
}

// Every string constraint at once: patterns (searches), formats, the patterns and formats a `not` forbids
// (complements), excluded values and lengths, each a DFA over code points, and their product (exact).
// Lengths the other constraints already imply are left out.
detail::CodePointDfa Converter::string_dfa(const Constraints& c) {
  // A date-time alone is some 11,000 states (its leap seconds); a product past this is a SchemaError.
  constexpr std::size_t kMaxStates = 1 << 14;
  const auto formats = distinct_formats(c.formats);
  const std::string& pointer = !c.patterns.empty()       ? c.patterns[0].second
                               : !formats.empty()         ? formats[0].second
                               : !c.not_patterns.empty()  ? c.not_patterns[0].second
                               : !c.not_formats.empty()   ? c.not_formats[0].second
                                                          : c.length_pointer;
  const char* keyword = !c.patterns.empty() || !c.not_patterns.empty() ? "pattern"
                        : !formats.empty() || !c.not_formats.empty()  ? "format"
                                                                      : "maxLength";
  auto too_big = [&](const std::string& what) {
    fail(pointer, keyword,
         fmt::format("{} on one string cannot be enforced: their intersection needs more than {} automaton states", what, kMaxStates));
  };
  std::vector<detail::CodePointDfa> parts;
  auto regex_dfa = [&](const std::string& regex, bool full_match, const std::string& at, const char* kw, bool negated) {
    Grammar scratch;
    const ExprId root = add_schema_regex(scratch, regex, full_match, at, kw);
    auto dfa = detail::dfa_from_expr(scratch, root, kMaxStates);
    if (dfa && negated) dfa = detail::complement(*dfa, kMaxStates);
    if (!dfa) too_big(fmt::format("{} \"{}\"", kw, regex));
    parts.push_back(std::move(*dfa));
  };
  auto format_regex = [&](const std::string& format, const std::string& at) -> const std::string& {
    const auto& table = format_regexes();
    auto it = table.find(format);
    if (it == table.end()) fail(at, "format", fmt::format("format \"{}\" is not supported (it cannot be enforced exactly)", format));
    return it->second;
  };
  for (const auto& [pattern, at] : c.patterns) regex_dfa(pattern, false, at, "pattern", false);
  for (const auto& [pattern, at] : c.not_patterns) regex_dfa(pattern, false, at, "pattern", true);
  auto format_dfa = [&](const std::string& format, const std::string& at, bool negated) {
    const detail::CodePointDfa* dfa = minimal_format_dfa(format);
    if (!dfa) return regex_dfa(format_regex(format, at), true, at, "format", negated);
    auto part = negated ? detail::complement(*dfa, kMaxStates) : std::optional<detail::CodePointDfa>(*dfa);
    if (!part) too_big(fmt::format("format \"{}\"", format));
    parts.push_back(std::move(*part));
  };
  for (const auto& [format, at] : formats) format_dfa(format, at, false);
  for (const auto& [format, at] : c.not_formats) format_dfa(format, at, true);
  const std::vector<std::string> excluded = excluded_strings(c);
  if (!excluded.empty()) {
    auto dfa = detail::dfa_excluding(excluded, kMaxStates);
    if (!dfa) too_big("excluded values");
    parts.push_back(std::move(*dfa));
  }
  std::optional<detail::CodePointDfa> product;
  if (!parts.empty()) {
    product = detail::intersect(parts, kMaxStates);
    if (!product) too_big("pattern, format and excluded values");
    if (product->empty()) return *product;
  }
  if (c.min_length > 0 || c.max_length != kUnbounded) {
    const auto range = product ? detail::length_range(*product) : std::nullopt;
    const bool implied = range && range->first >= c.min_length && range->second <= c.max_length;
    if (!implied) {
      auto lengths = detail::dfa_of_length(c.min_length, c.max_length, kMaxStates);
      if (!lengths) too_big("a length bound");
      if (product) {
        product = detail::intersect({std::move(*product), std::move(*lengths)}, kMaxStates);
        if (!product) too_big("pattern, format, excluded values and length bounds");
      } else {
        product = std::move(lengths);
      }
    }
  }
  if (!product) product = detail::dfa_of_length(0, kUnbounded, 1);  // no constraint: every string
  return std::move(*product);
}

bool Converter::string_satisfies(const std::string& value, const Constraints& c) {
  const auto text = detail::decode_utf8(value);
  if (!text) return false;
  const std::string key = string_signature(c);
  auto it = string_dfas_.find(key);
  if (it == string_dfas_.end()) it = string_dfas_.emplace(key, string_dfa(c)).first;
  return it->second.accepts(*text);
}

}  // namespace pse::json_schema_detail

#include "normalizer.h"

#include <re2/re2.h>

#include "unicode.h"

namespace tokenizers::detail {

namespace {

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t at = 0;
  for (std::size_t hit = s.find(from); hit != std::string_view::npos; hit = s.find(from, at)) {
    out.append(s.substr(at, hit - at));
    out.append(to);
    at = hit + from.size();
  }
  out.append(s.substr(at));
  return out;
}

std::string bert_normalize(std::string_view text, const NormalizerStep& st) {
  std::vector<std::uint32_t> cps = unicode::to_code_points(text);
  std::vector<std::uint32_t> out;
  out.reserve(cps.size());
  for (std::uint32_t cp : cps) {
    const auto cat = unicode::category(cp);
    if (st.clean_text) {
      if (cp == 0 || cp == 0xFFFD) continue;
      // HF's is_control: Cc/Cf/Cn/Co except \t \n \r (which count as whitespace).
      if (cp != '\t' && cp != '\n' && cp != '\r' &&
          (cat == unicode::kCc || cat == unicode::kCf || cat == unicode::kCn || cat == unicode::kCo)) {
        continue;
      }
      if (unicode::is_whitespace(cp)) {
        out.push_back(' ');
        continue;
      }
    }
    if (st.handle_chinese_chars && unicode::is_cjk_ideograph(cp)) {
      out.push_back(' ');
      out.push_back(cp);
      out.push_back(' ');
      continue;
    }
    out.push_back(cp);
  }
  if (st.strip_accents) {
    out = unicode::nfd(out);
    std::erase_if(out, [](std::uint32_t cp) { return unicode::category(cp) == unicode::kMn; });
  }
  if (st.lowercase) {
    for (auto& cp : out) cp = unicode::to_lower(cp);
  }
  return unicode::to_utf8(out);
}

}  // namespace

std::string Normalizer::apply(std::string_view text_in, bool first) const {
  std::string text(text_in);
  for (const NormalizerStep& st : steps_) {
    switch (st.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty() && (first || !st.first_only) &&
            (st.pattern.empty() || std::string_view(text).substr(0, st.pattern.size()) != st.pattern)) {
          text = st.text + text;
        }
        break;
      case NormalizerStep::Kind::kReplace:
        text = replace_all(text, st.pattern, st.text);
        break;
      case NormalizerStep::Kind::kReplaceRegex:
        RE2::GlobalReplace(&text, *st.regex, st.text);
        break;
      case NormalizerStep::Kind::kLowercase: {
        std::string out;
        out.reserve(text.size());
        std::size_t pos = 0;
        while (pos < text.size()) unicode::append_utf8(out, unicode::to_lower(unicode::decode_valid(text, pos)));
        text = std::move(out);
        break;
      }
      case NormalizerStep::Kind::kNfc:
        text = unicode::nfc(text);
        break;
      case NormalizerStep::Kind::kNfd:
        text = unicode::nfd(text);
        break;
      case NormalizerStep::Kind::kStripAccents: {
        std::vector<std::uint32_t> cps = unicode::to_code_points(text);
        std::erase_if(cps, [](std::uint32_t cp) { return unicode::category(cp) == unicode::kMn; });
        text = unicode::to_utf8(cps);
        break;
      }
      case NormalizerStep::Kind::kStrip: {
        std::vector<std::uint32_t> cps = unicode::to_code_points(text);
        std::size_t b = 0, e = cps.size();
        if (st.left) {
          while (b < e && unicode::is_whitespace(cps[b])) ++b;
        }
        if (st.right) {
          while (e > b && unicode::is_whitespace(cps[e - 1])) --e;
        }
        text = unicode::to_utf8(std::vector<std::uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                           cps.begin() + static_cast<std::ptrdiff_t>(e)));
        break;
      }
      case NormalizerStep::Kind::kBert:
        text = bert_normalize(text, st);
        break;
    }
  }
  return text;
}

std::vector<std::string> wordpiece_words_llama(std::string_view text) {
  std::vector<std::string> words(1);
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::uint32_t cp = unicode::nfd_first(unicode::decode_valid(text, pos));
    if (unicode::is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const auto cat = unicode::category(cp);
    if (cp == 0 || cp == 0xFFFD || unicode::is_control(cat)) continue;
    std::string s;
    unicode::append_utf8(s, unicode::to_lower(cp));
    if (unicode::is_punctuation(cat) || (cp < 0x7F && unicode::is_symbol(cat)) || unicode::is_cjk_ideograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

bool Normalizer::lowercases() const {
  for (const NormalizerStep& st : steps_) {
    if (st.kind == NormalizerStep::Kind::kLowercase || (st.kind == NormalizerStep::Kind::kBert && st.lowercase)) {
      return true;
    }
  }
  return false;
}

}  // namespace tokenizers::detail

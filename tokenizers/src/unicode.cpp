#include "unicode.h"

#include <algorithm>

namespace tokenizers::unicode {

namespace {

template <std::size_t N>
const std::uint32_t* find_row(const std::uint32_t (*rows)[N], std::size_t n, std::uint32_t cp) {
  std::size_t lo = 0, hi = n;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (rows[mid][0] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && rows[lo][0] == cp ? rows[lo] : nullptr;
}

constexpr std::uint32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr std::uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr std::uint32_t kHangulNCount = kHangulVCount * kHangulTCount, kHangulSCount = kHangulLCount * kHangulNCount;

}  // namespace

bool is_cjk_ideograph(std::uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
         (cp >= 0x2B820 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::uint32_t to_lower(std::uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const std::uint32_t* row = find_row(tables::kLower, tables::kLowerSize, cp);
  return row ? row[1] : cp;
}

std::uint32_t nfd_first(std::uint32_t cp) {
  if (cp < 0xC0) return cp;
  const std::uint32_t* row = find_row(tables::kNfdFirst, tables::kNfdFirstSize, cp);
  return row ? row[1] : cp;
}

std::uint8_t combining_class(std::uint32_t cp) {
  if (cp < 0x300) return 0;
  const std::uint32_t* row = find_row(tables::kCombiningClass, tables::kCombiningClassSize, cp);
  return row ? static_cast<std::uint8_t>(row[1]) : 0;
}

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    // Fast path: eight ASCII bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w;
      std::copy_n(s + i, 8, reinterpret_cast<unsigned char*>(&w));
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char b0 = s[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t min;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    std::uint32_t cp = b0 & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<std::uint32_t> to_code_points(std::string_view text) {
  std::vector<std::uint32_t> out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) out.push_back(decode_valid(text, pos));
  return out;
}

std::string to_utf8(const std::vector<std::uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (std::uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::vector<std::uint32_t> nfd(const std::vector<std::uint32_t>& cps) {
  std::vector<std::uint32_t> out;
  out.reserve(cps.size());
  for (std::uint32_t cp : cps) {
    if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
      const std::uint32_t s = cp - kHangulS;
      out.push_back(kHangulL + s / kHangulNCount);
      out.push_back(kHangulV + (s % kHangulNCount) / kHangulTCount);
      if (s % kHangulTCount != 0) out.push_back(kHangulT + s % kHangulTCount);
      continue;
    }
    const std::uint32_t* row = cp >= 0xC0 ? find_row(tables::kDecomposition, tables::kDecompositionSize, cp) : nullptr;
    if (row == nullptr) {
      out.push_back(cp);
    } else {
      for (std::uint32_t k = 0; k < row[2]; ++k) out.push_back(tables::kDecompositionData[row[1] + k]);
    }
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  std::size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](std::uint32_t a, std::uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return out;
}

namespace {

std::uint32_t compose_pair(std::uint32_t a, std::uint32_t b) {
  if (a >= kHangulL && a < kHangulL + kHangulLCount && b >= kHangulV && b < kHangulV + kHangulVCount) {
    return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
  }
  if (a >= kHangulS && a < kHangulS + kHangulSCount && (a - kHangulS) % kHangulTCount == 0 && b > kHangulT &&
      b < kHangulT + kHangulTCount) {
    return a + (b - kHangulT);
  }
  std::size_t lo = 0, hi = tables::kCompositionSize;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    const auto* r = tables::kComposition[mid];
    if (r[0] < a || (r[0] == a && r[1] < b)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < tables::kCompositionSize && tables::kComposition[lo][0] == a && tables::kComposition[lo][1] == b) {
    return tables::kComposition[lo][2];
  }
  return 0;
}

}  // namespace

std::vector<std::uint32_t> nfc(const std::vector<std::uint32_t>& cps) {
  std::vector<std::uint32_t> d = nfd(cps);
  if (d.empty()) return d;
  std::vector<std::uint32_t> out;
  out.reserve(d.size());
  std::size_t starter = std::string::npos;  // index in out of the last starter
  int last_ccc = -1;
  for (std::uint32_t cp : d) {
    const int ccc = combining_class(cp);
    if (starter != std::string::npos) {
      const bool blocked = !out.empty() && out.size() - 1 != starter && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (std::uint32_t c = compose_pair(out[starter], cp); c != 0) {
          out[starter] = c;
          continue;
        }
      }
    }
    out.push_back(cp);
    if (ccc == 0) {
      starter = out.size() - 1;
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
  }
  return out;
}

std::string nfc(std::string_view text) { return to_utf8(nfc(to_code_points(text))); }
std::string nfd(std::string_view text) { return to_utf8(nfd(to_code_points(text))); }

}  // namespace tokenizers::unicode

// Code point sets for the front-ends; the Unicode data comes from the generated unicode_tables.cpp.
#include "char_sets.h"

#include <algorithm>

#include "unicode_tables.h"

namespace pse::charset {
namespace {

Ranges from_set(const unicode::RangeSet& set) {
  return Ranges(set.ranges, set.ranges + set.n_ranges);
}

const unicode::NamedSet* find_named(std::span<const unicode::NamedSet> table,
                                    std::string_view name) {
  auto it =
      std::lower_bound(table.begin(), table.end(), name,
                       [](const unicode::NamedSet& s, std::string_view n) { return s.name < n; });
  if (it != table.end() && it->name == name) return &*it;
  return nullptr;
}

struct OrbitMember {
  std::uint32_t cp;
  std::uint32_t orbit;
};

// Every code point with case variants and its orbit, sorted by code point; built once.
const std::vector<OrbitMember>& orbit_members_sorted() {
  static const std::vector<OrbitMember> sorted = [] {
    std::vector<OrbitMember> v;
    auto members = unicode::case_orbit_members();
    auto starts = unicode::case_orbit_starts();
    for (std::size_t o = 0; o + 1 < starts.size(); ++o) {
      for (std::uint32_t i = starts[o]; i < starts[o + 1]; ++i)
        v.push_back({members[i], static_cast<std::uint32_t>(o)});
    }
    std::sort(v.begin(), v.end(),
              [](const OrbitMember& a, const OrbitMember& b) { return a.cp < b.cp; });
    return v;
  }();
  return sorted;
}

}  // namespace

Ranges normalize(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const CharRange& a, const CharRange& b) {
    return a.lo < b.lo || (a.lo == b.lo && a.hi < b.hi);
  });
  Ranges out;
  for (const CharRange& r : ranges) {
    if (!out.empty() &&
        static_cast<std::uint64_t>(r.lo) <= static_cast<std::uint64_t>(out.back().hi) + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

Ranges complement(const Ranges& ranges) {
  Ranges out;
  std::uint32_t next = 0;
  for (const CharRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    if (r.hi >= kMaxCodePoint) return out;
    next = r.hi + 1;
  }
  out.push_back({next, kMaxCodePoint});
  return out;
}

bool contains(const Ranges& normalized, std::uint32_t cp) {
  auto it = std::upper_bound(normalized.begin(), normalized.end(), cp,
                             [](std::uint32_t c, const CharRange& r) { return c < r.lo; });
  if (it == normalized.begin()) return false;
  --it;
  return cp <= it->hi;
}

Ranges case_closure(const Ranges& ranges) {
  Ranges out = normalize(ranges);
  const auto& sorted = orbit_members_sorted();
  auto members = unicode::case_orbit_members();
  auto starts = unicode::case_orbit_starts();
  std::vector<std::uint32_t> hit;
  for (const CharRange& r : ranges) {
    auto it = std::lower_bound(sorted.begin(), sorted.end(), r.lo,
                               [](const OrbitMember& m, std::uint32_t cp) { return m.cp < cp; });
    for (; it != sorted.end() && it->cp <= r.hi; ++it) hit.push_back(it->orbit);
  }
  std::sort(hit.begin(), hit.end());
  hit.erase(std::unique(hit.begin(), hit.end()), hit.end());
  for (std::uint32_t o : hit) {
    for (std::uint32_t i = starts[o]; i < starts[o + 1]; ++i)
      out.push_back({members[i], members[i]});
  }
  return normalize(std::move(out));
}

std::vector<std::uint32_t> case_variants(std::uint32_t cp) {
  const auto& sorted = orbit_members_sorted();
  auto it = std::lower_bound(sorted.begin(), sorted.end(), cp,
                             [](const OrbitMember& m, std::uint32_t c) { return m.cp < c; });
  if (it == sorted.end() || it->cp != cp) return {cp};
  auto members = unicode::case_orbit_members();
  auto starts = unicode::case_orbit_starts();
  return std::vector<std::uint32_t>(members.begin() + starts[it->orbit],
                                    members.begin() + starts[it->orbit + 1]);
}

Ranges digit() { return {{'0', '9'}}; }
Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges space() {
  return normalize({{0x09, 0x0D},
                    {0x20, 0x20},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}
Ranges line_terminators() { return {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}}; }

std::optional<Ranges> unicode_property(std::string_view body, std::string& error) {
  std::string_view name = body;
  std::string_view value;
  if (auto eq = body.find('='); eq != std::string_view::npos) {
    name = body.substr(0, eq);
    value = body.substr(eq + 1);
    if (name == "General_Category" || name == "gc") {
      if (const auto* s = find_named(unicode::general_categories(), value)) return from_set(s->set);
      error = "unknown general category '" + std::string(value) + "'";
      return std::nullopt;
    }
    if (name == "Script" || name == "sc") {
      if (const auto* s = find_named(unicode::scripts(), value)) return from_set(s->set);
      error = "unknown script '" + std::string(value) + "'";
      return std::nullopt;
    }
    if (name == "Script_Extensions" || name == "scx") {
      error = "Script_Extensions is not supported (only Script and General_Category are tabulated)";
      return std::nullopt;
    }
    error = "unknown Unicode property '" + std::string(name) + "'";
    return std::nullopt;
  }
  if (const auto* s = find_named(unicode::general_categories(), name)) return from_set(s->set);
  if (name == "Any") return Ranges{{0, kMaxCodePoint}};
  if (name == "ASCII") return Ranges{{0, 0x7F}};
  if (name == "Assigned") {
    const auto* cn = find_named(unicode::general_categories(), "Cn");
    return complement(from_set(cn->set));
  }
  // ECMA-262 requires Script=/sc= for scripts; say so rather than guessing.
  if (find_named(unicode::scripts(), name) != nullptr) {
    error = "'" + std::string(name) + "' is a script: write \\p{Script=" + std::string(name) + "}";
    return std::nullopt;
  }
  error = "unknown or unsupported Unicode property '" + std::string(name) +
          "' (supported: general categories, Script=, Any, ASCII, Assigned)";
  return std::nullopt;
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

std::size_t decode_utf8(std::string_view text, std::size_t pos, std::uint32_t& cp) {
  if (pos >= text.size()) return 0;
  auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(text[pos + i]); };
  std::uint8_t c0 = b(0);
  std::size_t len;
  std::uint32_t min;
  if (c0 < 0x80) {
    cp = c0;
    return 1;
  } else if ((c0 & 0xE0) == 0xC0) {
    len = 2, cp = c0 & 0x1F, min = 0x80;
  } else if ((c0 & 0xF0) == 0xE0) {
    len = 3, cp = c0 & 0x0F, min = 0x800;
  } else if ((c0 & 0xF8) == 0xF0) {
    len = 4, cp = c0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (pos + len > text.size()) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if (cp < min || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace pse::charset

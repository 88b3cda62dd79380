// JSON Schema numbers: exact decimals for bounds, integer ranges built digit by digit (1..12 admits exactly
// those numbers, for any size of bound), decimal ranges built from the integer part and a digit-by-digit
// range on the fraction, and multipleOf as a remainder automaton (integers) or a fraction-length bound
// (powers of ten). Bounded numbers are written without an exponent; see docs/json-schema.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "json_schema_internal.h"

namespace pse::json_schema_detail {
namespace {

std::string strip_leading_zeros(std::string s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == '0') ++i;
  return s.substr(i);
}

std::string strip_trailing_zeros(std::string s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// Natural numbers as digit strings without leading zeros ("" is 0).
int compare_nat(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  int c = a.compare(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

std::string nat_add1(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[i] == '9') s[i--] = '0';
  if (i < 0) return "1" + s;
  ++s[i];
  return s;
}

std::string nat_sub1(std::string s) {  // s > 0
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[i] == '0') s[i--] = '9';
  --s[i];
  return strip_leading_zeros(s);
}

// A signed integer.
struct Int {
  bool negative = false;
  std::string digits;  // "" is zero (never negative)
};

Int int_add1(Int v) {
  if (!v.negative) return {false, nat_add1(v.digits)};
  std::string d = nat_sub1(v.digits);
  return {!d.empty(), d};
}

Int int_sub1(Int v) {
  if (v.negative) return {true, nat_add1(v.digits)};
  if (v.digits.empty()) return {true, "1"};
  return {false, nat_sub1(v.digits)};
}

int compare_int(const Int& a, const Int& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = compare_nat(a.digits, b.digits);
  return a.negative ? -c : c;
}

Int floor_of(const Decimal& d) {
  if (!d.negative || d.frac_digits.empty()) return {d.negative && !d.int_digits.empty(), d.int_digits};
  return {true, nat_add1(d.int_digits)};
}

Int ceil_of(const Decimal& d) {
  if (d.negative || d.frac_digits.empty()) return {d.negative && !d.int_digits.empty(), d.int_digits};
  return {false, nat_add1(d.int_digits)};
}

}  // namespace

Decimal decimal_from_json(const json& number) {
  if (number.is_number_float() && !std::isfinite(number.get<double>())) {
    throw SchemaError("[json_schema] a number in the schema is beyond the double range", "", "");
  }
  std::string text = number.dump();
  Decimal d;
  std::size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string mantissa;
  long long point = -1;
  long long exponent = 0;
  for (; i < text.size(); ++i) {
    char ch = text[i];
    if (ch >= '0' && ch <= '9') {
      mantissa += ch;
    } else if (ch == '.') {
      point = static_cast<long long>(mantissa.size());
    } else if (ch == 'e' || ch == 'E') {
      exponent = std::stoll(text.substr(i + 1));
      break;
    }
  }
  if (point < 0) point = static_cast<long long>(mantissa.size());
  point += exponent;
  // Digits before `point` are the integer part.
  if (point < 0) {
    mantissa = std::string(static_cast<std::size_t>(-point), '0') + mantissa;
    point = 0;
  }
  if (point > static_cast<long long>(mantissa.size())) mantissa += std::string(point - mantissa.size(), '0');
  d.int_digits = strip_leading_zeros(mantissa.substr(0, static_cast<std::size_t>(point)));
  d.frac_digits = strip_trailing_zeros(mantissa.substr(static_cast<std::size_t>(point)));
  if (d.is_zero()) d.negative = false;
  return d;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = compare_nat(a.int_digits, b.int_digits);
  if (c == 0) {
    std::size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
    std::string fa = a.frac_digits + std::string(n - a.frac_digits.size(), '0');
    std::string fb = b.frac_digits + std::string(n - b.frac_digits.size(), '0');
    c = fa.compare(fb);
    c = c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  return a.negative ? -c : c;
}

std::string to_string(const Decimal& d) {
  std::string s = d.negative ? "-" : "";
  s += d.int_digits.empty() ? "0" : d.int_digits;
  if (!d.frac_digits.empty()) s += "." + d.frac_digits;
  return s;
}

namespace {

class NumberBuilder {
 public:
  explicit NumberBuilder(Grammar& g) : g_(g) {}

  ExprId dead() { return g_.add_char_class({}); }
  ExprId digits(char lo, char hi) { return g_.add_char_class({{static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi)}}); }
  ExprId any_digits(std::uint32_t min, std::uint32_t max) { return g_.add_repeat(digits('0', '9'), min, max); }

  // Digit strings of equal length n with lo <= s <= hi (lexicographic = numeric at equal length).
  ExprId same_len(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return g_.add_empty();
    if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos) {
      return any_digits(static_cast<std::uint32_t>(lo.size()), static_cast<std::uint32_t>(lo.size()));
    }
    if (lo[0] == hi[0]) return g_.add_sequence({g_.add_bytes(std::string(1, lo[0])), same_len(lo.substr(1), hi.substr(1))});
    const std::size_t n = lo.size() - 1;
    std::vector<ExprId> alts;
    alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, lo[0])), same_len(lo.substr(1), std::string(n, '9'))}));
    if (hi[0] - lo[0] > 1) alts.push_back(g_.add_sequence({digits(lo[0] + 1, hi[0] - 1), any_digits(n, n)}));
    alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, hi[0])), same_len(std::string(n, '0'), hi.substr(1))}));
    return g_.add_choice(alts);
  }

  // Naturals a <= n <= b written without leading zeros ("0" for zero); b empty optional: unbounded.
  ExprId nat_range(const std::string& a, const std::optional<std::string>& b) {
    if (b && compare_nat(a, *b) > 0) return dead();
    std::vector<ExprId> alts;
    std::string lo = a;
    if (lo.empty()) {  // zero
      alts.push_back(g_.add_bytes("0"));
      if (b && b->empty()) return alts[0];
      lo = "1";
    }
    const std::size_t la = lo.size();
    const std::size_t lb = b ? b->size() : la;
    for (std::size_t l = la; l <= lb; ++l) {
      std::string l_lo = l == la ? lo : "1" + std::string(l - 1, '0');
      std::string l_hi = (b && l == lb) ? *b : std::string(l, '9');
      alts.push_back(same_len(l_lo, l_hi));
    }
    if (!b) {
      alts.push_back(g_.add_sequence({digits('1', '9'), any_digits(static_cast<std::uint32_t>(la), kUnbounded)}));
    }
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }

  // Integers in [lo, hi] (absent: unbounded), as JSON text without fraction.
  ExprId int_range(const std::optional<Int>& lo, const std::optional<Int>& hi) {
    if (lo && hi && compare_int(*lo, *hi) > 0) return dead();
    std::vector<ExprId> alts;
    // Non-negative part: [max(lo, 0), hi].
    if (!hi || !hi->negative) {
      std::string a = (lo && !lo->negative) ? lo->digits : "";
      std::optional<std::string> b;
      if (hi) b = hi->digits;
      alts.push_back(nat_range(a, b));
    }
    // Negative part: -m for m in [max(-hi, 1), -lo].
    if (!lo || lo->negative) {
      std::string a = (hi && hi->negative) ? hi->digits : "1";
      std::optional<std::string> b;
      if (lo) b = lo->digits;
      alts.push_back(g_.add_sequence({g_.add_bytes("-"), nat_range(a, b)}));
    }
    if (alts.empty()) return dead();
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }

  // Digit strings s (possibly empty) with a <(=) 0.s <(=) b; b absent: below 1. a, b without trailing zeros.
  ExprId frac_range(const std::string& a, const std::optional<std::string>& b, bool a_excl, bool b_excl,
                    bool need_digit) {
    std::vector<ExprId> alts;
    const bool zero_ok = a.empty() && !a_excl && (!b || !b->empty() || !b_excl);
    if (!need_digit && zero_ok) alts.push_back(g_.add_empty());
    if (b && a.empty() && b->empty()) {
      // 0 <= 0.s <= 0: only zeros.
      if (!a_excl && !b_excl) alts.push_back(g_.add_repeat(g_.add_bytes("0"), need_digit ? 1 : 0, kUnbounded));
      return alts.empty() ? dead() : alts.size() == 1 ? alts[0] : g_.add_choice(alts);
    }
    if (!b && a.empty()) {
      if (!a_excl) {
        alts.push_back(any_digits(need_digit ? 1 : 0, kUnbounded));
      } else {
        alts.push_back(g_.add_sequence({any_digits(0, kUnbounded), digits('1', '9'), any_digits(0, kUnbounded)}));
      }
      return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
    }
    const int a0 = a.empty() ? 0 : a[0] - '0';
    const int b0 = b ? (b->empty() ? 0 : (*b)[0] - '0') : 10;
    const std::string a_rest = a.empty() ? "" : a.substr(1);
    std::optional<std::string> b_rest;
    if (b) b_rest = b->empty() ? "" : b->substr(1);
    if (a0 == b0) {
      alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, static_cast<char>('0' + a0))),
                                      frac_range(a_rest, b_rest, a_excl, b_excl, false)}));
    } else {
      alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, static_cast<char>('0' + a0))),
                                      frac_range(a_rest, std::nullopt, a_excl, false, false)}));
      if (b0 - a0 > 1) {
        alts.push_back(g_.add_sequence({digits(static_cast<char>('0' + a0 + 1), static_cast<char>('0' + b0 - 1)),
                                        any_digits(0, kUnbounded)}));
      }
      if (b0 < 10) {
        alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, static_cast<char>('0' + b0))),
                                        frac_range("", b_rest, false, b_excl, false)}));
      }
    }
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }

  // "" (no fraction, value 0) when allowed, or "." and at least one digit, with the fraction in range.
  ExprId frac_part(const std::string& a, const std::optional<std::string>& b, bool a_excl, bool b_excl) {
    std::vector<ExprId> alts;
    const bool zero_ok = a.empty() && !a_excl && (!b || !b->empty() || !b_excl);
    if (zero_ok) alts.push_back(g_.add_empty());
    alts.push_back(g_.add_sequence({g_.add_bytes("."), frac_range(a, b, a_excl, b_excl, true)}));
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }

  std::string int_text(const std::string& digits) { return digits.empty() ? "0" : digits; }

  // Non-negative decimals x with lo <(=) x <(=) hi (hi absent: unbounded), optionally x > 0 strictly.
  ExprId nonneg_range(const Decimal& lo, bool lo_excl, const std::optional<Decimal>& hi, bool hi_excl) {
    if (hi) {
      int c = compare(lo, *hi);
      if (c > 0 || (c == 0 && (lo_excl || hi_excl))) return dead();
    }
    std::vector<ExprId> alts;
    if (hi && lo.int_digits == hi->int_digits) {
      alts.push_back(g_.add_sequence({g_.add_bytes(int_text(lo.int_digits)),
                                      frac_part(lo.frac_digits, hi->frac_digits, lo_excl, hi_excl)}));
      return alts[0];
    }
    alts.push_back(g_.add_sequence({g_.add_bytes(int_text(lo.int_digits)),
                                    frac_part(lo.frac_digits, std::nullopt, lo_excl, false)}));
    std::string mid_lo = nat_add1(lo.int_digits);
    std::optional<std::string> mid_hi;
    if (hi) mid_hi = hi->int_digits.empty() ? std::string() : nat_sub1(hi->int_digits);
    if (!hi || (!hi->int_digits.empty() && compare_nat(mid_lo, *mid_hi) <= 0)) {
      alts.push_back(g_.add_sequence({nat_range(mid_lo, mid_hi), frac_part("", std::nullopt, false, false)}));
    }
    if (hi) {
      alts.push_back(g_.add_sequence({g_.add_bytes(int_text(hi->int_digits)),
                                      frac_part("", hi->frac_digits, false, hi_excl)}));
    }
    return g_.add_choice(alts);
  }

  // Any decimal in the bounds, written -?int(.frac)?; "-" only before a non-zero value.
  ExprId decimal_range(const std::optional<Bound>& lower, const std::optional<Bound>& upper) {
    std::vector<ExprId> alts;
    Decimal zero;
    // x >= 0 part.
    if (!upper || !upper->value.negative) {
      Decimal lo = zero;
      bool lo_excl = false;
      if (lower && !lower->value.negative) {
        lo = lower->value;
        lo_excl = lower->exclusive;
      }
      std::optional<Decimal> hi;
      bool hi_excl = false;
      if (upper) {
        hi = upper->value;
        hi_excl = upper->exclusive;
      }
      alts.push_back(nonneg_range(lo, lo_excl, hi, hi_excl));
    }
    // x < 0 part: x = -y, y > 0, y in [-upper, -lower].
    if (!lower || lower->value.negative) {
      Decimal lo = zero;
      bool lo_excl = true;
      if (upper && upper->value.negative) {
        lo = upper->value;
        lo.negative = false;
        lo_excl = upper->exclusive;
      }
      std::optional<Decimal> hi;
      bool hi_excl = false;
      if (lower) {
        hi = lower->value;
        hi->negative = false;
        hi_excl = lower->exclusive;
      }
      alts.push_back(g_.add_sequence({g_.add_bytes("-"), nonneg_range(lo, lo_excl, hi, hi_excl)}));
    }
    if (alts.empty()) return dead();
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }

  // Decimal digit strings (no leading zero unless "0") whose value is divisible by k: a remainder automaton.
  ExprId nat_multiple_of(std::uint32_t k) {
    std::vector<RuleId> state(k);
    for (std::uint32_t r = 0; r < k; ++r) {
      state[r] = g_.declare_rule(fmt::format("multiple_of_{}_{}_{}", k, r, g_.rules().size()));
    }
    for (std::uint32_t r = 0; r < k; ++r) {
      std::vector<ExprId> alts;
      if (r == 0) alts.push_back(g_.add_empty());
      for (int d = 0; d <= 9; ++d) {
        alts.push_back(g_.add_sequence({g_.add_bytes(std::string(1, static_cast<char>('0' + d))),
                                        g_.add_rule_ref(state[(r * 10 + d) % k])}));
      }
      g_.define_rule(state[r], g_.add_choice(alts));
    }
    std::vector<ExprId> first;
    first.push_back(g_.add_bytes("0"));
    for (int d = 1; d <= 9; ++d) {
      first.push_back(g_.add_sequence({g_.add_bytes(std::string(1, static_cast<char>('0' + d))),
                                       g_.add_rule_ref(state[d % k])}));
    }
    return g_.add_choice(first);
  }

 private:
  Grammar& g_;
};

}  // namespace

ExprId Converter::emit_number(const Constraints& c, bool integer_only) {
  NumberBuilder nb(g_);
  // The integer part of an unbounded number: -?(0|[1-9][0-9]*). "-0" is kept: -0.5 needs it, and -0 is 0.
  auto any_int_part = [&] {
    return g_.add_sequence({g_.add_repeat(g_.add_bytes("-"), 0, 1), nb.nat_range("", std::nullopt)});
  };
  // Excluded numbers (from not / if with const): split the range around each of them.
  std::vector<Decimal> holes;
  for (const auto& e : c.excluded) {
    if (e.is_number()) holes.push_back(decimal_from_json(e));
  }
  if (!holes.empty()) {
    std::sort(holes.begin(), holes.end(), [](const Decimal& a, const Decimal& b) { return compare(a, b) < 0; });
    std::vector<std::pair<std::optional<Bound>, std::optional<Bound>>> pieces{{c.lower, c.upper}};
    for (const auto& x : holes) {
      auto& last = pieces.back();  // holes are sorted: only the last piece can hold x
      const bool above_lower = !last.first || compare(x, last.first->value) > 0 ||
                               (compare(x, last.first->value) == 0 && !last.first->exclusive);
      const bool below_upper = !last.second || compare(x, last.second->value) < 0 ||
                               (compare(x, last.second->value) == 0 && !last.second->exclusive);
      if (!above_lower || !below_upper) continue;
      std::optional<Bound> upper = last.second;
      last.second = Bound{x, true};
      pieces.emplace_back(Bound{x, true}, upper);
    }
    std::vector<ExprId> alts;
    for (const auto& [lo, hi] : pieces) {
      Constraints part = c;
      part.excluded.clear();
      part.lower = lo;
      part.upper = hi;
      alts.push_back(emit_number(part, integer_only));
    }
    return alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }
  const bool non_integer_only = !(c.types & kInteger);
  // Draft 6 made 1.0 an integer; under draft 4 (and its validators) it is only a number, so an integer that
  // must not be any other number is written without a fraction there.
  const bool fraction_zero_ok = (c.types & kNumber) || draft_of(Node{}) > 4;
  const std::string& mptr = c.multiple_of.empty() ? std::string() : c.multiple_of.front().second;
  // multipleOf: integers k (any bound-free number) or 10^-p (a bound on the fraction's digits).
  std::uint32_t int_multiple = 0;  // 0: no integer multipleOf (0 itself is rejected earlier)
  std::optional<std::size_t> frac_digits_max;
  for (const auto& [m, p] : c.multiple_of) {
    if (m.is_integer()) {
      if (m.int_digits.size() > 4) fail(p, "multipleOf", fmt::format("multipleOf {} is too large to enforce", to_string(m)));
      std::uint32_t k = static_cast<std::uint32_t>(std::stoul(m.int_digits));
      if (int_multiple != 0 && int_multiple != k) {
        std::uint32_t a = int_multiple, b = k;
        while (b) {
          std::uint32_t t = a % b;
          a = b;
          b = t;
        }
        std::uint64_t l = static_cast<std::uint64_t>(int_multiple) / a * k;
        if (l > 10000) fail(p, "multipleOf", "two multipleOf whose least common multiple is too large");
        k = static_cast<std::uint32_t>(l);
      }
      int_multiple = k;
    } else if (m.int_digits.empty() && m.frac_digits.back() == '1' &&
               m.frac_digits.find_first_not_of('0') == m.frac_digits.size() - 1) {
      std::size_t p10 = m.frac_digits.size();
      frac_digits_max = frac_digits_max ? std::min(*frac_digits_max, p10) : p10;
    } else {
      fail(p, "multipleOf", fmt::format("multipleOf {} cannot be enforced exactly (integers and 10^-n only)", to_string(m)));
    }
  }
  if (int_multiple == 1) {
    int_multiple = 0;
    integer_only = true;
  }
  if (int_multiple != 0 || frac_digits_max) {
    if (c.lower || c.upper) {
      fail(mptr, "multipleOf", "multipleOf together with minimum / maximum cannot be enforced exactly");
    }
    if (non_integer_only) fail(mptr, "multipleOf", "multipleOf on non-integers only cannot be enforced exactly");
    if (int_multiple != 0) {
      // -?(multiple)(.0+)?  ("-0" is left out: 0 is written "0").
      ExprId nat = nb.nat_multiple_of(int_multiple);
      ExprId signed_nat = g_.add_sequence({g_.add_repeat(g_.add_bytes("-"), 0, 1), nat});
      if (!fraction_zero_ok) return signed_nat;
      return g_.add_sequence({signed_nat, g_.add_repeat(g_.add_sequence({g_.add_bytes("."), g_.add_repeat(g_.add_bytes("0"), 1, kUnbounded)}), 0, 1)});
    }
    ExprId int_part = any_int_part();
    ExprId frac = g_.add_sequence({g_.add_bytes("."), nb.any_digits(1, static_cast<std::uint32_t>(*frac_digits_max)),
                                   g_.add_repeat(g_.add_bytes("0"), 0, kUnbounded)});
    return g_.add_sequence({int_part, g_.add_repeat(frac, 0, 1)});
  }
  if (non_integer_only) {
    if (c.lower || c.upper) {
      fail(c.values_pointer, "type", "bounds on numbers that must not be integers cannot be enforced exactly");
    }
    ExprId nz_frac = g_.add_sequence({g_.add_bytes("."), nb.any_digits(0, kUnbounded), nb.digits('1', '9'), nb.any_digits(0, kUnbounded)});
    return g_.add_sequence({any_int_part(), nz_frac});
  }
  if (integer_only) {
    std::optional<Int> lo;
    std::optional<Int> hi;
    if (c.lower) {
      lo = c.lower->exclusive ? int_add1(floor_of(c.lower->value)) : ceil_of(c.lower->value);
    }
    if (c.upper) {
      hi = c.upper->exclusive ? int_sub1(ceil_of(c.upper->value)) : floor_of(c.upper->value);
    }
    ExprId ints = nb.int_range(lo, hi);
    if (!fraction_zero_ok) return ints;
    ExprId zeros = g_.add_sequence({g_.add_bytes("."), g_.add_repeat(g_.add_bytes("0"), 1, kUnbounded)});
    return g_.add_sequence({ints, g_.add_repeat(zeros, 0, 1)});
  }
  if (!c.lower && !c.upper) {
    // The whole JSON number grammar.
    ExprId frac = g_.add_sequence({g_.add_bytes("."), nb.any_digits(1, kUnbounded)});
    ExprId exp = g_.add_sequence({g_.add_char_class({{'E', 'E'}, {'e', 'e'}}),
                                  g_.add_repeat(g_.add_char_class({{'+', '+'}, {'-', '-'}}), 0, 1),
                                  nb.any_digits(1, kUnbounded)});
    return g_.add_sequence({any_int_part(), g_.add_repeat(frac, 0, 1), g_.add_repeat(exp, 0, 1)});
  }
  return nb.decimal_range(c.lower, c.upper);
}

}  // namespace pse::json_schema_detail

// The grammar IR: builders with class normalization, rule bookkeeping, validation, a debug
// rendering and a stable content hash.
#include "pse/grammar.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace pse {
namespace {

constexpr std::uint32_t kSurrogateLo = 0xD800;
constexpr std::uint32_t kSurrogateHi = 0xDFFF;

std::string u_plus(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

// Sorts and merges overlapping or adjacent ranges and drops surrogates, which no valid UTF-8
// encodes.
std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges) {
  std::vector<CharRange> split;
  split.reserve(ranges.size() + 1);
  for (const CharRange& r : ranges) {
    if (r.lo > r.hi) {
      throw GrammarError("[grammar] add_char_class: range " + u_plus(r.lo) + ".." + u_plus(r.hi) +
                         " has lo > hi");
    }
    if (r.hi > kMaxCodePoint) {
      throw GrammarError("[grammar] add_char_class: code point " + u_plus(r.hi) +
                         " is past U+10FFFF");
    }
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      split.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo) split.push_back({r.lo, kSurrogateLo - 1});
    if (r.hi > kSurrogateHi) split.push_back({kSurrogateHi + 1, r.hi});
  }
  std::sort(split.begin(), split.end(), [](const CharRange& a, const CharRange& b) {
    return a.lo < b.lo || (a.lo == b.lo && a.hi < b.hi);
  });
  std::vector<CharRange> merged;
  for (const CharRange& r : split) {
    // Adjacent across the surrogate gap counts as adjacent: nothing in the gap can ever match.
    if (!merged.empty() &&
        (static_cast<std::uint64_t>(r.lo) <= static_cast<std::uint64_t>(merged.back().hi) + 1 ||
         (merged.back().hi == kSurrogateLo - 1 && r.lo == kSurrogateHi + 1))) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::string hex_code_point(std::uint32_t cp) {
  char buf[16];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
  }
  return buf;
}

void append_class_char(std::string& out, std::uint32_t cp) {
  if (cp >= 0x20 && cp < 0x7F && cp != '\\' && cp != ']' && cp != '-' && cp != '^' && cp != '[') {
    out.push_back(static_cast<char>(cp));
  } else {
    out += hex_code_point(cp);
  }
}

void append_literal(std::string& out, const std::string& bytes) {
  out.push_back('"');
  for (unsigned char c : bytes) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += hex_code_point(c);
        } else {
          out.push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  out.push_back('"');
}

// FNV-1a over a canonical little-endian serialization, then a final avalanche (splitmix64's).
class Hasher {
 public:
  void byte(std::uint8_t b) {
    h_ ^= b;
    h_ *= 0x100000001B3ull;
  }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) byte(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    for (unsigned char c : s) byte(c);
  }
  std::uint64_t finish() const {
    std::uint64_t z = h_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t h_ = 0xCBF29CE484222325ull;
};

}  // namespace

ExprId Grammar::push(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::add_empty() { return push(Expr{}); }

ExprId Grammar::add_bytes(std::string bytes) {
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = std::move(bytes);
  return push(std::move(e));
}

ExprId Grammar::add_char_class(std::vector<CharRange> ranges, bool negated) {
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = normalize_ranges(std::move(ranges));
  e.negated = negated;
  return push(std::move(e));
}

ExprId Grammar::add_sequence(std::vector<ExprId> children) {
  for (ExprId c : children) {
    if (c >= exprs_.size()) {
      throw GrammarError("[grammar] add_sequence: child expression " + std::to_string(c) +
                         " does not exist (" + std::to_string(exprs_.size()) + " expressions)");
    }
  }
  Expr e;
  e.kind = ExprKind::kSequence;
  e.children = std::move(children);
  return push(std::move(e));
}

ExprId Grammar::add_choice(std::vector<ExprId> children) {
  for (ExprId c : children) {
    if (c >= exprs_.size()) {
      throw GrammarError("[grammar] add_choice: child expression " + std::to_string(c) +
                         " does not exist (" + std::to_string(exprs_.size()) + " expressions)");
    }
  }
  Expr e;
  e.kind = ExprKind::kChoice;
  e.children = std::move(children);
  return push(std::move(e));
}

ExprId Grammar::add_repeat(ExprId child, std::uint32_t min, std::uint32_t max) {
  if (child >= exprs_.size()) {
    throw GrammarError("[grammar] add_repeat: child expression " + std::to_string(child) +
                       " does not exist (" + std::to_string(exprs_.size()) + " expressions)");
  }
  if (min > max) {
    throw GrammarError("[grammar] add_repeat: min " + std::to_string(min) +
                       " is greater than max " + std::to_string(max));
  }
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return push(std::move(e));
}

ExprId Grammar::add_rule_ref(RuleId rule) {
  if (rule >= rules_.size()) {
    throw GrammarError("[grammar] add_rule_ref: rule " + std::to_string(rule) +
                       " does not exist (" + std::to_string(rules_.size()) + " rules)");
  }
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return push(std::move(e));
}

ExprId Grammar::add_graph(std::uint32_t n_states, std::vector<GraphEdge> edges, std::vector<std::uint32_t> accepting,
                          std::vector<ExprId> labels, bool distinct_states) {
  if (n_states == 0) throw GrammarError("[grammar] add_graph: a graph needs at least one state");
  for (ExprId c : labels) {
    if (c >= exprs_.size()) {
      throw GrammarError("[grammar] add_graph: label expression " + std::to_string(c) + " does not exist (" +
                         std::to_string(exprs_.size()) + " expressions)");
    }
  }
  for (const GraphEdge& edge : edges) {
    if (edge.from >= n_states || edge.to >= n_states || edge.label >= labels.size()) {
      throw GrammarError("[grammar] add_graph: edge " + std::to_string(edge.from) + " -> " + std::to_string(edge.to) +
                         " (label " + std::to_string(edge.label) + ") is outside the graph's " +
                         std::to_string(n_states) + " states and " + std::to_string(labels.size()) + " labels");
    }
  }
  std::sort(accepting.begin(), accepting.end());
  accepting.erase(std::unique(accepting.begin(), accepting.end()), accepting.end());
  if (!accepting.empty() && accepting.back() >= n_states) {
    throw GrammarError("[grammar] add_graph: accepting state " + std::to_string(accepting.back()) +
                       " is outside the graph's " + std::to_string(n_states) + " states");
  }
  Expr e;
  e.kind = ExprKind::kGraph;
  e.children = std::move(labels);
  e.graph_states = n_states;
  e.edges = std::move(edges);
  e.accepting = std::move(accepting);
  e.distinct_states = distinct_states;
  return push(std::move(e));
}

ExprId Grammar::add_token(std::vector<TokenIdRange> ids, bool negated) {
  for (const TokenIdRange& r : ids) {
    if (r.lo > r.hi || r.hi > kMaxTokenId) {
      throw GrammarError("[grammar] add_token: token id range " + std::to_string(r.lo) + ".." + std::to_string(r.hi) +
                         (r.lo > r.hi ? " has lo > hi" : " is past the largest token id"));
    }
  }
  if (ids.empty() && !negated) throw GrammarError("[grammar] add_token: a token set needs at least one id");
  std::sort(ids.begin(), ids.end(),
            [](const TokenIdRange& a, const TokenIdRange& b) { return a.lo < b.lo || (a.lo == b.lo && a.hi < b.hi); });
  std::vector<TokenIdRange> merged;
  for (const TokenIdRange& r : ids) {
    if (!merged.empty() && std::uint64_t{r.lo} <= std::uint64_t{merged.back().hi} + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  Expr e;
  e.kind = ExprKind::kToken;
  e.token_ids = std::move(merged);
  e.negated = negated;
  return push(std::move(e));
}

ExprId Grammar::add_token_named(std::string name, bool negated) {
  if (name.empty()) throw GrammarError("[grammar] add_token_named: a token name must not be empty");
  Expr e;
  e.kind = ExprKind::kToken;
  e.token_name = std::move(name);
  e.negated = negated;
  return push(std::move(e));
}

ExprId Grammar::embed(const Grammar& source, std::string_view prefix) {
  source.validate();
  std::vector<RuleId> rule_map(source.rules().size());
  for (std::size_t r = 0; r < source.rules().size(); ++r) {
    const std::string name = std::string(prefix) + source.rules()[r].name;
    const RuleId existing = find_rule(name);
    if (existing != kNoRule && rules_[existing].defined) {
      throw GrammarError("[grammar] embed: rule '" + name + "' is already defined (choose another prefix)");
    }
    rule_map[r] = declare_rule(name);
  }
  // Expressions refer only to earlier ones (the builders enforce it), so one pass in order maps them all;
  // the copies keep every field (add_* would normalize what is normalized already).
  const std::size_t offset = exprs_.size();
  exprs_.reserve(offset + source.exprs().size());
  for (const Expr& x : source.exprs()) {
    Expr copy = x;
    for (ExprId& c : copy.children) c = static_cast<ExprId>(c + offset);
    if (copy.kind == ExprKind::kRuleRef) copy.rule = rule_map.at(x.rule);
    exprs_.push_back(std::move(copy));
  }
  for (std::size_t r = 0; r < source.rules().size(); ++r) {
    const Rule& rule = source.rules()[r];
    if (rule.defined) define_rule(rule_map[r], static_cast<ExprId>(rule.body + offset));
  }
  return add_rule_ref(rule_map.at(source.root()));
}

RuleId Grammar::declare_rule(std::string_view name) {
  if (name.empty()) throw GrammarError("[grammar] declare_rule: a rule name must not be empty");
  RuleId existing = find_rule(name);
  if (existing != kNoRule) return existing;
  if (rules_.size() >= kNoRule) throw GrammarError("[grammar] declare_rule: too many rules");
  rules_.push_back(Rule{std::string(name), 0, false});
  RuleId id = static_cast<RuleId>(rules_.size() - 1);
  rule_index_.emplace(rules_.back().name, id);
  return id;
}

void Grammar::define_rule(RuleId rule, ExprId body) {
  if (rule >= rules_.size()) {
    throw GrammarError("[grammar] define_rule: rule " + std::to_string(rule) + " does not exist (" +
                       std::to_string(rules_.size()) + " rules)");
  }
  if (body >= exprs_.size()) {
    throw GrammarError("[grammar] define_rule: rule '" + rules_[rule].name + "': body expression " +
                       std::to_string(body) + " does not exist");
  }
  if (rules_[rule].defined) {
    throw GrammarError("[grammar] define_rule: rule '" + rules_[rule].name + "' is defined twice");
  }
  rules_[rule].body = body;
  rules_[rule].defined = true;
}

RuleId Grammar::find_rule(std::string_view name) const {
  auto it = rule_index_.find(name);
  return it == rule_index_.end() ? kNoRule : it->second;
}

void Grammar::set_root(RuleId rule) {
  if (rule >= rules_.size()) {
    throw GrammarError("[grammar] set_root: rule " + std::to_string(rule) + " does not exist (" +
                       std::to_string(rules_.size()) + " rules)");
  }
  root_ = rule;
}

void Grammar::validate() const {
  if (root_ == kNoRule) throw GrammarError("[grammar] validate: no root rule is set");
  if (root_ >= rules_.size()) {
    throw GrammarError("[grammar] validate: root rule " + std::to_string(root_) +
                       " does not exist");
  }
  // Walk from the root: the first undefined rule met, in rule order of discovery, is reported with
  // the rule that refers to it.
  std::vector<bool> rule_seen(rules_.size(), false);
  std::vector<bool> expr_seen(exprs_.size(), false);
  std::vector<RuleId> rule_queue{root_};
  rule_seen[root_] = true;
  if (!rules_[root_].defined) {
    throw GrammarError("[grammar] validate: the root rule '" + rules_[root_].name +
                       "' is not defined");
  }
  for (std::size_t qi = 0; qi < rule_queue.size(); ++qi) {
    const Rule& owner = rules_[rule_queue[qi]];
    std::vector<ExprId> stack{owner.body};
    while (!stack.empty()) {
      ExprId id = stack.back();
      stack.pop_back();
      if (id >= exprs_.size()) {
        throw GrammarError("[grammar] validate: rule '" + owner.name + "' uses expression " +
                           std::to_string(id) + ", which does not exist");
      }
      if (expr_seen[id]) continue;
      expr_seen[id] = true;
      const Expr& e = exprs_[id];
      if (e.kind == ExprKind::kRepeat && e.children.size() != 1) {
        throw GrammarError("[grammar] validate: repeat expression " + std::to_string(id) + " has " +
                           std::to_string(e.children.size()) + " children, expected 1");
      }
      if (e.kind == ExprKind::kRuleRef) {
        if (e.rule >= rules_.size()) {
          throw GrammarError("[grammar] validate: rule '" + owner.name + "' refers to rule " +
                             std::to_string(e.rule) + ", which does not exist");
        }
        if (!rules_[e.rule].defined) {
          throw GrammarError("[grammar] validate: rule '" + rules_[e.rule].name +
                             "' is referenced by rule '" + owner.name + "' but never defined");
        }
        if (!rule_seen[e.rule]) {
          rule_seen[e.rule] = true;
          rule_queue.push_back(e.rule);
        }
      }
      for (ExprId c : e.children) stack.push_back(c);
    }
  }
}

namespace {

void render(const Grammar& g, ExprId id, std::string& out, bool nested) {
  if (id >= g.exprs().size()) {
    out += "<bad expr ";
    out += std::to_string(id);
    out.push_back('>');
    return;
  }
  const Expr& e = g.expr(id);
  switch (e.kind) {
    case ExprKind::kEmpty:
      out += "\"\"";
      break;
    case ExprKind::kBytes:
      append_literal(out, e.bytes);
      break;
    case ExprKind::kCharClass:
      out += e.negated ? "[^" : "[";
      for (const CharRange& r : e.ranges) {
        append_class_char(out, r.lo);
        if (r.hi != r.lo) {
          out.push_back('-');
          append_class_char(out, r.hi);
        }
      }
      out.push_back(']');
      break;
    case ExprKind::kSequence:
    case ExprKind::kChoice: {
      bool choice = e.kind == ExprKind::kChoice;
      if (e.children.empty()) {
        out += choice ? "[]" : "\"\"";  // a choice of nothing matches nothing
        break;
      }
      bool paren = nested && e.children.size() > 1;
      if (paren) out.push_back('(');
      for (std::size_t i = 0; i < e.children.size(); ++i) {
        if (i > 0) out += choice ? " | " : " ";
        render(g, e.children[i], out, true);
      }
      if (paren) out.push_back(')');
      break;
    }
    case ExprKind::kRepeat: {
      ExprId child = e.children.empty() ? 0 : e.children[0];
      bool atom = child < g.exprs().size() && g.expr(child).kind != ExprKind::kSequence &&
                  g.expr(child).kind != ExprKind::kChoice;
      if (!atom) out.push_back('(');
      render(g, child, out, false);
      if (!atom) out.push_back(')');
      if (e.min == 0 && e.max == kUnbounded) {
        out.push_back('*');
      } else if (e.min == 1 && e.max == kUnbounded) {
        out.push_back('+');
      } else if (e.min == 0 && e.max == 1) {
        out.push_back('?');
      } else {
        // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on "{" + std::string.
        out.push_back('{');
        out += std::to_string(e.min);
        if (e.max != e.min) out.push_back(',');
        if (e.max != e.min && e.max != kUnbounded) out += std::to_string(e.max);
        out.push_back('}');
      }
      break;
    }
    case ExprKind::kGraph: {
      // graph(start 0; accepting a b; from->to: label, ...)
      out += "graph(accepting";
      for (std::uint32_t a : e.accepting) {
        out.push_back(' ');
        out += std::to_string(a);
      }
      for (const GraphEdge& edge : e.edges) {
        out += "; ";
        out += std::to_string(edge.from);
        out += "->";
        out += std::to_string(edge.to);
        out += ": ";
        if (edge.label < e.children.size()) render(g, e.children[edge.label], out, true);
      }
      out.push_back(')');
      break;
    }
    case ExprKind::kToken:
      if (e.negated && e.token_name.empty() && e.token_ids.empty()) {  // every token
        out += "<[*]>";
        break;
      }
      if (e.negated) out.push_back('!');
      if (!e.token_name.empty()) {
        out += e.token_name;  // (brackets included: `<think>`)
      } else {
        out += "<[";
        for (std::size_t i = 0; i < e.token_ids.size(); ++i) {
          if (i > 0) out.push_back(',');
          out += std::to_string(e.token_ids[i].lo);
          if (e.token_ids[i].hi != e.token_ids[i].lo) {
            out.push_back('-');
            out += std::to_string(e.token_ids[i].hi);
          }
        }
        out += "]>";
      }
      break;
    case ExprKind::kRuleRef:
      if (e.rule < g.rules().size()) {
        out += g.rule(e.rule).name;
      } else {
        out += "<bad rule ";
        out += std::to_string(e.rule);
        out.push_back('>');
      }
      break;
  }
}

}  // namespace

std::string Grammar::to_string(ExprId id) const {
  std::string out;
  render(*this, id, out, false);
  return out;
}

std::string Grammar::to_string() const {
  std::string out;
  auto emit = [&](RuleId r) {
    const Rule& rule = rules_[r];
    out += rule.name;
    out += " ::= ";
    if (rule.defined) {
      render(*this, rule.body, out, false);
    } else {
      out += "<undefined>";
    }
    out.push_back('\n');
  };
  if (root_ < rules_.size()) emit(root_);
  for (RuleId r = 0; r < rules_.size(); ++r) {
    if (r != root_) emit(r);
  }
  return out;
}

std::uint64_t Grammar::hash() const {
  Hasher h;
  h.u32(0x50534547u);  // format tag; bump when the serialization changes
  h.u32(root_);
  h.u32(static_cast<std::uint32_t>(rules_.size()));
  for (const Rule& r : rules_) {
    h.str(r.name);
    h.u32(r.body);
    h.byte(r.defined ? 1 : 0);
  }
  h.u32(static_cast<std::uint32_t>(exprs_.size()));
  for (const Expr& e : exprs_) {
    h.byte(static_cast<std::uint8_t>(e.kind));
    switch (e.kind) {
      case ExprKind::kEmpty:
        break;
      case ExprKind::kBytes:
        h.str(e.bytes);
        break;
      case ExprKind::kCharClass:
        h.byte(e.negated ? 1 : 0);
        h.u32(static_cast<std::uint32_t>(e.ranges.size()));
        for (const CharRange& r : e.ranges) {
          h.u32(r.lo);
          h.u32(r.hi);
        }
        break;
      case ExprKind::kSequence:
      case ExprKind::kChoice:
      case ExprKind::kRepeat:
        h.u32(static_cast<std::uint32_t>(e.children.size()));
        for (ExprId c : e.children) h.u32(c);
        if (e.kind == ExprKind::kRepeat) {
          h.u32(e.min);
          h.u32(e.max);
        }
        break;
      case ExprKind::kRuleRef:
        h.u32(e.rule);
        break;
      case ExprKind::kGraph:
        h.u32(e.graph_states);
        h.u32(static_cast<std::uint32_t>(e.children.size()));
        for (ExprId c : e.children) h.u32(c);
        h.u32(static_cast<std::uint32_t>(e.edges.size()));
        for (const GraphEdge& edge : e.edges) {
          h.u32(edge.from);
          h.u32(edge.to);
          h.u32(edge.label);
        }
        h.u32(static_cast<std::uint32_t>(e.accepting.size()));
        for (std::uint32_t a : e.accepting) h.u32(a);
        h.byte(e.distinct_states ? 1 : 0);
        break;
      case ExprKind::kToken:
        h.byte(e.negated ? 1 : 0);
        h.str(e.token_name);
        h.u32(static_cast<std::uint32_t>(e.token_ids.size()));
        for (const TokenIdRange& r : e.token_ids) {
          h.u32(r.lo);
          h.u32(r.hi);
        }
        break;
    }
  }
  return h.finish();
}

}  // namespace pse

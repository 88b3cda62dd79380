#include "stack_dfa.h"

#include <algorithm>
#include <unordered_set>

#include "pse/vocabulary.h"
#include "u32_hash.h"

namespace pse::detail {


std::int32_t StackDfa::start(std::span<const std::uint32_t> states) {
  std::vector<Stack> seeds;
  seeds.reserve(states.size());
  for (std::uint32_t s : states) seeds.push_back(Stack{s});
  return close_and_intern(seeds);
}

std::size_t StackDfa::memory_bytes() const {
  std::size_t n = trans_.capacity() * 4 + outer_final_.capacity();
  for (const auto& c : configs_) n += c.capacity() * 8 + sizeof(c);  // the index holds a copy
  return n + group_bytes_;
}

ByteSet StackDfa::first_bytes(std::int32_t config) const {
  ByteSet out{};
  const std::vector<std::uint32_t>& flat = configs_[static_cast<std::size_t>(config)];
  for (std::size_t i = 0; i < flat.size(); i += flat[i] + 1) {
    const std::uint32_t s = flat[i + flat[i]];
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      for (unsigned b = a_.byte_edges[e].lo; b <= a_.byte_edges[e].hi; ++b)
        out[b >> 6] |= 1ULL << (b & 63);
    }
  }
  return out;
}

std::int32_t StackDfa::compute_step(std::int32_t config, std::uint8_t byte) {
  std::vector<Stack> seeds;
  const std::vector<std::uint32_t>& flat = configs_[static_cast<std::size_t>(config)];
  for (std::size_t i = 0; i < flat.size(); i += flat[i] + 1) {
    const std::uint32_t height = flat[i];
    const std::uint32_t s = flat[i + height];
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      const ByteEdge& be = a_.byte_edges[e];
      if (byte < be.lo || byte > be.hi) continue;
      Stack next(flat.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                 flat.begin() + static_cast<std::ptrdiff_t>(i + height) + 1);
      next.back() = be.target;
      seeds.push_back(std::move(next));
    }
  }
  if (seeds.empty()) return kDead;
  return close_and_intern(seeds);
}

std::int32_t StackDfa::close_and_intern(std::vector<Stack>& seeds) {
  // Closure: epsilon moves, calls (push the return state, enter the callee) and completions of a
  // called rule (pop: continue at the return state). A completed stack of height one is an outer
  // completion. Between two bytes a stack can grow by at most one frame per rule unless some rule
  // calls itself without reading a byte (left recursion): that closure would never end, so it
  // overflows at once.
  std::size_t base = kMaxDepth;
  for (const Stack& st : seeds) base = std::min(base, st.size());
  const std::size_t max_height = std::min(kMaxDepth, base + a_.rule_start.size() + 1);
  std::unordered_set<Stack, U32VectorHash> seen;
  std::vector<Stack> work;
  auto add = [&](Stack&& st) {
    if (st.size() > max_height) throw Overflow{};
    if (seen.insert(st).second) {
      if (seen.size() > kMaxElements * 8) throw Overflow{};
      work.push_back(std::move(st));
    }
  };
  // Seeds written with class representatives: equivalent states close to configurations with the same
  // stacks (a closure's own states are then the representative's, so first_bytes and steps stay exact).
  for (Stack& st : seeds) {
    if (canonical_ != nullptr)
      for (std::uint32_t& x : st) x = (*canonical_)[x];
    add(std::move(st));
  }
  std::vector<Stack> kept;
  bool outer = false;
  while (!work.empty()) {
    Stack st = std::move(work.back());
    work.pop_back();
    const std::uint32_t s = st.back();
    for (std::uint32_t e = a_.eps_begin[s]; e < a_.eps_begin[s + 1]; ++e) {
      Stack next = st;
      next.back() = a_.eps_edges[e];
      add(std::move(next));
    }
    for (std::uint32_t e = a_.call_begin[s]; e < a_.call_begin[s + 1]; ++e) {
      const CallEdge& c = a_.call_edges[e];
      Stack next = st;
      next.back() = c.target;
      next.push_back(a_.rule_start[c.rule]);
      add(std::move(next));
    }
    if (a_.is_final(s)) {
      if (st.size() == 1) {
        outer = true;
      } else {
        Stack next(st.begin(), st.end() - 1);
        add(std::move(next));
      }
    }
    if (a_.has_bytes(s)) {
      if (kept.size() >= kMaxElements) throw Overflow{};
      kept.push_back(std::move(st));
    }
  }
  std::sort(kept.begin(), kept.end());
  std::vector<std::uint32_t> key;
  key.push_back(outer ? 1 : 0);
  for (const Stack& st : kept) {
    key.push_back(static_cast<std::uint32_t>(st.size()));
    key.insert(key.end(), st.begin(), st.end());
  }
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  if (configs_.size() >= max_configs_) throw Overflow{};
  const std::int32_t id = static_cast<std::int32_t>(configs_.size());
  configs_.emplace_back(key.begin() + 1, key.end());
  outer_final_.push_back(outer ? 1 : 0);
  trans_.resize(trans_.size() + 256, kUnknown);
  index_.emplace(std::move(key), id);
  return id;
}

bool StackDfa::loops_on_plain(std::int32_t config) {
  const auto c = static_cast<std::size_t>(config);
  if (plain_loop_.size() <= c) plain_loop_.resize(n_configs(), -1);
  if (plain_loop_[c] < 0) {
    bool loops = true;
    for (unsigned b = 0; b < 256 && loops; ++b)
      if (Vocabulary::is_plain_byte(b)) loops = step(config, static_cast<std::uint8_t>(b)) == config;
    plain_loop_.resize(std::max(plain_loop_.size(), n_configs()), -1);  // step may add configurations
    plain_loop_[c] = loops ? 1 : 0;
  }
  return plain_loop_[c] == 1;
}

void StackDfa::clear() {
  configs_.clear();
  outer_final_.clear();
  trans_.clear();
  index_.clear();
  plain_loop_.clear();
  groups_.clear();
  group_bytes_ = 0;
}

}  // namespace pse::detail

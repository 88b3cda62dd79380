// The nesting depth of a JSON value, measured without recursion. Every walk of a user-given JSON value
// that recurses (copies, dump(), equality, the converters' emitters) is safe only below a bound, so the
// public entry points that take JSON check this first, before any recursive step.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace pse::detail {

// Whether `value` nests arrays and objects more than `limit` levels deep ([] is one level, [[]] two).
// Iterative: a stack of the containers being walked, at most `limit` deep.
template <typename Json>
bool json_nesting_exceeds(const Json& value, std::size_t limit) {
  if (!value.is_structured()) return false;
  using Iterator = typename Json::const_iterator;
  std::vector<std::pair<Iterator, Iterator>> stack;  // [next child, end) of each open container
  stack.emplace_back(value.cbegin(), value.cend());
  if (stack.size() > limit) return true;
  while (!stack.empty()) {
    auto& [next, end] = stack.back();
    if (next == end) {
      stack.pop_back();
      continue;
    }
    const Json& child = *next;
    ++next;
    if (child.is_structured() && !child.empty()) {
      if (stack.size() + 1 > limit) return true;
      stack.emplace_back(child.cbegin(), child.cend());
    } else if (child.is_structured() && stack.size() + 1 > limit) {
      return true;  // an empty container still counts as a level
    }
  }
  return false;
}

}  // namespace pse::detail

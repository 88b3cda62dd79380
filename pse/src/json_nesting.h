// The nesting depth of a JSON value, measured without recursion. Every walk of a user-given JSON value
// that recurses (copies, dump(), equality, the converters' emitters) is safe only below a bound, so the
// public entry points that take JSON check this first, before any recursive step.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pse/error.h"

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

// Parses `text`, throwing LimitError ("<what>nests arrays and objects more than <limit> levels deep")
// as soon as a container opens past `limit` levels. A bound checked after parsing comes too late: the
// DOM parser itself copies values recursively while it builds them (ordered_json's members live in a
// vector), so a text 20,000 levels deep overflows the stack inside parse(). Parse errors propagate as
// nlohmann's parse_error for the caller to place.
template <typename Json>
Json parse_json_bounded(std::string_view text, std::size_t limit, std::string_view what) {
  auto bound = [&](int depth, typename Json::parse_event_t event, Json&) {
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (opens && static_cast<std::size_t>(depth) + 1 > limit) {
      throw LimitError(fmt::format("{}nests arrays and objects more than {} levels deep", what, limit));
    }
    return true;
  };
  return Json::parse(text, bound);
}

}  // namespace pse::detail

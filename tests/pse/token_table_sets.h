// A token table as sets, for tests that compare tables built different ways: a table derived from
// another, or built on another thread, may keep a bitset where a build from scratch gives a list.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "token_table.h"

namespace pse::testing {

struct TableSets {
  std::set<TokenId> accepted;
  std::map<std::uint32_t, std::vector<std::uint32_t>> uncertain;  // sorted position -> end depths
  bool operator==(const TableSets&) const = default;
};

inline TableSets sets_of(const detail::TokenTable& t) {
  TableSets out;
  for (std::size_t w = 0; w < t.accepted_bits.size(); ++w)
    for (unsigned b = 0; b < 32; ++b)
      if ((t.accepted_bits[w] >> b) & 1) out.accepted.insert(static_cast<TokenId>(w * 32 + b));
  out.accepted.insert(t.accepted_list.begin(), t.accepted_list.end());
  EXPECT_TRUE(std::is_sorted(t.uncertain.begin(), t.uncertain.end())) << "uncertain tokens out of order";
  for (std::size_t k = 0; k < t.uncertain.size(); ++k) {
    out.uncertain[t.uncertain[k]].assign(t.end_depths.begin() + t.end_begin[k],
                                         t.end_depths.begin() + t.end_begin[k + 1]);
  }
  return out;
}

}  // namespace pse::testing

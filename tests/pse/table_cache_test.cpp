// TableCache (pse/src/table_cache.h): the process-wide store of token tables shared between grammars.
// Bounded in memory (tables and the closures that identify their rules): past the bound the least
// recently used rules go first, in constant time each (a linear scan per eviction once took 12% of a
// MaskBench run), and tables added to an evicted rule's entry (a grammar still holds it) are no longer
// counted.
#include "table_cache.h"

#include <gtest/gtest.h>

#include <memory>

namespace {

using namespace pse::detail;

std::shared_ptr<const RuleClosure> closure(std::uint32_t tag) { return std::make_shared<const RuleClosure>(RuleClosure{tag, 1, 2}); }

TokenTable table_of(std::size_t words) {
  TokenTable t;
  t.accepted_bits.assign(words, 0xFFFFFFFFu);
  return t;
}

TEST(TableCache, EvictsTheLeastRecentlyUsedRulesPastItsBound) {
  // An entry with one table: its closure and the table.
  const std::size_t one = TableCache::entry_bytes(*closure(0)) + table_of(1000).memory_bytes() + sizeof(TokenTable);
  TableCache cache(3 * one);  // room for three such entries
  auto a = cache.rule(7, closure(1));
  auto b = cache.rule(7, closure(2));
  auto c = cache.rule(7, closure(3));
  cache.add(*a, 0, table_of(1000));
  cache.add(*b, 0, table_of(1000));
  cache.add(*c, 0, table_of(1000));
  EXPECT_EQ(cache.bytes(), 3 * one);
  EXPECT_EQ(cache.rule(7, closure(1)), a);  // a used again: b is now the least recent
  auto d = cache.rule(7, closure(4));
  cache.add(*d, 0, table_of(1000));         // over the bound: b goes
  EXPECT_EQ(cache.bytes(), 3 * one);
  EXPECT_TRUE(b->evicted);
  EXPECT_FALSE(a->evicted || c->evicted || d->evicted);
  auto b2 = cache.rule(7, closure(2));
  EXPECT_NE(b2, b);                          // a fresh, empty entry
  EXPECT_TRUE(b2->by_offset.empty());
  // Its closure counts: over the bound again, the least recent (c) goes.
  const std::size_t entry = TableCache::entry_bytes(*closure(0));
  EXPECT_TRUE(c->evicted);
  EXPECT_EQ(cache.bytes(), 2 * one + entry);
  // The evicted entry still works for the grammar holding it, outside the cache's count.
  EXPECT_NE(cache.add(*b, 1, table_of(1000)), nullptr);
  EXPECT_EQ(cache.bytes(), 2 * one + entry);
  // The same closure under another vocabulary is another entry; equal closures share one.
  EXPECT_NE(cache.rule(8, closure(1)), cache.rule(7, closure(1)));
  EXPECT_EQ(cache.rule(7, closure(4)), d);
  cache.clear();
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_TRUE(a->evicted && d->evicted && b2->evicted);
}

// A new bound applies at once: the least recently used rules past it go.
TEST(TableCache, ANewBoundEvictsAtOnce) {
  const std::size_t one = TableCache::entry_bytes(*closure(0)) + table_of(1000).memory_bytes() + sizeof(TokenTable);
  TableCache cache(3 * one);
  auto a = cache.rule(7, closure(1));
  auto b = cache.rule(7, closure(2));
  cache.add(*a, 0, table_of(1000));
  cache.add(*b, 0, table_of(1000));
  EXPECT_EQ(cache.bytes(), 2 * one);
  cache.set_max_bytes(one);
  EXPECT_EQ(cache.bytes(), one);
  EXPECT_TRUE(a->evicted);
  EXPECT_FALSE(b->evicted);
  cache.set_max_bytes(0);
  EXPECT_EQ(cache.bytes(), 0u);
}

// Closures count too: entries without tables (a rule met, its tables not yet built) are bounded.
TEST(TableCache, ClosuresCountTowardTheBound) {
  const std::size_t entry = TableCache::entry_bytes(*closure(0));
  EXPECT_GT(entry, 3 * sizeof(std::uint32_t));
  TableCache cache(2 * entry);
  auto a = cache.rule(7, closure(1));
  auto b = cache.rule(7, closure(2));
  EXPECT_EQ(cache.bytes(), 2 * entry);
  auto c = cache.rule(7, closure(3));  // a third entry: the oldest goes
  EXPECT_EQ(cache.bytes(), 2 * entry);
  EXPECT_TRUE(a->evicted);
  EXPECT_FALSE(b->evicted || c->evicted);
}

TEST(TableCache, AnEntryKeepsTheFirstTableAddedAtAnOffset) {
  TableCache cache;
  auto r = cache.rule(1, closure(9));
  auto first = cache.add(*r, 5, table_of(2));
  auto second = cache.add(*r, 5, table_of(3));
  EXPECT_EQ(first, second);
  EXPECT_EQ(first->accepted_bits.size(), 2u);
}

}  // namespace

// FlatIndex (pse/src/flat_index.h): entries found by hash and the caller's equality, through growth, with
// colliding hashes, and after clear().
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "flat_index.h"

namespace pse::detail {
namespace {

TEST(FlatIndex, FindsEveryEntryThroughGrowthAndCollisions) {
  FlatIndex index;
  std::vector<std::uint64_t> keys;  // the caller's keys: entry e holds keys[e]
  // Hashes collide in sevens (whole probe chains share a slot), and the table grows past its first
  // 1,024 slots several times.
  auto hash = [](std::uint64_t key) { return key % 7 * 0x9e3779b97f4a7c15ULL; };
  for (std::uint64_t key = 0; key < 5000; ++key) {
    const std::uint64_t h = hash(key * 3);
    ASSERT_EQ(index.find(h, [&](std::int32_t e) { return keys[static_cast<std::size_t>(e)] == key * 3; }), -1);
    ASSERT_EQ(index.add(h), static_cast<std::int32_t>(keys.size()));
    keys.push_back(key * 3);
  }
  EXPECT_EQ(index.size(), 5000u);
  for (std::size_t e = 0; e < keys.size(); e += 7) {
    EXPECT_EQ(index.find(hash(keys[e]), [&](std::int32_t f) { return keys[static_cast<std::size_t>(f)] == keys[e]; }),
              static_cast<std::int32_t>(e));
  }
  // A key never added is not found, even where its hash is.
  EXPECT_EQ(index.find(hash(1), [&](std::int32_t e) { return keys[static_cast<std::size_t>(e)] == 1; }), -1);
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(hash(0), [](std::int32_t) { return true; }), -1);
  EXPECT_EQ(index.add(hash(0)), 0);
}

}  // namespace
}  // namespace pse::detail

// The paged KV cache: page accounting, reserve, the prefix cache (hits, partial hits, collisions), LRU
// eviction, fork (shared full pages, copied partial page), reference counts and every error path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include <unistd.h>

#include "kv/prefix_hash.h"
#include "pie/error.h"
#include "pie/kv_cache.h"
#include "pie/kv_storage.h"

namespace {

using pie::KvCache;
using pie::KvCacheConfig;
using pie::SeqId;

KvCacheConfig small_config(std::int32_t n_pages, bool prefix = true) {
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_kv_head = 2;
  c.head_dim = 4;
  c.dtype = tensor::DType::f32;
  c.n_pages = n_pages;
  c.prefix_caching = prefix;
  return c;
}

std::vector<std::int32_t> iota_tokens(std::int32_t n, std::int32_t start = 0) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

void expect_accounting(const KvCache& kv) {
  const pie::KvCacheStats s = kv.stats();
  EXPECT_EQ(s.n_used + s.n_cached + s.n_free, s.n_pages);
  EXPECT_EQ(kv.n_available(), s.n_cached + s.n_free);
}

// A sequence that computed `tokens`: reserve, commit, return its id.
SeqId run_prompt(KvCache& kv, const std::vector<std::int32_t>& tokens) {
  const SeqId s = kv.create();
  const std::int32_t hit = kv.attach_prefix(s, tokens);
  EXPECT_TRUE(kv.reserve(s, static_cast<std::int32_t>(tokens.size())));
  EXPECT_GE(hit, 0);
  kv.commit(s, tokens, static_cast<std::int32_t>(tokens.size()));
  return s;
}

TEST(KvCacheConfigTest, PageBytes) {
  KvCacheConfig c = small_config(4);
  EXPECT_EQ(c.page_bytes(), std::size_t{2 * 2 * 16 * 2 * 4 * 4});
  c.dtype = tensor::DType::f16;
  EXPECT_EQ(c.page_bytes(), std::size_t{2 * 2 * 16 * 2 * 4 * 2});
}

TEST(KvCacheTest, BadConfigThrows) {
  for (int field = 0; field < 4; ++field) {
    KvCacheConfig c = small_config(4);
    std::int32_t* f[] = {&c.n_layer, &c.n_kv_head, &c.head_dim, &c.n_pages};
    *f[field] = 0;
    EXPECT_THROW(KvCache{c}, pie::Error) << field;
    *f[field] = -3;
    EXPECT_THROW(KvCache{c}, pie::Error) << field;
  }
  KvCacheConfig c = small_config(4);
  c.dtype = tensor::DType::bf16;
  EXPECT_THROW(KvCache{c}, pie::Error);
  c.dtype = tensor::DType::q4_0;
  EXPECT_THROW(KvCache{c}, pie::Error);
}

TEST(KvCacheTest, AbsurdSizeThrows) {
  // Overflows size_t.
  KvCacheConfig c = small_config(INT32_MAX);
  c.n_layer = INT32_MAX;
  c.n_kv_head = INT32_MAX;
  c.head_dim = INT32_MAX;
  EXPECT_THROW(KvCache{c}, pie::Error);
  // Fits in size_t (~2^50 bytes) but not in any machine.
  c = small_config(1 << 20);
  c.n_layer = 1000;
  c.n_kv_head = 64;
  c.head_dim = 256;
  EXPECT_THROW(KvCache{c}, pie::Error);
}

TEST(KvCacheTest, PoolsAreAlignedAndDistinct) {
  KvCacheConfig c = small_config(8);
  c.dtype = tensor::DType::f16;
  KvCache kv(c);
  const std::size_t pool = 8 * 16 * 2 * 4 * 2;
  std::vector<std::uintptr_t> starts;
  for (std::int32_t l = 0; l < c.n_layer; ++l) {
    for (void* p : {kv.storage().k_pool(l), kv.storage().v_pool(l)}) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
      starts.push_back(reinterpret_cast<std::uintptr_t>(p));
      std::memset(p, 0x5a, pool);  // the whole pool is writable
    }
  }
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 1; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 1], pool);
  EXPECT_THROW(kv.storage().k_pool(-1), pie::Error);
  EXPECT_THROW(kv.storage().k_pool(2), pie::Error);
  EXPECT_THROW(kv.storage().v_pool(2), pie::Error);
}

TEST(KvCacheTest, ReserveAndReleaseAccounting) {
  KvCache kv(small_config(10));
  EXPECT_EQ(kv.stats().n_free, 10);
  const SeqId a = kv.create();
  EXPECT_TRUE(kv.reserve(a, 0));
  EXPECT_TRUE(kv.pages(a).empty());
  EXPECT_TRUE(kv.reserve(a, 1));
  EXPECT_EQ(kv.pages(a).size(), 1u);
  EXPECT_TRUE(kv.reserve(a, 16));
  EXPECT_EQ(kv.pages(a).size(), 1u);
  EXPECT_TRUE(kv.reserve(a, 17));
  EXPECT_EQ(kv.pages(a).size(), 2u);
  EXPECT_TRUE(kv.reserve(a, 5));  // never shrinks
  EXPECT_EQ(kv.pages(a).size(), 2u);
  const SeqId b = kv.create();
  EXPECT_TRUE(kv.reserve(b, 64));
  EXPECT_EQ(kv.stats().n_used, 6);
  EXPECT_EQ(kv.stats().n_free, 4);
  expect_accounting(kv);
  // Distinct pages.
  std::vector<std::int32_t> all(kv.pages(a).begin(), kv.pages(a).end());
  all.insert(all.end(), kv.pages(b).begin(), kv.pages(b).end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  for (std::int32_t p : all) EXPECT_TRUE(p >= 0 && p < 10);
  kv.release(a);
  kv.release(b);  // nothing committed: everything goes back to the free list
  EXPECT_EQ(kv.stats().n_free, 10);
  EXPECT_EQ(kv.stats().n_used, 0);
  EXPECT_EQ(kv.stats().n_cached, 0);
}

TEST(KvCacheTest, ReserveFailureChangesNothing) {
  KvCache kv(small_config(4));
  const SeqId a = kv.create();
  EXPECT_TRUE(kv.reserve(a, 40));  // 3 pages
  const std::vector<std::int32_t> before(kv.pages(a).begin(), kv.pages(a).end());
  const pie::KvCacheStats s0 = kv.stats();
  EXPECT_FALSE(kv.reserve(a, 80));  // needs 2 more, 1 left
  EXPECT_EQ(std::vector<std::int32_t>(kv.pages(a).begin(), kv.pages(a).end()), before);
  const pie::KvCacheStats s1 = kv.stats();
  EXPECT_EQ(s1.n_used, s0.n_used);
  EXPECT_EQ(s1.n_free, s0.n_free);
  EXPECT_EQ(kv.n_available(), 1);
  const SeqId b = kv.create();
  EXPECT_FALSE(kv.reserve(b, 17));
  EXPECT_TRUE(kv.pages(b).empty());
  EXPECT_TRUE(kv.reserve(b, 16));
  EXPECT_EQ(kv.n_available(), 0);
  EXPECT_FALSE(kv.reserve(b, 17));
}

TEST(KvCacheTest, PrefixHitAfterRelease) {
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> prompt = iota_tokens(50, 100);  // 3 full pages + 2 tokens
  const SeqId a = run_prompt(kv, prompt);
  const std::vector<std::int32_t> a_pages(kv.pages(a).begin(), kv.pages(a).end());
  kv.release(a);
  EXPECT_EQ(kv.stats().n_cached, 3);  // the partial page is freed
  EXPECT_EQ(kv.stats().n_free, 13);
  expect_accounting(kv);

  const SeqId b = kv.create();
  EXPECT_EQ(kv.attach_prefix(b, prompt), 48);
  EXPECT_EQ(kv.n_committed(b), 48);
  EXPECT_EQ(std::vector<std::int32_t>(kv.pages(b).begin(), kv.pages(b).end()),
            std::vector<std::int32_t>(a_pages.begin(), a_pages.begin() + 3));
  EXPECT_EQ(kv.stats().n_cached, 0);
  EXPECT_EQ(kv.stats().n_used, 3);
  EXPECT_EQ(kv.stats().prefix_lookup_tokens, 100u);  // 50 for a (miss), 50 for b
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 48u);
  EXPECT_TRUE(kv.reserve(b, 51));
  kv.commit(b, prompt, 50);
  expect_accounting(kv);
}

// Pages computed under one prefix namespace (a LoRA adapter set) never serve a sequence of another; forks
// and truncation stay in theirs.
TEST(KvCacheTest, PrefixNamespacesAreApart) {
  KvCache kv(small_config(32));
  const std::vector<std::int32_t> prompt = iota_tokens(50);
  const SeqId a = kv.create(7);
  kv.reserve(a, 50);
  kv.commit(a, prompt, 50);
  const SeqId fork = kv.fork(a);
  kv.release(a);
  ASSERT_TRUE(kv.truncate(fork, 20));
  kv.commit(fork, prompt, 20);
  kv.release(fork);
  const SeqId plain = kv.create();
  EXPECT_EQ(kv.attach_prefix(plain, prompt), 0);
  const SeqId other = kv.create(8);
  EXPECT_EQ(kv.attach_prefix(other, prompt), 0);
  const SeqId same = kv.create(7);
  EXPECT_EQ(kv.attach_prefix(same, prompt), 48);
  for (SeqId s : {plain, other, same}) kv.release(s);
  expect_accounting(kv);
}

TEST(KvCacheTest, AttachNeverCoversTheLastToken) {
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> prompt = iota_tokens(48);
  kv.release(run_prompt(kv, prompt));
  EXPECT_EQ(kv.stats().n_cached, 3);
  const SeqId b = kv.create();
  EXPECT_EQ(kv.attach_prefix(b, prompt), 32);  // (48 - 1) / 16 = 2 pages
  const SeqId c = kv.create();
  EXPECT_EQ(kv.attach_prefix(c, std::vector<std::int32_t>(prompt.begin(), prompt.begin() + 16)), 0);
  const SeqId d = kv.create();
  EXPECT_EQ(kv.attach_prefix(d, std::vector<std::int32_t>{}), 0);
  const SeqId e = kv.create();
  std::vector<std::int32_t> longer = prompt;
  longer.push_back(7);
  EXPECT_EQ(kv.attach_prefix(e, longer), 48);
}

TEST(KvCacheTest, PartialHits) {
  KvCache kv(small_config(32));
  const std::vector<std::int32_t> a = iota_tokens(64);
  kv.release(run_prompt(kv, a));
  // Same first two pages, then different.
  std::vector<std::int32_t> b = a;
  b[40] = 9999;
  const SeqId sb = kv.create();
  EXPECT_EQ(kv.attach_prefix(sb, b), 32);
  // Differs inside the first page: nothing.
  std::vector<std::int32_t> c = a;
  c[3] = 9999;
  const SeqId sc = kv.create();
  EXPECT_EQ(kv.attach_prefix(sc, c), 0);
  // The same second page after a different first page is not a hit (the key covers the whole prefix).
  std::vector<std::int32_t> d = a;
  d[0] = 9999;
  const SeqId sd = kv.create();
  EXPECT_EQ(kv.attach_prefix(sd, d), 0);
  // The sequence continues: its own new full pages become cached too.
  EXPECT_TRUE(kv.reserve(sb, 64));
  kv.commit(sb, b, 64);
  kv.release(sb);
  const SeqId se = kv.create();
  b.push_back(1);
  EXPECT_EQ(kv.attach_prefix(se, b), 64);
}

TEST(KvCacheTest, CommitRegistersOnlyFullCommittedPages) {
  KvCache kv(small_config(8));
  const std::vector<std::int32_t> t = iota_tokens(40);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 40));
  kv.commit(a, t, 20);  // page 0 full, page 1 partial
  kv.commit(a, t, 20);  // idempotent
  kv.release(a);
  EXPECT_EQ(kv.stats().n_cached, 1);
  EXPECT_EQ(kv.stats().n_free, 7);
  const SeqId b = kv.create();
  EXPECT_EQ(kv.attach_prefix(b, t), 16);
}

TEST(KvCacheTest, PrefixCachingOff) {
  KvCache kv(small_config(8, /*prefix=*/false));
  const std::vector<std::int32_t> t = iota_tokens(40);
  kv.release(run_prompt(kv, t));
  EXPECT_EQ(kv.stats().n_cached, 0);
  EXPECT_EQ(kv.stats().n_free, 8);
  const SeqId b = kv.create();
  EXPECT_EQ(kv.attach_prefix(b, t), 0);
  EXPECT_EQ(kv.stats().prefix_lookup_tokens, 0u);
}

TEST(KvCacheTest, AttachSharesPagesOfARunningSequence) {
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> t = iota_tokens(33);
  const SeqId a = run_prompt(kv, t);
  const SeqId b = run_prompt(kv, t);  // a's committed full pages are addressable while a still runs
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 32u);
  EXPECT_EQ(kv.pages(a)[0], kv.pages(b)[0]);
  EXPECT_EQ(kv.pages(a)[1], kv.pages(b)[1]);
  EXPECT_EQ(kv.stats().n_used, 4);
  kv.release(a);
  kv.release(b);
  EXPECT_EQ(kv.stats().n_cached, 2);
  expect_accounting(kv);
}

TEST(KvCacheTest, TwinPagesKeepTheFirstRegistration) {
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> t = iota_tokens(33);
  // Both start before either committed: each computes its own copy of the same pages.
  const SeqId a = kv.create(), b = kv.create();
  EXPECT_EQ(kv.attach_prefix(a, t), 0);
  EXPECT_EQ(kv.attach_prefix(b, t), 0);
  ASSERT_TRUE(kv.reserve(a, 33));
  ASSERT_TRUE(kv.reserve(b, 33));
  kv.commit(a, t, 33);
  kv.commit(b, t, 33);
  const std::vector<std::int32_t> a_pages(kv.pages(a).begin(), kv.pages(a).end());
  kv.release(b);  // b's twins are not addressable: freed
  EXPECT_EQ(kv.stats().n_cached, 0);
  EXPECT_EQ(kv.stats().n_free, 13);
  kv.release(a);
  EXPECT_EQ(kv.stats().n_cached, 2);
  const SeqId c = kv.create();
  EXPECT_EQ(kv.attach_prefix(c, t), 32);
  EXPECT_EQ(kv.pages(c)[0], a_pages[0]);
  EXPECT_EQ(kv.pages(c)[1], a_pages[1]);
}

// A constant hash: every page key collides; the stored tokens keep lookups exact.
std::uint64_t constant_hash(std::uint64_t, std::span<const std::int32_t>) { return 42; }
// A hash of the page's own tokens only: keys of equal pages after different prefixes collide; the stored
// parent key keeps lookups exact.
std::uint64_t page_only_hash(std::uint64_t, std::span<const std::int32_t> t) {
  return pie::kv_detail::default_page_hash(0, t);
}

struct HashHook {
  explicit HashHook(pie::kv_detail::PageHashFn f) { pie::kv_detail::set_page_hash_for_testing(f); }
  ~HashHook() { pie::kv_detail::set_page_hash_for_testing(nullptr); }
};

TEST(KvCacheTest, HashCollisionIsAMissNotAWrongPage) {
  HashHook hook(&constant_hash);
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> a = iota_tokens(33, 0);
  const std::vector<std::int32_t> b = iota_tokens(33, 1000);
  kv.release(run_prompt(kv, a));
  EXPECT_EQ(kv.stats().n_cached, 1);  // page 1 of a collides with page 0: not registered
  const SeqId sb = kv.create();
  EXPECT_EQ(kv.attach_prefix(sb, b), 0);  // same key, other tokens
  const SeqId sa = kv.create();
  EXPECT_EQ(kv.attach_prefix(sa, a), 16);
}

TEST(KvCacheTest, HashCollisionOfEqualPagesAfterDifferentPrefixes) {
  HashHook hook(&page_only_hash);
  KvCache kv(small_config(16));
  const std::vector<std::int32_t> p = iota_tokens(16, 0), q = iota_tokens(16, 500);
  const std::vector<std::int32_t> y = iota_tokens(16, 1000), z = iota_tokens(16, 2000);
  auto cat = [](std::vector<std::int32_t> x, const std::vector<std::int32_t>& w, std::int32_t tail) {
    x.insert(x.end(), w.begin(), w.end());
    x.push_back(tail);
    return x;
  };
  kv.release(run_prompt(kv, cat(p, y, 1)));
  kv.release(run_prompt(kv, cat(q, z, 1)));
  EXPECT_EQ(kv.stats().n_cached, 4);
  const SeqId s = kv.create();
  // Page 0 (q) hits; page 1 (y) finds p+y's page under the same key, whose parent is p: a miss.
  EXPECT_EQ(kv.attach_prefix(s, cat(q, y, 1)), 16);
}

TEST(KvCacheTest, LruEvictionOrder) {
  KvCache kv(small_config(6));
  // Three cached prompts of one full page each (+1 token on a partial page, freed at release).
  const std::vector<std::int32_t> a = iota_tokens(17, 0), b = iota_tokens(17, 100), c = iota_tokens(17, 200);
  kv.release(run_prompt(kv, a));
  kv.release(run_prompt(kv, b));
  kv.release(run_prompt(kv, c));
  EXPECT_EQ(kv.stats().n_cached, 3);
  EXPECT_EQ(kv.stats().n_free, 3);
  // Touch a: attach and release again, so b is now the least recently used.
  const SeqId ta = kv.create();
  EXPECT_EQ(kv.attach_prefix(ta, a), 16);
  kv.release(ta);
  // Take the 3 free pages plus one: evicts b only.
  const SeqId big = kv.create();
  EXPECT_TRUE(kv.reserve(big, 4 * 16));
  EXPECT_EQ(kv.stats().evictions, 1u);
  EXPECT_EQ(kv.stats().n_cached, 2);
  const SeqId sb = kv.create(), sc = kv.create(), sa = kv.create();
  EXPECT_EQ(kv.attach_prefix(sb, b), 0);
  EXPECT_EQ(kv.attach_prefix(sc, c), 16);
  EXPECT_EQ(kv.attach_prefix(sa, a), 16);
  kv.release(sc);
  kv.release(sa);
  // c then a back on the LRU: c goes first.
  EXPECT_TRUE(kv.reserve(big, 5 * 16));
  EXPECT_EQ(kv.stats().evictions, 2u);
  const SeqId sc2 = kv.create(), sa2 = kv.create();
  EXPECT_EQ(kv.attach_prefix(sc2, c), 0);
  EXPECT_EQ(kv.attach_prefix(sa2, a), 16);
  // Referenced pages are never evicted: a is in use, nothing is free or cached.
  EXPECT_EQ(kv.n_available(), 0);
  EXPECT_FALSE(kv.reserve(big, 6 * 16 + 1));
  expect_accounting(kv);
}

TEST(KvCacheTest, ReleaseEvictsThePromptTailFirst) {
  KvCache kv(small_config(4));
  const std::vector<std::int32_t> t = iota_tokens(49);
  kv.release(run_prompt(kv, t));  // pages 0..2 cached, the partial one freed
  const SeqId x = kv.create();
  EXPECT_TRUE(kv.reserve(x, 32));  // the free page, then one eviction: page 2 of the prompt
  const SeqId s = kv.create();
  EXPECT_EQ(kv.attach_prefix(s, t), 32);
}

void fill_page(KvCache& kv, std::int32_t page, float base) {
  const KvCacheConfig& c = kv.config();
  const std::size_t n = std::size_t(16) * c.n_kv_head * c.head_dim;
  for (std::int32_t l = 0; l < c.n_layer; ++l) {
    float* k = static_cast<float*>(kv.storage().k_pool(l)) + std::size_t(page) * n;
    float* v = static_cast<float*>(kv.storage().v_pool(l)) + std::size_t(page) * n;
    for (std::size_t i = 0; i < n; ++i) {
      k[i] = base + static_cast<float>(l * 100000 + i);
      v[i] = -base - static_cast<float>(l * 100000 + i);
    }
  }
}

// Whether token slots [0, n_slots) of pages p and q hold the same K and V in every layer.
bool same_page_bytes(KvCache& kv, std::int32_t p, std::int32_t q, std::int32_t n_slots = 16) {
  const KvCacheConfig& c = kv.config();
  const std::size_t slot_bytes = std::size_t(c.n_kv_head) * c.head_dim * 4;
  const std::size_t page_bytes = 16 * slot_bytes, bytes = slot_bytes * std::size_t(n_slots);
  for (std::int32_t l = 0; l < c.n_layer; ++l) {
    const auto* k = static_cast<const std::byte*>(kv.storage().k_pool(l));
    const auto* v = static_cast<const std::byte*>(kv.storage().v_pool(l));
    if (std::memcmp(k + p * page_bytes, k + q * page_bytes, bytes) != 0) return false;
    if (std::memcmp(v + p * page_bytes, v + q * page_bytes, bytes) != 0) return false;
  }
  return true;
}

TEST(KvCacheTest, ForkSharesFullPagesAndCopiesThePartialOne) {
  KvCache kv(small_config(8));
  const std::vector<std::int32_t> t = iota_tokens(21);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 21));
  fill_page(kv, kv.pages(a)[0], 1.0f);
  fill_page(kv, kv.pages(a)[1], 7.0f);
  kv.commit(a, t, 21);
  const SeqId b = kv.fork(a);
  ASSERT_GE(b, 0);
  EXPECT_NE(a, b);
  ASSERT_EQ(kv.pages(b).size(), 2u);
  EXPECT_EQ(kv.n_committed(b), 21);
  EXPECT_EQ(kv.pages(b)[0], kv.pages(a)[0]);
  EXPECT_NE(kv.pages(b)[1], kv.pages(a)[1]);
  EXPECT_TRUE(same_page_bytes(kv, kv.pages(a)[1], kv.pages(b)[1], 5));  // the 5 committed slots
  // A write to one copy leaves the other unchanged.
  fill_page(kv, kv.pages(b)[1], 50.0f);
  EXPECT_FALSE(same_page_bytes(kv, kv.pages(a)[1], kv.pages(b)[1]));
  static_cast<float*>(kv.storage().k_pool(1))[std::size_t(kv.pages(a)[1]) * 16 * 2 * 4] = 123.0f;
  EXPECT_EQ(static_cast<float*>(kv.storage().k_pool(1))[std::size_t(kv.pages(b)[1]) * 16 * 2 * 4], 50.0f + 100000.0f);
  EXPECT_EQ(kv.stats().n_used, 3);
  expect_accounting(kv);
  // Both continue on their own.
  std::vector<std::int32_t> tb = t;
  tb.push_back(5);
  EXPECT_TRUE(kv.reserve(b, 22));
  kv.commit(b, tb, 22);
}

TEST(KvCacheTest, ForkAtPageBoundaryCopiesNothing) {
  KvCache kv(small_config(4));
  const std::vector<std::int32_t> t = iota_tokens(32);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 33));  // 3 pages, 32 committed
  kv.commit(a, t, 32);
  const SeqId b = kv.fork(a);
  ASSERT_GE(b, 0);
  EXPECT_EQ(kv.pages(b).size(), 2u);  // the reserved, uncommitted page is a's own
  EXPECT_EQ(kv.stats().n_used, 3);
}

TEST(KvCacheTest, ForkFailsWithoutAPageForTheCopy) {
  KvCache kv(small_config(2));
  const std::vector<std::int32_t> t = iota_tokens(20);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 20));
  kv.commit(a, t, 20);
  const pie::KvCacheStats s0 = kv.stats();
  EXPECT_EQ(kv.fork(a), -1);
  EXPECT_EQ(kv.stats().n_used, s0.n_used);
  EXPECT_EQ(kv.stats().n_free, s0.n_free);
  kv.release(a);
  EXPECT_EQ(kv.stats().n_cached, 1);
  EXPECT_EQ(kv.stats().n_free, 1);
}

TEST(KvCacheTest, RefCountsAfterForkAndReleaseInAnyOrder) {
  for (int order = 0; order < 6; ++order) {
    KvCache kv(small_config(8));
    const std::vector<std::int32_t> t = iota_tokens(40);
    const SeqId a = kv.create();
    ASSERT_TRUE(kv.reserve(a, 40));
    kv.commit(a, t, 40);
    const SeqId b = kv.fork(a);
    const SeqId c = kv.fork(b);
    ASSERT_GE(c, 0);
    EXPECT_EQ(kv.stats().n_used, 2 + 3);  // 2 shared full pages, 3 partial ones
    std::vector<SeqId> ids{a, b, c};
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int i = 0; i < 3; ++i) {
      kv.release(ids[perms[order][i]]);
      expect_accounting(kv);
      const pie::KvCacheStats s = kv.stats();
      EXPECT_EQ(s.n_used, i == 2 ? 0 : 2 + (2 - i)) << order;
    }
    EXPECT_EQ(kv.stats().n_cached, 2);
    EXPECT_EQ(kv.stats().n_free, 6);
    const SeqId d = kv.create();
    EXPECT_EQ(kv.attach_prefix(d, t), 32);
  }
}

TEST(KvCacheTest, TruncateDropsTheTailAndItsPages) {
  KvCache kv(small_config(8));
  const std::vector<std::int32_t> t = iota_tokens(40);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 48));  // 3 pages, 40 committed
  kv.commit(a, t, 40);
  const std::vector<std::int32_t> pages(kv.pages(a).begin(), kv.pages(a).end());
  // Inside the partial third page, which only a holds and no prefix names: cut in place.
  ASSERT_TRUE(kv.truncate(a, 36));
  EXPECT_EQ(kv.n_committed(a), 36);
  EXPECT_EQ(std::vector<std::int32_t>(kv.pages(a).begin(), kv.pages(a).end()), pages);
  // Inside the first page: a full page the prefix cache names, so a gets a copy of its 12 kept slots;
  // the original and the second page stay cached for their prefix, the third is free again.
  ASSERT_TRUE(kv.truncate(a, 12));
  EXPECT_EQ(kv.n_committed(a), 12);
  ASSERT_EQ(kv.pages(a).size(), 1u);
  EXPECT_NE(kv.pages(a)[0], pages[0]);
  EXPECT_EQ(kv.stats().n_used, 1);
  EXPECT_EQ(kv.stats().n_cached, 2);
  expect_accounting(kv);
  // Other tokens appended after the cut are hashed from the cut, not from the old content.
  std::vector<std::int32_t> u(t.begin(), t.begin() + 12);
  for (std::int32_t i = 0; i < 21; ++i) u.push_back(1000 + i);
  ASSERT_TRUE(kv.reserve(a, 33));
  kv.commit(a, u, 33);
  kv.release(a);
  const SeqId b = kv.create();
  EXPECT_EQ(kv.attach_prefix(b, u), 32);
  EXPECT_NE(kv.pages(b)[0], pages[0]);
  const SeqId c = kv.create();
  EXPECT_EQ(kv.attach_prefix(c, t), 32);  // t's own pages are still cached, unchanged
  EXPECT_EQ(kv.pages(c)[0], pages[0]);
  EXPECT_EQ(kv.pages(c)[1], pages[1]);
  ASSERT_TRUE(kv.truncate(c, 0));
  EXPECT_TRUE(kv.pages(c).empty());
  expect_accounting(kv);
}

TEST(KvCacheTest, TruncateCopiesAPageOthersHold) {
  KvCache kv(small_config(8));
  const std::vector<std::int32_t> t = iota_tokens(32);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 32));
  fill_page(kv, kv.pages(a)[0], 1.0f);
  fill_page(kv, kv.pages(a)[1], 7.0f);
  kv.commit(a, t, 32);
  const SeqId b = kv.fork(a);  // shares both (full) pages
  ASSERT_GE(b, 0);
  const std::int32_t shared = kv.pages(a)[1];
  ASSERT_TRUE(kv.truncate(b, 20));
  EXPECT_EQ(kv.pages(b)[0], kv.pages(a)[0]);  // untouched: b does not end in it
  EXPECT_NE(kv.pages(b)[1], shared);          // a private copy of the 4 kept slots
  EXPECT_TRUE(same_page_bytes(kv, shared, kv.pages(b)[1], 4));
  // b's writes past the cut never reach what a (and the prefix cache) read.
  fill_page(kv, kv.pages(b)[1], 50.0f);
  EXPECT_EQ(static_cast<float*>(kv.storage().k_pool(0))[std::size_t(shared) * 16 * 2 * 4], 7.0f);
  EXPECT_EQ(kv.n_committed(a), 32);
  kv.release(a);
  const SeqId c = kv.create();
  std::vector<std::int32_t> t_next = t;
  t_next.push_back(99);
  EXPECT_EQ(kv.attach_prefix(c, t_next), 32);
  EXPECT_EQ(kv.pages(c)[1], shared);
  expect_accounting(kv);
}

TEST(KvCacheTest, TruncateCopiesACachedPageAttachedAsPrefix) {
  KvCache kv(small_config(4));
  std::vector<std::int32_t> t = iota_tokens(33);
  kv.release(run_prompt(kv, t));  // pages 0 and 1 cached
  const SeqId b = kv.create();
  ASSERT_EQ(kv.attach_prefix(b, t), 32);
  const std::int32_t cached = kv.pages(b)[1];
  ASSERT_TRUE(kv.truncate(b, 24));
  EXPECT_NE(kv.pages(b)[1], cached);
  const SeqId c = kv.create();
  EXPECT_EQ(kv.attach_prefix(c, t), 32);  // the cached page is still the prefix's
  EXPECT_EQ(kv.pages(c)[1], cached);
  expect_accounting(kv);
}

TEST(KvCacheTest, TruncateWithoutAPageForTheCopyChangesNothing) {
  KvCache kv(small_config(2));
  const std::vector<std::int32_t> t = iota_tokens(32);
  const SeqId a = kv.create();
  ASSERT_TRUE(kv.reserve(a, 32));
  kv.commit(a, t, 32);
  const SeqId b = kv.fork(a);
  ASSERT_GE(b, 0);
  const std::vector<std::int32_t> before(kv.pages(b).begin(), kv.pages(b).end());
  EXPECT_FALSE(kv.truncate(b, 20));
  EXPECT_EQ(std::vector<std::int32_t>(kv.pages(b).begin(), kv.pages(b).end()), before);
  EXPECT_EQ(kv.n_committed(b), 32);
  EXPECT_TRUE(kv.truncate(b, 16));  // at a page boundary: no copy needed
  EXPECT_EQ(kv.pages(b).size(), 1u);
  EXPECT_THROW(kv.truncate(b, 17), pie::Error);  // past what is committed
  EXPECT_THROW(kv.truncate(b, -1), pie::Error);
  EXPECT_THROW(kv.truncate(77, 0), pie::Error);
  expect_accounting(kv);
}

TEST(KvCacheTest, InvalidIdsAndArgumentsThrow) {
  KvCache kv(small_config(4));
  const std::vector<std::int32_t> t = iota_tokens(40);
  const SeqId bad = 77;
  EXPECT_THROW(kv.attach_prefix(bad, t), pie::Error);
  EXPECT_THROW(kv.reserve(bad, 1), pie::Error);
  EXPECT_THROW(kv.commit(bad, t, 0), pie::Error);
  EXPECT_THROW(kv.fork(bad), pie::Error);
  EXPECT_THROW(kv.release(bad), pie::Error);
  EXPECT_THROW(kv.pages(bad), pie::Error);
  EXPECT_THROW(kv.n_committed(bad), pie::Error);
  const SeqId a = kv.create();
  kv.release(a);
  EXPECT_THROW(kv.release(a), pie::Error);  // twice
  EXPECT_THROW(kv.pages(a), pie::Error);
  const SeqId b = kv.create();
  EXPECT_THROW(kv.reserve(b, -1), pie::Error);
  ASSERT_TRUE(kv.reserve(b, 20));
  EXPECT_THROW(kv.commit(b, t, 33), pie::Error);   // past the pages owned
  EXPECT_THROW(kv.commit(b, std::span(t).first(10), 12), pie::Error);  // past the tokens given
  EXPECT_THROW(kv.commit(b, t, -1), pie::Error);
  kv.commit(b, t, 18);
  EXPECT_THROW(kv.commit(b, t, 17), pie::Error);  // going back
  EXPECT_THROW(kv.attach_prefix(b, t), pie::Error);  // not empty
  EXPECT_EQ(kv.n_committed(b), 18);
  expect_accounting(kv);
}

}  // namespace

namespace {

// Resident memory of this process, in bytes (/proc/self/statm's second field, in pages).
std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// A server's pool is committed when made (its memory does not creep up as the prefix cache fills); a
// one-shot command's on first write.
TEST(KvStorage, AResidentPoolIsCommittedWhenMade) {
  KvCacheConfig c = small_config(1);
  c.n_layer = 8;
  c.n_kv_head = 8;
  c.head_dim = 128;
  c.n_pages = 64;  // 64 pages x 8 layers x 2 pools x 16 slots x 8 heads x 128 x 4 bytes = 64 MiB
  const std::size_t pool = c.page_bytes() * static_cast<std::size_t>(c.n_pages);
  ASSERT_EQ(pool, std::size_t{64} << 20);
  const std::size_t before = resident_bytes();
  if (before == 0) GTEST_SKIP() << "no /proc/self/statm to read resident memory from";
  auto lazy = pie::make_host_kv_storage(c);
  const std::size_t after_lazy = resident_bytes();
  c.resident = true;
  auto resident = pie::make_host_kv_storage(c);
  const std::size_t after_resident = resident_bytes();
  EXPECT_LT(after_lazy - before, pool / 4);
  EXPECT_GE(after_resident - after_lazy, pool - pool / 16);
}

}  // namespace

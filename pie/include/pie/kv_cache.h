// The paged KV cache's bookkeeping over a KvStorage (kv_storage.h: the pools of 16-token pages, owned by
// the backend): a free list, a page table per sequence, reference counts, and the prefix cache: a full
// page is addressed by a hash of every token up to its end, so a new sequence whose prompt starts with the
// same tokens reuses those pages instead of recomputing them. Pages no sequence references stay cached and
// are evicted least-recently-used when a sequence needs a page. Forks (n > 1 samples of one prompt) share
// the full pages and copy only the last partial one; truncation (a rejected speculative tail) drops a
// sequence's last entries, copying the page it now ends in when that page is shared.
//
// Not thread-safe: the engine loop owns it. Errors: bad configuration or ids throw pie::Error; running
// out of pages is not an error (reserve() returns false and the scheduler preempts).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pie/kv_storage.h"

namespace pie {

struct KvCacheStats {
  std::int32_t n_pages = 0;
  std::int32_t n_used = 0;        // referenced by at least one sequence
  std::int32_t n_cached = 0;      // unreferenced but kept for prefix reuse (evictable)
  std::int32_t n_free = 0;        // on the free list
  std::uint64_t prefix_lookup_tokens = 0;  // prompt tokens looked up in the prefix cache
  std::uint64_t prefix_hit_tokens = 0;     // of those, found cached
  std::uint64_t evictions = 0;
};

using SeqId = std::int64_t;

class KvCache {
 public:
  // Keeps the pages of `storage` (its config says how many and their shape).
  explicit KvCache(std::unique_ptr<KvStorage> storage);
  // Over host storage (make_host_kv_storage). Throws pie::Error on a bad config (zero sizes, dtype not
  // f32/f16) or when the memory cannot be allocated.
  explicit KvCache(const KvCacheConfig& config);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheConfig& config() const;
  // The pools the forward pass reads and writes.
  KvStorage& storage();

  // A new, empty sequence. Its prefix pages are keyed under `prefix_namespace` (0: the default): pages
  // computed under one namespace (e.g. one set of LoRA adapters) never serve a sequence of another.
  SeqId create(std::uint64_t prefix_namespace = 0);
  // Attaches to an empty sequence the longest run of cached full pages that match a prefix of `tokens`,
  // leaving at least one token to compute (the last token's logits are needed). Returns the number of
  // tokens covered (a multiple of 16). Counts toward the prefix-cache statistics.
  std::int32_t attach_prefix(SeqId seq, std::span<const std::int32_t> tokens);
  // Makes the sequence own pages for n_tokens tokens in all (allocating, evicting unreferenced cached
  // pages LRU when the free list is empty). Returns false and changes nothing when there are not enough.
  bool reserve(SeqId seq, std::int32_t n_tokens);
  // Tells the cache that K/V of tokens[0 .. n_computed) of the sequence are written: full pages among
  // them become addressable by their prefix hash (when prefix caching is on).
  void commit(SeqId seq, std::span<const std::int32_t> tokens, std::int32_t n_computed);
  // A new sequence with the same content: shares the full pages (reference counted), copies the last
  // partial page. Returns -1 (nothing changed) when no page can be had for the copy.
  SeqId fork(SeqId seq);
  // Drops the sequence: its pages lose a reference; committed full pages stay cached, others are freed.
  void release(SeqId seq);
  // Forgets the sequence's entries past its first n_keep tokens (a rejected speculative tail): n_keep
  // tokens stay committed, pages wholly past them are released, and when the page the sequence now ends
  // in is also another sequence's or the prefix cache's, the sequence gets a private copy of its first
  // n_keep % 16 slots, so later writes never touch what others read. Returns false, changing nothing,
  // when that copy needs a page and none can be had. Throws pie::Error when n_keep is outside
  // [0, n_committed].
  bool truncate(SeqId seq, std::int32_t n_keep);
  // The sequence's pages in token order, and the tokens committed so far.
  std::span<const std::int32_t> pages(SeqId seq) const;
  std::int32_t n_committed(SeqId seq) const;
  // Pages obtainable right now (free + evictable).
  std::int32_t n_available() const;
  KvCacheStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pie

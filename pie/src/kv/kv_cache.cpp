#include "pie/kv_cache.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_map>

#include "kv/prefix_hash.h"
#include "pie/error.h"

namespace pie {

namespace {

constexpr std::int32_t kNone = -1;

}  // namespace

struct KvCache::Impl {
  struct Page {
    std::int32_t ref = 0;
    bool registered = false;  // addressable in by_key (then `key`, `parent_key`, `tokens` are valid)
    bool on_free_list = false;
    std::uint64_t key = 0;
    std::uint64_t parent_key = 0;
    std::array<std::int32_t, kKvPageSize> tokens{};
    std::int32_t lru_prev = kNone, lru_next = kNone;  // links while cached (ref 0 and registered)
    bool in_lru = false;
  };
  struct Seq {
    std::vector<std::int32_t> pages;
    std::int32_t n_committed = 0;
    std::int32_t n_hashed = 0;              // leading full pages whose chain keys are known
    std::uint64_t chain_key = kv_detail::kRootKey;  // key of page n_hashed - 1 (root when none)
    std::vector<std::uint64_t> chain_keys;  // [n_hashed]: the key of each, so a truncation can go back
    std::uint64_t root_key = kv_detail::kRootKey;  // the chain's start: its prefix namespace's
  };

  std::unique_ptr<KvStorage> storage;
  KvCacheConfig config;
  std::vector<Page> pages;
  std::vector<std::int32_t> free_list;  // a stack: the most recently freed page is reused first
  std::int32_t lru_head = kNone, lru_tail = kNone, n_lru = 0;
  std::int32_t n_used = 0;
  std::unordered_map<std::uint64_t, std::int32_t> by_key;
  std::unordered_map<SeqId, Seq> seqs;
  SeqId next_id = 0;
  std::uint64_t lookup_tokens = 0, hit_tokens = 0, evictions = 0;

  explicit Impl(std::unique_ptr<KvStorage> s) : storage(std::move(s)) {
    if (!storage) throw Error("[kv_cache] no storage");
    config = storage->config();
    config.validate();
    pages.resize(static_cast<std::size_t>(config.n_pages));
    free_list.reserve(pages.size());
    for (std::int32_t p = config.n_pages - 1; p >= 0; --p) {
      free_list.push_back(p);
      pages[static_cast<std::size_t>(p)].on_free_list = true;
    }
  }

  Page& page(std::int32_t p) { return pages[static_cast<std::size_t>(p)]; }

  Seq& seq(SeqId id, const char* op) {
    auto it = seqs.find(id);
    if (it == seqs.end()) {
      throw Error(std::string("[kv_cache] ") + op + ": unknown sequence " + std::to_string(id));
    }
    return it->second;
  }

  // --- LRU of cached pages (intrusive doubly linked list; head = least recently used) ---
  void lru_push_back(std::int32_t p) {
    Page& pg = page(p);
    pg.lru_prev = lru_tail;
    pg.lru_next = kNone;
    if (lru_tail != kNone) page(lru_tail).lru_next = p; else lru_head = p;
    lru_tail = p;
    pg.in_lru = true;
    ++n_lru;
  }
  void lru_remove(std::int32_t p) {
    Page& pg = page(p);
    if (pg.lru_prev != kNone) page(pg.lru_prev).lru_next = pg.lru_next; else lru_head = pg.lru_next;
    if (pg.lru_next != kNone) page(pg.lru_next).lru_prev = pg.lru_prev; else lru_tail = pg.lru_prev;
    pg.lru_prev = pg.lru_next = kNone;
    pg.in_lru = false;
    --n_lru;
  }

  // A page for a sequence: the free list first, then the least recently used cached page (its key is
  // dropped). The caller has checked availability.
  std::int32_t take_page() {
    std::int32_t p;
    if (!free_list.empty()) {
      p = free_list.back();
      free_list.pop_back();
      page(p).on_free_list = false;
    } else {
      p = lru_head;
      lru_remove(p);
      Page& pg = page(p);
      by_key.erase(pg.key);
      pg.registered = false;
      ++evictions;
    }
    page(p).ref = 1;
    ++n_used;
    return p;
  }

  void add_ref(std::int32_t p) {
    Page& pg = page(p);
    if (pg.ref == 0) {
      lru_remove(p);
      ++n_used;
    }
    ++pg.ref;
  }

  void drop_ref(std::int32_t p) {
    Page& pg = page(p);
    if (--pg.ref > 0) return;
    --n_used;
    if (pg.registered) {
      lru_push_back(p);
    } else {
      pg.on_free_list = true;
      free_list.push_back(p);
    }
  }

  std::int32_t available() const { return static_cast<std::int32_t>(free_list.size()) + n_lru; }

  // The registered page holding `tokens` after the prefix whose chain key is `parent`, or kNone.
  std::int32_t find(std::uint64_t key, std::uint64_t parent, std::span<const std::int32_t> tokens) {
    auto it = by_key.find(key);
    if (it == by_key.end()) return kNone;
    const Page& pg = page(it->second);
    if (pg.parent_key != parent || !std::equal(tokens.begin(), tokens.end(), pg.tokens.begin())) {
      return kNone;  // a hash collision: a miss, never a wrong page
    }
    return it->second;
  }
};

KvCache::KvCache(std::unique_ptr<KvStorage> storage) : impl_(std::make_unique<Impl>(std::move(storage))) {}
KvCache::KvCache(const KvCacheConfig& config) : KvCache(make_host_kv_storage(config)) {}
KvCache::~KvCache() = default;

const KvCacheConfig& KvCache::config() const { return impl_->config; }

KvStorage& KvCache::storage() { return *impl_->storage; }

SeqId KvCache::create(std::uint64_t prefix_namespace) {
  const SeqId id = impl_->next_id++;
  Impl::Seq s;
  if (prefix_namespace != 0) {
    // A root of its own: every chain key under it differs, and lookups check the parent key.
    const std::int32_t words[2] = {static_cast<std::int32_t>(prefix_namespace & 0xffffffffu),
                                   static_cast<std::int32_t>(prefix_namespace >> 32)};
    s.root_key = kv_detail::page_hash(kv_detail::kRootKey, words);
    s.chain_key = s.root_key;
  }
  impl_->seqs.emplace(id, std::move(s));
  return id;
}

std::int32_t KvCache::attach_prefix(SeqId seq_id, std::span<const std::int32_t> tokens) {
  Impl& m = *impl_;
  Impl::Seq& s = m.seq(seq_id, "attach_prefix");
  if (!s.pages.empty() || s.n_committed != 0) {
    throw Error("[kv_cache] attach_prefix: sequence " + std::to_string(seq_id) + " is not empty (" +
                std::to_string(s.pages.size()) + " pages)");
  }
  if (!m.config.prefix_caching || tokens.empty()) return 0;
  m.lookup_tokens += tokens.size();
  // Never the page holding the last token: its logits must be computed.
  const std::size_t max_pages = (tokens.size() - 1) / kKvPageSize;
  std::uint64_t chain = s.root_key;
  for (std::size_t i = 0; i < max_pages; ++i) {
    const auto toks = tokens.subspan(i * kKvPageSize, kKvPageSize);
    const std::uint64_t key = kv_detail::page_hash(chain, toks);
    const std::int32_t p = m.find(key, chain, toks);
    if (p == kNone) break;
    m.add_ref(p);
    s.pages.push_back(p);
    s.chain_keys.push_back(key);
    chain = key;
  }
  const auto n_pages = static_cast<std::int32_t>(s.pages.size());
  s.n_committed = n_pages * kKvPageSize;
  s.n_hashed = n_pages;
  s.chain_key = chain;
  m.hit_tokens += static_cast<std::uint64_t>(s.n_committed);
  return s.n_committed;
}

bool KvCache::reserve(SeqId seq_id, std::int32_t n_tokens) {
  Impl& m = *impl_;
  Impl::Seq& s = m.seq(seq_id, "reserve");
  if (n_tokens < 0) {
    throw Error("[kv_cache] reserve: n_tokens must be >= 0, got " + std::to_string(n_tokens));
  }
  const std::int64_t need = (std::int64_t{n_tokens} + kKvPageSize - 1) / kKvPageSize;
  const auto have = static_cast<std::int64_t>(s.pages.size());
  if (need <= have) return true;
  if (need - have > m.available()) return false;
  s.pages.reserve(static_cast<std::size_t>(need));
  for (std::int64_t i = have; i < need; ++i) s.pages.push_back(m.take_page());
  return true;
}

void KvCache::commit(SeqId seq_id, std::span<const std::int32_t> tokens, std::int32_t n_computed) {
  Impl& m = *impl_;
  Impl::Seq& s = m.seq(seq_id, "commit");
  const auto capacity = static_cast<std::int64_t>(s.pages.size()) * kKvPageSize;
  if (n_computed < s.n_committed || n_computed > capacity ||
      static_cast<std::size_t>(n_computed) > tokens.size()) {
    throw Error("[kv_cache] commit: sequence " + std::to_string(seq_id) + ": n_computed " +
                std::to_string(n_computed) + " must be in [" + std::to_string(s.n_committed) + " (committed), " +
                std::to_string(std::min<std::int64_t>(capacity, static_cast<std::int64_t>(tokens.size()))) +
                "] (pages owned, tokens given)");
  }
  s.n_committed = n_computed;
  if (!m.config.prefix_caching) return;
  const std::int32_t n_full = n_computed / kKvPageSize;
  for (std::int32_t i = s.n_hashed; i < n_full; ++i) {
    const auto toks = tokens.subspan(static_cast<std::size_t>(i) * kKvPageSize, kKvPageSize);
    const std::uint64_t key = kv_detail::page_hash(s.chain_key, toks);
    // A key already taken (by a twin page with the same content, or by a collision) stays with its page.
    if (m.by_key.find(key) == m.by_key.end()) {
      const std::int32_t p = s.pages[static_cast<std::size_t>(i)];
      Impl::Page& pg = m.page(p);
      pg.registered = true;
      pg.key = key;
      pg.parent_key = s.chain_key;
      std::copy(toks.begin(), toks.end(), pg.tokens.begin());
      m.by_key.emplace(key, p);
    }
    s.chain_key = key;
    s.chain_keys.push_back(key);
    s.n_hashed = i + 1;
  }
}

SeqId KvCache::fork(SeqId seq_id) {
  Impl& m = *impl_;
  const Impl::Seq& s = m.seq(seq_id, "fork");
  const std::int32_t n_full = s.n_committed / kKvPageSize;
  const bool partial = s.n_committed % kKvPageSize != 0;
  if (partial && m.available() < 1) return -1;
  Impl::Seq child;
  child.n_committed = s.n_committed;
  child.n_hashed = s.n_hashed;
  child.chain_key = s.chain_key;
  child.root_key = s.root_key;
  child.chain_keys = s.chain_keys;
  child.pages.reserve(static_cast<std::size_t>(n_full + 1));
  for (std::int32_t i = 0; i < n_full; ++i) {
    const std::int32_t p = s.pages[static_cast<std::size_t>(i)];
    m.add_ref(p);
    child.pages.push_back(p);
  }
  if (partial) {
    const std::int32_t src = s.pages[static_cast<std::size_t>(n_full)];
    const std::int32_t dst = m.take_page();
    m.storage->copy_page(src, dst, s.n_committed % kKvPageSize);
    child.pages.push_back(dst);
  }
  const SeqId id = m.next_id++;
  m.seqs.emplace(id, std::move(child));
  return id;
}

void KvCache::release(SeqId seq_id) {
  Impl& m = *impl_;
  auto it = m.seqs.find(seq_id);
  if (it == m.seqs.end()) {
    throw Error("[kv_cache] release: unknown sequence " + std::to_string(seq_id));
  }
  // Last page first: the LRU then evicts the tail of a prompt before its head, which more requests share.
  const std::vector<std::int32_t>& ps = it->second.pages;
  for (auto p = ps.rbegin(); p != ps.rend(); ++p) m.drop_ref(*p);
  m.seqs.erase(it);
}

bool KvCache::truncate(SeqId seq_id, std::int32_t n_keep) {
  Impl& m = *impl_;
  Impl::Seq& s = m.seq(seq_id, "truncate");
  if (n_keep < 0 || n_keep > s.n_committed) {
    throw Error("[kv_cache] truncate: sequence " + std::to_string(seq_id) + ": n_keep " + std::to_string(n_keep) +
                " must be in [0, " + std::to_string(s.n_committed) + "] (committed)");
  }
  const auto keep_pages = static_cast<std::size_t>((n_keep + kKvPageSize - 1) / kKvPageSize);
  const std::int32_t tail_slots = n_keep % kKvPageSize;
  // The page the sequence now ends in takes further writes: it must be this sequence's alone.
  std::int32_t copy = kNone;
  if (tail_slots != 0) {
    const std::int32_t p = s.pages[keep_pages - 1];
    if (m.page(p).ref > 1 || m.page(p).registered) {
      if (m.available() < 1) return false;
      copy = m.take_page();
      m.storage->copy_page(p, copy, tail_slots);
    }
  }
  for (std::size_t i = s.pages.size(); i > keep_pages; --i) m.drop_ref(s.pages[i - 1]);
  s.pages.resize(keep_pages);
  if (copy != kNone) {
    m.drop_ref(s.pages.back());
    s.pages.back() = copy;
  }
  s.n_committed = n_keep;
  s.n_hashed = std::min(s.n_hashed, n_keep / kKvPageSize);
  s.chain_keys.resize(static_cast<std::size_t>(s.n_hashed));
  s.chain_key = s.n_hashed > 0 ? s.chain_keys.back() : s.root_key;
  return true;
}

std::span<const std::int32_t> KvCache::pages(SeqId seq_id) const {
  return impl_->seq(seq_id, "pages").pages;
}

std::int32_t KvCache::n_committed(SeqId seq_id) const { return impl_->seq(seq_id, "n_committed").n_committed; }

std::int32_t KvCache::n_available() const { return impl_->available(); }

KvCacheStats KvCache::stats() const {
  const Impl& m = *impl_;
  KvCacheStats st;
  st.n_pages = m.config.n_pages;
  st.n_used = m.n_used;
  st.n_cached = m.n_lru;
  st.n_free = static_cast<std::int32_t>(m.free_list.size());
  st.prefix_lookup_tokens = m.lookup_tokens;
  st.prefix_hit_tokens = m.hit_tokens;
  st.evictions = m.evictions;
  return st;
}

}  // namespace pie

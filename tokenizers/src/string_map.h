// Flat open-addressing hash maps for the hot lookups of the tokenizers: byte strings -> token id and
// (left id, right id) -> merge. Keys of StringMap are views into storage that outlives the map.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace tokenizers::detail {

inline std::uint64_t mix64(std::uint64_t k) {  // murmur3's finalizer
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

inline std::uint64_t hash_bytes(std::string_view s) {
  // 8-byte words folded through a multiply-xorshift: fast for the short keys of a vocabulary.
  std::uint64_t h = 0x9E3779B97F4A7C15ull * (s.size() + 1);
  const char* p = s.data();
  std::size_t n = s.size();
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    p += 8, n -= 8;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix64(h ^ w);
}

class StringMap {
 public:
  // Inserts or replaces (the last insert of a key wins, as llama.cpp's token_to_id).
  void insert(std::string_view key, std::int32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place(key, value);
  }
  const std::int32_t* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    const std::uint64_t h = hash_bytes(key);
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.value < 0) return nullptr;
      if (s.tag == tag && s.key.size() == key.size() && std::memcmp(s.key.data(), key.data(), key.size()) == 0) {
        return &s.value;
      }
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    std::string_view key;
    std::int32_t value = -1;
    std::uint32_t tag = 0;  // high half of the hash: most failed probes end without a memcmp
  };
  void place(std::string_view key, std::int32_t value) {
    const std::size_t mask = slots_.size() - 1;
    const std::uint64_t h = hash_bytes(key);
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.value < 0) {
        s.key = key, s.value = value, s.tag = static_cast<std::uint32_t>(h >> 32);
        ++size_;
        return;
      }
      if (s.key == key) {
        s.value = value;
        return;
      }
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.value >= 0) place(s.key, s.value);
    }
  }
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

// (left, right) -> (rank, result) for BPE merges.
class MergeMap {
 public:
  struct Entry {
    std::uint64_t key = ~0ull;
    std::uint32_t rank = 0;
    std::int32_t result = -1;
  };
  static std::uint64_t make_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  // Keeps the first (lowest-rank) entry of a pair.
  void insert(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t result) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place({make_key(left, right), rank, result});
  }
  const Entry* find(std::int32_t left, std::int32_t right) const {
    if (slots_.empty()) return nullptr;
    const std::uint64_t key = make_key(left, right);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == ~0ull) return nullptr;
    }
  }
  std::size_t size() const { return size_; }
  // Calls f(left, right, entry) for every merge, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : slots_) {
      if (e.key != ~0ull) f(static_cast<std::int32_t>(e.key >> 32), static_cast<std::int32_t>(e.key & 0xFFFFFFFFu), e);
    }
  }

 private:
  static std::uint64_t mix(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void place(const Entry& e) {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = mix(e.key) & mask;; i = (i + 1) & mask) {
      Entry& s = slots_[i];
      if (s.key == ~0ull) {
        s = e;
        ++size_;
        return;
      }
      if (s.key == e.key) return;
    }
  }
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Entry{});
    size_ = 0;
    for (const Entry& e : old) {
      if (e.key != ~0ull) place(e);
    }
  }
  std::vector<Entry> slots_;
  std::size_t size_ = 0;
};

}  // namespace tokenizers::detail

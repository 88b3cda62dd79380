// An index of interned keys by hash, for keys the caller stores itself (configurations, seed sets kept
// back to back): open addressing over dense entry ids, at most half full, no allocation per key and no
// copy of it. Entries are numbered in the order they are added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pse::detail {

class FlatIndex {
 public:
  explicit FlatIndex(std::size_t min_slots = kMinSlots) : slots_(min_slots, -1) {}

  // The entry with hash h for which matches(entry) holds, or -1.
  template <class Matches>
  std::int32_t find(std::uint64_t h, Matches matches) const {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t s = static_cast<std::size_t>(h) & mask; slots_[s] >= 0; s = (s + 1) & mask) {
      const std::int32_t e = slots_[s];
      if (hashes_[static_cast<std::size_t>(e)] == h && matches(e)) return e;
    }
    return -1;
  }
  // Adds an entry with hash h (absent: find gave -1); returns its id, the number of entries before.
  std::int32_t add(std::uint64_t h) {
    const auto e = static_cast<std::int32_t>(hashes_.size());
    hashes_.push_back(h);
    if (hashes_.size() * 2 > slots_.size()) {
      slots_.assign(slots_.size() * 2, -1);
      for (std::size_t k = 0; k < hashes_.size(); ++k) place(hashes_[k], static_cast<std::int32_t>(k));
    } else {
      place(h, e);
    }
    return e;
  }
  std::size_t size() const { return hashes_.size(); }
  void clear() {
    hashes_.clear();
    slots_.assign(kMinSlots, -1);
  }
  std::size_t memory_bytes() const { return slots_.capacity() * 4 + hashes_.capacity() * 8; }

 private:
  static constexpr std::size_t kMinSlots = 1024;  // a power of two
  void place(std::uint64_t h, std::int32_t e) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t s = static_cast<std::size_t>(h) & mask;
    while (slots_[s] >= 0) s = (s + 1) & mask;
    slots_[s] = e;
  }
  std::vector<std::int32_t> slots_;
  std::vector<std::uint64_t> hashes_;  // per entry
};

}  // namespace pse::detail

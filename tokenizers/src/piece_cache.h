// A per-thread cache of the ids of recently encoded pieces (words for BPE, ▁-words for SentencePiece):
// real text repeats its words, and a hit skips the merge loop. Thread-local, so the shared tokenizer
// stays immutable; keyed by the tokenizer's instance id, so a thread that switches tokenizers starts over.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "string_map.h"

namespace tokenizers::detail {

inline std::uint64_t next_instance_id() {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 48;
  static constexpr std::size_t kMaxEntries = 1 << 16;  // about 5 MB per thread at most

  static PieceCache& for_thread(std::uint64_t owner) {
    thread_local PieceCache cache;
    if (cache.owner_ != owner) {
      cache.clear();
      cache.owner_ = owner;
    }
    return cache;
  }

  // Appends the cached ids of `piece` to `out` and returns true on a hit.
  bool lookup(std::string_view piece, std::vector<std::int32_t>& out) const {
    const std::int32_t* e = index_.find(piece);
    if (e == nullptr) return false;
    const Entry& entry = entries_[static_cast<std::size_t>(*e)];
    out.insert(out.end(), ids_.begin() + entry.first, ids_.begin() + entry.first + entry.count);
    return true;
  }

  void store(std::string_view piece, const std::int32_t* ids, std::size_t n) {
    // Full: keep what is there (the frequent pieces come early) rather than thrash on a cyclic pattern.
    if (entries_.size() >= kMaxEntries) return;
    // Keys live in fixed-size blocks so the views in index_ stay valid as the cache grows.
    if (blocks_.empty() || blocks_.back().size() + piece.size() > blocks_.back().capacity()) {
      blocks_.emplace_back();
      blocks_.back().reserve(1 << 16);
    }
    std::string& block = blocks_.back();
    const std::size_t at = block.size();
    block.append(piece);
    entries_.push_back({static_cast<std::uint32_t>(ids_.size()), static_cast<std::uint32_t>(n)});
    ids_.insert(ids_.end(), ids, ids + n);
    index_.insert(std::string_view(block.data() + at, piece.size()), static_cast<std::int32_t>(entries_.size() - 1));
  }

 private:
  struct Entry {
    std::uint32_t first, count;
  };
  void clear() {
    index_ = StringMap();
    entries_.clear();
    ids_.clear();
    blocks_.clear();
  }
  std::uint64_t owner_ = 0;
  StringMap index_;
  std::vector<Entry> entries_;
  std::vector<std::int32_t> ids_;
  std::vector<std::string> blocks_;
};

}  // namespace tokenizers::detail

// The memory behind the KV cache: one anonymous mapping holding, per layer, a K pool and a V pool of
// [n_pages][16][n_kv_head][head_dim] elements. Anonymous pages read as zero and are committed on first
// write, so a large cache costs nothing until it is used (no up-front memset of gigabytes), unless the
// arena is made resident (a server's: committed at once, so its memory does not creep up as the cache fills).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pie::kv_detail {

class KvArena {
 public:
  // Maps n_layer * 2 pools of pool_bytes each, committed now when `resident`. Throws pie::Error when the
  // size overflows, exceeds the machine's physical memory, or the mapping (or its commit) fails.
  KvArena(std::int32_t n_layer, std::size_t pool_bytes, bool resident = false);
  ~KvArena();
  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  std::byte* k_pool(std::int32_t layer) const { return base_ + (2 * std::size_t(layer)) * pool_bytes_; }
  std::byte* v_pool(std::int32_t layer) const { return base_ + (2 * std::size_t(layer) + 1) * pool_bytes_; }
  std::size_t pool_bytes() const { return pool_bytes_; }
  std::size_t total_bytes() const { return total_bytes_; }

 private:
  void commit();
  std::byte* base_ = nullptr;
  std::size_t pool_bytes_ = 0;
  std::size_t total_bytes_ = 0;
};

}  // namespace pie::kv_detail

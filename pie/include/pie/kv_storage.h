// Where the KV cache's contents live: per layer, a K pool and a V pool of
// [n_pages][16][n_kv_head][head_dim] elements (the layout of pal/paged_kv.h) on one device. The backend
// that runs the forward pass owns it (host memory for the CPU, device memory for CUDA); the KV cache's
// bookkeeping (kv_cache.h) only decides which pages a sequence owns, and asks the storage to copy one when
// a fork or a truncation must not share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace pie {

inline constexpr std::int32_t kKvPageSize = 16;  // tokens per page (== pal::kPageSize)

struct KvCacheConfig {
  std::int32_t n_layer = 0;
  std::int32_t n_kv_head = 0;
  std::int32_t head_dim = 0;
  tensor::DType dtype = tensor::DType::f32;  // f32 or f16
  std::int32_t n_pages = 0;                  // pages per layer (K and V each)
  bool prefix_caching = true;
  // Commit the whole pool when it is made, instead of page by page on first write: a server's memory then
  // stays level as its prefix cache fills the pool (pages of finished requests are kept for reuse, so an
  // unreserved pool grows towards its full size over hours), and a pool the machine cannot hold fails at
  // start-up rather than a page fault mid-request.
  bool resident = false;
  // Bytes of K + V over all layers for one page.
  std::size_t page_bytes() const;
  // Bytes of one page of one pool (K or V of one layer).
  std::size_t pool_page_bytes() const;
  // Throws pie::Error naming the field: zero or negative sizes, a dtype other than f32 / f16, overflow.
  void validate() const;
};

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual const KvCacheConfig& config() const = 0;
  virtual tensor::Device device() const = 0;
  // The K and V pools of a layer, in the storage's device memory. Throws pie::Error on a bad layer.
  virtual void* k_pool(std::int32_t layer) = 0;
  virtual void* v_pool(std::int32_t layer) = 0;
  // Copies token slots [0, n_slots) of page `src` to page `dst`, K and V of every layer. Throws
  // pie::Error on a page or count out of range.
  virtual void copy_page(std::int32_t src, std::int32_t dst, std::int32_t n_slots) = 0;
};

// Host memory for the pools (the CPU backend's storage): one anonymous mapping, committed on first write,
// so a large cache costs nothing until it is used. Throws pie::Error on a bad config or when the memory
// cannot be had.
std::unique_ptr<KvStorage> make_host_kv_storage(const KvCacheConfig& config);

}  // namespace pie

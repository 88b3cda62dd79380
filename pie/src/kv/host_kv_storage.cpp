// The host KV storage: the pools in a KvArena (one anonymous mapping), page copies by memcpy.
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "kv/kv_arena.h"
#include "pie/error.h"
#include "pie/kv_storage.h"

namespace pie {

namespace {

std::size_t element_bytes(tensor::DType dtype) {
  switch (dtype) {
    case tensor::DType::f32: return 4;
    case tensor::DType::f16: return 2;
    default:
      throw Error("[kv_cache] dtype " + std::string(tensor::dtype_name(dtype)) + " is not supported (f32 or f16)");
  }
}

class HostKvStorage final : public KvStorage {
 public:
  explicit HostKvStorage(const KvCacheConfig& c)
      : config_(validated(c)), page_bytes_(c.pool_page_bytes()), arena_(c.n_layer, pool_bytes(c), c.resident) {}

  const KvCacheConfig& config() const override { return config_; }
  tensor::Device device() const override { return tensor::Device::cpu; }
  void* k_pool(std::int32_t layer) override { return arena_.k_pool(checked(layer, "k_pool")); }
  void* v_pool(std::int32_t layer) override { return arena_.v_pool(checked(layer, "v_pool")); }

  void copy_page(std::int32_t src, std::int32_t dst, std::int32_t n_slots) override {
    if (src < 0 || src >= config_.n_pages || dst < 0 || dst >= config_.n_pages || n_slots < 0 ||
        n_slots > kKvPageSize) {
      throw Error(fmt::format("[kv_cache] copy_page: pages {} -> {} ({} slots) outside {} pages of {} slots", src,
                              dst, n_slots, config_.n_pages, kKvPageSize));
    }
    const std::size_t bytes = page_bytes_ / kKvPageSize * static_cast<std::size_t>(n_slots);
    const std::size_t from = std::size_t(src) * page_bytes_, to = std::size_t(dst) * page_bytes_;
    for (std::int32_t l = 0; l < config_.n_layer; ++l) {
      std::memmove(arena_.k_pool(l) + to, arena_.k_pool(l) + from, bytes);
      std::memmove(arena_.v_pool(l) + to, arena_.v_pool(l) + from, bytes);
    }
  }

 private:
  static const KvCacheConfig& validated(const KvCacheConfig& c) {
    c.validate();
    return c;
  }
  static std::size_t pool_bytes(const KvCacheConfig& c) {
    std::size_t b = 0;
    if (__builtin_mul_overflow(c.pool_page_bytes(), static_cast<std::size_t>(c.n_pages), &b)) {
      throw Error("[kv_cache] pool of " + std::to_string(c.n_pages) + " pages: size overflows");
    }
    return b;
  }
  std::int32_t checked(std::int32_t layer, const char* op) const {
    if (layer < 0 || layer >= config_.n_layer) {
      throw Error(fmt::format("[kv_cache] {}: layer {} outside [0, {})", op, layer, config_.n_layer));
    }
    return layer;
  }

  KvCacheConfig config_;
  std::size_t page_bytes_;  // one page of one pool
  kv_detail::KvArena arena_;
};

}  // namespace

std::size_t KvCacheConfig::pool_page_bytes() const {
  std::size_t b = element_bytes(dtype);
  for (std::int64_t f : {std::int64_t{kKvPageSize}, std::int64_t{n_kv_head}, std::int64_t{head_dim}}) {
    if (f < 0 || __builtin_mul_overflow(b, static_cast<std::size_t>(f), &b)) {
      throw Error("[kv_cache] page size overflows");
    }
  }
  return b;
}

std::size_t KvCacheConfig::page_bytes() const {
  std::size_t b = pool_page_bytes();
  if (__builtin_mul_overflow(b, static_cast<std::size_t>(n_layer < 0 ? 0 : n_layer) * 2, &b)) {
    throw Error("[kv_cache] page size overflows");
  }
  return b;
}

void KvCacheConfig::validate() const {
  auto positive = [](const char* name, std::int32_t v) {
    if (v <= 0) throw Error(std::string("[kv_cache] ") + name + " must be > 0, got " + std::to_string(v));
  };
  positive("n_layer", n_layer);
  positive("n_kv_head", n_kv_head);
  positive("head_dim", head_dim);
  positive("n_pages", n_pages);
  element_bytes(dtype);
  page_bytes();
}

std::unique_ptr<KvStorage> make_host_kv_storage(const KvCacheConfig& config) {
  return std::make_unique<HostKvStorage>(config);
}

}  // namespace pie

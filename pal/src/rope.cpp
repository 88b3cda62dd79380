// Fast RoPE: cos/sin tables per configuration (computed in double, stored f32, cached and shared), and the
// rotation as straight loops over contiguous table rows (the compiler vectorizes the NeoX halves).
#include <fmt/format.h>
#include <tensor/thread_pool.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>

#include "pal/error.h"
#include "pal/rope.h"

namespace pal {

RopeTable::RopeTable(const RopeConfig& config, std::int32_t n_positions)
    : config_(config), n_positions_(n_positions) {
  const std::vector<double> inv = rope_inv_freq(config);
  const double af = rope_attention_factor(config);
  if (n_positions < 1) throw Error(fmt::format("[pal::RopeTable] n_positions {} must be >= 1", n_positions));
  const std::size_t half = inv.size();
  cos_.resize(static_cast<std::size_t>(n_positions) * half);
  sin_.resize(cos_.size());
  for (std::int32_t p = 0; p < n_positions; ++p) {
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv[i];
      cos_[p * half + i] = static_cast<float>(std::cos(angle) * af);
      sin_[p * half + i] = static_cast<float>(std::sin(angle) * af);
    }
  }
}

std::shared_ptr<const RopeTable> rope_table(const RopeConfig& config, std::int32_t n_positions) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<const RopeTable>> cache;  // most recently used last
  constexpr std::size_t kMaxEntries = 32;
  validate_rope(config);
  if (n_positions < 1) throw Error(fmt::format("[pal::rope_table] n_positions {} must be >= 1", n_positions));
  std::lock_guard<std::mutex> lock(mutex);
  std::int32_t size = n_positions;
  for (std::size_t i = 0; i < cache.size(); ++i) {
    if (!(cache[i]->config() == config)) continue;
    std::shared_ptr<const RopeTable> hit = cache[i];
    cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(i));
    if (hit->n_positions() >= n_positions) {
      cache.push_back(hit);
      return hit;
    }
    const std::int64_t doubled = 2 * static_cast<std::int64_t>(hit->n_positions());
    size = static_cast<std::int32_t>(std::min<std::int64_t>(std::max<std::int64_t>(n_positions, doubled),
                                                             INT32_MAX));
    break;
  }
  auto table = std::make_shared<const RopeTable>(config, size);
  if (cache.size() >= kMaxEntries) cache.erase(cache.begin());
  cache.push_back(table);
  return table;
}

namespace {

void rotate_neox(float* v, const float* cs, const float* sn, int half) {
  float* a = v;
  float* b = v + half;
  for (int i = 0; i < half; ++i) {
    const float x0 = a[i];
    const float x1 = b[i];
    a[i] = x0 * cs[i] - x1 * sn[i];
    b[i] = x1 * cs[i] + x0 * sn[i];
  }
}

void rotate_gptj(float* v, const float* cs, const float* sn, int half) {
  for (int i = 0; i < half; ++i) {
    const float x0 = v[2 * i];
    const float x1 = v[2 * i + 1];
    v[2 * i] = x0 * cs[i] - x1 * sn[i];
    v[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
  }
}

}  // namespace

void rope(const RopeTable& table, const std::int32_t* positions, float* x, std::int64_t n_tokens,
          std::int32_t n_heads, tensor::ThreadPool* pool) {
  if (n_tokens < 0 || n_heads < 0) {
    throw Error(fmt::format("[pal::rope] n_tokens {} and n_heads {} must be >= 0", n_tokens, n_heads));
  }
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    if (positions[t] < 0 || positions[t] >= table.n_positions()) {
      throw Error(fmt::format("[pal::rope] token {}: position {} outside the table's [0, {})", t, positions[t],
                              table.n_positions()));
    }
  }
  const RopeConfig& c = table.config();
  const int half = c.rotary_dim / 2;
  auto body = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const float* cs = table.cos_row(positions[t]);
      const float* sn = table.sin_row(positions[t]);
      for (std::int32_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * c.head_dim;
        if (c.layout == RopeLayout::neox) {
          rotate_neox(v, cs, sn, half);
        } else {
          rotate_gptj(v, cs, sn, half);
        }
      }
    }
  };
  // Rotating one token's heads is ~n_heads * head_dim flops: split only batches worth a thread.
  if (pool != nullptr && n_tokens * n_heads * c.head_dim >= (1 << 15)) {
    pool->parallel_for(n_tokens, body, std::max<std::int64_t>(1, (1 << 14) / (n_heads * c.head_dim + 1)));
  } else {
    body(0, n_tokens);
  }
}

void rope(const RopeConfig& config, const std::int32_t* positions, float* x, std::int64_t n_tokens,
          std::int32_t n_heads, tensor::ThreadPool* pool) {
  std::int32_t max_pos = 0;
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    if (positions[t] < 0) throw Error(fmt::format("[pal::rope] token {}: position {} is negative", t, positions[t]));
    max_pos = std::max(max_pos, positions[t]);
  }
  if (max_pos == INT32_MAX) throw Error(fmt::format("[pal::rope] position {} is too large", max_pos));
  const std::shared_ptr<const RopeTable> table = rope_table(config, max_pos + 1);
  rope(*table, positions, x, n_tokens, n_heads, pool);
}

}  // namespace pal

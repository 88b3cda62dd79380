// Host side of the KV writes: RoPE + append, plain append, page copies.
#include "pal/cuda/kv_write_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "launch_cache.h"
#include "pal/error.h"
#include "tensor/cuda/memory_pool.h"

namespace pal::cuda {
namespace {

// Mirrors RopeAppendParams in kv_write.cu.
struct RopeAppendParams {
  float* q;
  const float* k;
  const float* v;
  void* k_pages;
  void* v_pages;
  const std::int32_t* positions;
  const std::int32_t* slots;
  const double* inv_freq;
  double attention_factor;
  std::int32_t n_tokens;
  std::int32_t n_q_heads;
  std::int32_t n_kv_heads;
  std::int32_t rotary_dim;
  std::int32_t gptj;
};

void validate_kv(const KvWriteArgs& kv, const char* op) {
  if (kv.dtype != tensor::DType::f16 && kv.dtype != tensor::DType::bf16 && kv.dtype != tensor::DType::f32) {
    throw Error(fmt::format("[{}] KV dtype {} is not supported on CUDA (f32, f16 or bf16)", op,
                            tensor::dtype_name(kv.dtype)));
  }
  if (kv.head_dim != 64 && kv.head_dim != 128 && kv.head_dim != 256) {
    throw Error(fmt::format("[{}] head_dim {} is not supported on CUDA (64, 128 or 256)", op, kv.head_dim));
  }
  if (kv.n_kv_heads <= 0) throw Error(fmt::format("[{}] n_kv_heads {} must be positive", op, kv.n_kv_heads));
  if (kv.k_pages == nullptr || kv.v_pages == nullptr) throw Error(fmt::format("[{}] a page pool is null", op));
}

std::vector<std::string> options(const KvWriteArgs& kv) {
  if (kv.dtype == tensor::DType::f32) return {"-DHEAD_DIM=" + std::to_string(kv.head_dim), "-DKV_F32=1"};
  return {"-DHEAD_DIM=" + std::to_string(kv.head_dim),
          std::string("-DKV_BF16=") + (kv.dtype == tensor::DType::bf16 ? "1" : "0")};
}

// The inverse-frequency table of a configuration on the device, uploaded once per configuration.
const double* device_inv_freq(const RopeConfig& config) {
  static std::mutex mutex;
  static std::vector<std::pair<RopeConfig, tensor::cuda::DeviceBuffer>>* tables =
      new std::vector<std::pair<RopeConfig, tensor::cuda::DeviceBuffer>>();  // lives until exit
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [c, buf] : *tables) {
    if (c == config) return buf.as<const double>();
  }
  const std::vector<double> inv = rope_inv_freq(config);
  tensor::cuda::DeviceBuffer buf = tensor::cuda::MemoryPool::global().allocate(inv.size() * sizeof(double));
  buf.copy_from_host(inv.data(), inv.size() * sizeof(double));
  const double* ptr = buf.as<const double>();
  tables->emplace_back(config, std::move(buf));
  return ptr;
}

void launch_append(const KvWriteArgs& kv, RopeAppendParams& p, const tensor::cuda::Stream* stream) {
  if (p.n_tokens == 0) return;
  void* argv[] = {&p};
  // Four pair slots per thread with 16-byte accesses when the rotary dims allow it.
  const char* entry = p.rotary_dim % 8 == 0 ? "rope_append_vec" : "rope_append";
  detail::kernel("kv_write.cu", options(kv), entry)
      .launch({static_cast<unsigned>(p.n_tokens), 1, 1}, {256, 1, 1}, 0, stream, argv);
}

}  // namespace

void rope_append(const RopeConfig& config, const KvWriteArgs& kv, float* q, const float* k, const float* v,
                 const std::int32_t* positions, const std::int32_t* slots, std::int32_t n_tokens,
                 std::int32_t n_q_heads, const tensor::cuda::Stream* stream) {
  constexpr const char* op = "pal::cuda::rope_append";
  validate_kv(kv, op);
  validate_rope(config);
  if (config.head_dim != kv.head_dim) {
    throw Error(fmt::format("[{}] RoPE head_dim {} differs from the cache's head_dim {}", op, config.head_dim,
                            kv.head_dim));
  }
  if (n_tokens < 0 || n_q_heads < 0) {
    throw Error(fmt::format("[{}] n_tokens {} and n_q_heads {} must be >= 0", op, n_tokens, n_q_heads));
  }
  if (n_tokens > 0 && (k == nullptr || v == nullptr || positions == nullptr || slots == nullptr ||
                       (q == nullptr && n_q_heads > 0))) {
    throw Error(fmt::format("[{}] q, k, v, positions or slots is null", op));
  }
  RopeAppendParams p{n_q_heads > 0 ? q : nullptr, k, v, kv.k_pages, kv.v_pages, positions, slots,
                     device_inv_freq(config), rope_attention_factor(config), n_tokens, n_q_heads,
                     kv.n_kv_heads, config.rotary_dim, config.layout == RopeLayout::gptj ? 1 : 0};
  launch_append(kv, p, stream);
}

void kv_append(const KvWriteArgs& kv, const float* k, const float* v, const std::int32_t* slots,
               std::int32_t n_tokens, const tensor::cuda::Stream* stream) {
  constexpr const char* op = "pal::cuda::kv_append";
  validate_kv(kv, op);
  if (n_tokens < 0) throw Error(fmt::format("[{}] n_tokens {} is negative", op, n_tokens));
  if (n_tokens > 0 && (k == nullptr || v == nullptr || slots == nullptr)) {
    throw Error(fmt::format("[{}] k, v or slots is null", op));
  }
  // positions are read only for the rotation; with rotary_dim 0 the kernel reads slots alone, but the
  // position load at the top of the kernel still needs a valid address: reuse slots.
  RopeAppendParams p{nullptr, k, v, kv.k_pages, kv.v_pages, slots, slots, nullptr, 1.0, n_tokens, 0,
                     kv.n_kv_heads, 0, 0};
  launch_append(kv, p, stream);
}

void copy_pages(const KvWriteArgs& kv, const std::int32_t* src_pages, const std::int32_t* dst_pages,
                std::int32_t n_copies, const tensor::cuda::Stream* stream) {
  constexpr const char* op = "pal::cuda::copy_pages";
  validate_kv(kv, op);
  if (n_copies < 0) throw Error(fmt::format("[{}] n_copies {} is negative", op, n_copies));
  if (n_copies == 0) return;
  if (src_pages == nullptr || dst_pages == nullptr) throw Error(fmt::format("[{}] a page list is null", op));
  const long long element_bytes = kv.dtype == tensor::DType::f32 ? 4 : 2;
  long long page_vec16 = 16LL * kv.n_kv_heads * kv.head_dim * element_bytes / 16;
  void* kp = kv.k_pages;
  void* vp = kv.v_pages;
  void* argv[] = {&kp, &vp, &src_pages, &dst_pages,
                  &n_copies, &page_vec16};
  const unsigned chunks = static_cast<unsigned>(std::min<long long>(8, (page_vec16 + 255) / 256));
  detail::kernel("kv_write.cu", options(kv), "copy_pages")
      .launch({static_cast<unsigned>(n_copies), chunks, 1}, {256, 1, 1}, 0, stream, argv);
}

}  // namespace pal::cuda

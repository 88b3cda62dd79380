#include "gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "cuda_sources.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/jit.h"

namespace pie::cuda {
namespace {

namespace tc = tensor::cuda;
using tensor::DType;

// Token thresholds, measured on an H100 against the backend's matvec kernels (docs/cuda-backend.md,
// "Tensor-core products"; cuda_gemm_test's DISABLED_ProductTimes on [4096, 4096] and [14336,
// 4096]): from these many tokens a product through cuBLAS beats them. f16, bf16: 1.2-3.2x at 16
// tokens, 0.8-1.5x at 8.
constexpr std::int32_t kMinTokensFloat = 16;
// q4_K, q5_K, q6_K: 1.5-1.6x at 8 tokens, 0.8-0.9x at 4 (their kernels read the activations in
// f32).
constexpr std::int32_t kMinTokensKQuant = 8;
// q8_0, q4_0, q4_1 (8-bit integer products, the weight expanded to f16 first): 1.5-1.9x at 64
// tokens, 0.9-1.0x at 32.
constexpr std::int32_t kMinTokensDp4a = 64;
// Cutting a product's sum (CudaOptions::gemm_splits, off by default): the output tile assumed of
// cuBLAS (its large kernels' 128 x 128) and the fewest elements a part sums.
constexpr std::int64_t kTile = 128;
constexpr std::int64_t kMinPart = 256;
// A slab of expanded rows: a whole [14336, 4096] matrix of an 8B model in f16. Measured on an H100
// at batch 64 (Q8_0, 8B-shaped): a step's device time 21.4 ms with slabs of a third of L2 (16 MiB,
// each slab's product too small to fill the GPU, and eight launches where one does), 17.9 ms with
// these.
constexpr std::size_t kSlabBytes = std::size_t{128} << 20;

const tc::Kernel& kernel(const std::string& entry) {
  static std::mutex mutex;
  static std::map<std::string, tc::Kernel> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = kernels.find(entry); it != kernels.end()) return it->second;
  const tc::Module& module = tc::load_module("gemm_ops.cu", kernel_text("gemm_ops.cu"), {});
  return kernels.emplace(entry, module.kernel(entry.c_str())).first->second;
}

// The dequantize_f16_* entry of a block type, or "" for a type that is not expanded.
const char* dequantize_entry(DType t) {
  switch (t) {
    case DType::q8_0:
      return "dequantize_f16_q8_0";
    case DType::q4_0:
      return "dequantize_f16_q4_0";
    case DType::q4_1:
      return "dequantize_f16_q4_1";
    case DType::q4_K:
      return "dequantize_f16_q4_K";
    case DType::q5_K:
      return "dequantize_f16_q5_K";
    case DType::q6_K:
      return "dequantize_f16_q6_K";
    default:
      return "";
  }
}

unsigned grid_for(long long n, unsigned threads) {
  return static_cast<unsigned>(std::clamp<long long>((n + threads - 1) / threads, 1, 65535));
}

void log_unavailable(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "orchard: cuBLAS not used (%s): the CUDA products run on the built-in kernels at "
                 "every batch size\n",
                 why.c_str());
  });
}

}  // namespace

GemmProducts::GemmProducts(const tc::Stream& stream, const CudaOptions& options, Grow grow)
    : stream_(stream),
      min_tokens_override_(options.gemm_min_tokens),
      max_splits_(options.gemm_splits),
      grow_(std::move(grow)) {
  if (options.batch_invariant) return;
  const std::string why = tc::blas_unavailable_reason();
  if (!why.empty()) {
    log_unavailable(why);
    return;
  }
  try {
    blas_ = std::make_unique<tc::Blas>(stream_);
  } catch (const tc::CudaError& e) {
    log_unavailable(e.what());
    return;
  }
  n_sms_ = tc::device_info().n_sms;
  // Developers' knobs for measuring in the engine (gemm.h).
  if (const char* env = std::getenv("ORCHARD_GEMM_SPLITS"); env != nullptr && max_splits_ == 0) {
    max_splits_ = std::max(0, std::atoi(env));
  }
  if (const char* env = std::getenv("ORCHARD_GEMM_SLAB_MB");
      env != nullptr && options.gemm_slab_bytes == 0) {
    slab_bytes_ = static_cast<std::size_t>(std::max(1, std::atoi(env))) << 20;
    return;
  }
  slab_bytes_ = options.gemm_slab_bytes > 0 ? options.gemm_slab_bytes : kSlabBytes;
}

GemmProducts::~GemmProducts() = default;

std::int32_t GemmProducts::min_tokens(DType t) const {
  if (!blas_) return 0;
  const bool is_float = t == DType::f16 || t == DType::bf16;
  if (!is_float && *dequantize_entry(t) == '\0') return 0;
  if (min_tokens_override_ > 0) return min_tokens_override_;
  if (is_float) return kMinTokensFloat;
  const bool dp4a = t == DType::q8_0 || t == DType::q4_0 || t == DType::q4_1;
  return dp4a ? kMinTokensDp4a : kMinTokensKQuant;
}

int GemmProducts::splits(std::int64_t n_out, std::int64_t n_tokens, std::int64_t n_in) const {
  if (max_splits_ < 2) return 1;
  const std::int64_t tiles = ((n_out + kTile - 1) / kTile) * ((n_tokens + kTile - 1) / kTile);
  const std::int64_t want =
      std::min<std::int64_t>(n_sms_ / std::max<std::int64_t>(tiles, 1), max_splits_);
  // The largest count not above it whose parts are whole 16-byte runs of at least kMinPart.
  for (std::int64_t s = want; s > 1; --s) {
    if (n_in % s == 0 && (n_in / s) % 8 == 0 && n_in / s >= kMinPart) return static_cast<int>(s);
  }
  return 1;
}

void GemmProducts::product(tc::GemmInput type, const void* w, std::int64_t ldw, const void* x,
                           std::int64_t n_in, float* y, std::int64_t ldy, std::int64_t n_out,
                           std::int64_t n_tokens) {
  const int parts = splits(n_out, n_tokens, n_in);
  if (parts == 1) {
    blas_->gemm(type, w, ldw, x, n_in, y, ldy, n_out, n_tokens, n_in);
    return;
  }
  tc::DeviceBuffer& buf =
      grow_(partials_, static_cast<std::size_t>(parts * n_tokens * n_out) * sizeof(float));
  float* p = buf.as<float>();
  blas_->gemm_split_k(type, w, ldw, x, n_in, p, n_out, n_tokens, n_in, parts);
  const float* pp = p;
  int np = parts;
  const bool by4 = n_out % 4 == 0 && ldy % 4 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  long long no = by4 ? n_out / 4 : n_out, nt = n_tokens, ly = ldy;
  void* args[] = {&pp, &np, &no, &nt, &y, &ly};
  kernel(by4 ? "sum_parts4" : "sum_parts")
      .launch({grid_for(no * n_tokens, 256), 1, 1}, {256, 1, 1}, 0, &stream_, args);
}

const void* GemmProducts::converted(const Rows& in, tc::GemmInput type) {
  if (converted_ && converted_type_ == type) return input_.as<const void>();
  const long long n = in.n_rows * in.n_cols;
  tc::DeviceBuffer& b = grow_(input_, static_cast<std::size_t>(n) * 2);
  const float* x = in.data;
  long long n4 = n / 4;
  void* out = b.as<void>();
  void* args[] = {&x, &n4, &out};
  kernel(type == tc::GemmInput::f16 ? "to_f16" : "to_bf16")
      .launch({grid_for(n4, 256), 1, 1}, {256, 1, 1}, 0, &stream_, args);
  converted_ = true;
  converted_type_ = type;
  return b.as<const void>();
}

bool GemmProducts::project(const Rows& in, const Projection& p) {
  const Weight& w = *p.weight;
  const std::int32_t threshold = min_tokens(w.dtype());
  if (threshold == 0 || in.n_rows < threshold) return false;
  const std::int64_t n_out = w.dim(0), n_in = w.dim(1), n_tokens = in.n_rows;
  // The conversion takes 4 floats at a time, the expansion 32-element chunks in 16-byte stores.
  if (in.n_cols != n_in || n_in % 32 != 0 || p.out.n_cols < n_out) return false;
  const auto* wp = reinterpret_cast<const std::uint8_t*>(w.data());
  const std::int64_t row_bytes = w.strides().bytes[0];
  float* y = p.out.data;
  if (w.dtype() == DType::f16 || w.dtype() == DType::bf16) {
    const tc::GemmInput type = w.dtype() == DType::f16 ? tc::GemmInput::f16 : tc::GemmInput::bf16;
    if (row_bytes % 2 != 0) return false;
    const void* x = converted(in, type);
    product(type, wp, row_bytes / 2, x, n_in, y, p.out.n_cols, n_out, n_tokens);
    return true;
  }
  // A block type: slabs of rows expanded to f16, each slab's product by cuBLAS.
  const void* x = converted(in, tc::GemmInput::f16);
  const std::int64_t slab_rows = std::max<std::int64_t>(
      64, static_cast<std::int64_t>(slab_bytes_ / (static_cast<std::size_t>(n_in) * 2)) / 64 * 64);
  const std::int64_t rows = std::min(slab_rows, n_out);
  tc::DeviceBuffer& slab = grow_(slab_, static_cast<std::size_t>(rows * n_in) * 2);
  const tc::Kernel& expand = kernel(dequantize_entry(w.dtype()));
  // Elements a thread expands: 8 for the 32-element block types, a 32-element chunk for the
  // K-quants.
  const bool small_blocks =
      w.dtype() == DType::q8_0 || w.dtype() == DType::q4_0 || w.dtype() == DType::q4_1;
  const std::int64_t per_thread = small_blocks ? 8 : 32;
  for (long long first = 0; first < n_out; first += rows) {
    int n_rows = static_cast<int>(std::min<std::int64_t>(rows, n_out - first));
    long long rb = row_bytes;
    int ni = static_cast<int>(n_in);
    void* out = slab.as<void>();
    void* args[] = {&wp, &rb, &ni, &first, &n_rows, &out};
    expand.launch({grid_for(static_cast<long long>(n_rows) * (n_in / per_thread), 256), 1, 1},
                  {256, 1, 1}, 0, &stream_, args);
    product(tc::GemmInput::f16, out, n_in, x, n_in, y + first, p.out.n_cols, n_rows, n_tokens);
  }
  return true;
}

}  // namespace pie::cuda

// Host side of the CUDA bitmask kernel.
#include "kernels/cuda/bitmask_cuda.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "kernels/error.h"

namespace kernels::cuda {

void apply_bitmask(float* logits, const std::uint32_t* mask, std::int32_t n_rows, std::int32_t vocab,
                   std::int32_t mask_words, std::int32_t n_mask_tokens, const tensor::cuda::Stream* stream) {
  const std::string op = "[kernels::cuda::apply_bitmask] ";
  if (n_rows < 0 || vocab < 0 || mask_words < 0 || n_mask_tokens < 0) {
    throw ShapeError(op + "n_rows " + std::to_string(n_rows) + ", vocab " + std::to_string(vocab) +
                     ", mask_words " + std::to_string(mask_words) + ", n_mask_tokens " +
                     std::to_string(n_mask_tokens) + ": none may be negative");
  }
  const std::int64_t covered = std::min<std::int64_t>(vocab, n_mask_tokens);
  if (static_cast<std::int64_t>(mask_words) * 32 < covered) {
    throw ShapeError(op + std::to_string(mask_words) + " mask words cover " + std::to_string(mask_words * 32LL) +
                     " tokens, fewer than the " + std::to_string(covered) + " the logits and mask share");
  }
  if (n_rows == 0 || vocab == 0) return;
  if (logits == nullptr || (mask == nullptr && covered > 0)) throw ShapeError(op + "logits or mask is null");

  static std::once_flag once;
  static tensor::cuda::Kernel kernel;
  std::call_once(once, [] {
    const auto& src = embedded_source("bitmask.cu");
    kernel = tensor::cuda::load_module(src.name, src.text, {}).kernel("apply_bitmask");
  });
  const unsigned blocks = static_cast<unsigned>((vocab + 8LL * 256 - 1) / (8LL * 256));
  void* argv[] = {&logits, &mask, &n_rows, &vocab, &mask_words, &n_mask_tokens};
  kernel.launch({blocks, static_cast<unsigned>(n_rows), 1}, {256, 1, 1}, 0, stream, argv);
}

}  // namespace kernels::cuda

// The CUDA backend's kernel sources, embedded in the binary (generated from pie/src/backend/cuda/*.cu by
// tools/embed_sources.cmake) and compiled at run time by NVRTC. Private to the backend and its tests.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tensor/cuda/jit.h"

namespace pie::cuda {

std::span<const tensor::cuda::EmbeddedSource> embedded_sources();
// Throws tensor::cuda::CudaError when there is no source of that name.
const tensor::cuda::EmbeddedSource& embedded_source(std::string_view name);
// What NVRTC compiles for a source: the product sources (decoder_ops.cu, gemm_ops.cu, matvec_mma_ops.cu)
// after the text of weight_blocks.cuh they share, any other source as it is. Throws as embedded_source().
std::string kernel_text(std::string_view name);

}  // namespace pie::cuda

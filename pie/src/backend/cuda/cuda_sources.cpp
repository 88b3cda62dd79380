#include "cuda_sources.h"

namespace pie::cuda {

std::string kernel_text(std::string_view name) {
  const tensor::cuda::EmbeddedSource& source = embedded_source(name);
  if (name != "decoder_ops.cu" && name != "gemm_ops.cu" && name != "matvec_mma_ops.cu" &&
      name != "mmq_ops.cu") return std::string(source.text);
  std::string text(embedded_source("weight_blocks.cuh").text);
  text += "\n#line 1 \"" + std::string(name) + "\"\n";
  text += source.text;
  return text;
}

}  // namespace pie::cuda

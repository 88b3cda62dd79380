// Compiled-kernel cache of the pal CUDA launchers and the embedded source text.
#include "launch_cache.h"

#include <map>
#include <mutex>

#include "pal/cuda/attention_cuda.h"
#include "tensor/cuda/device.h"

namespace pal::cuda {

std::string kernel_text(const std::string& source) {
  std::string text(embedded_source("cuda_common.cuh").text);
  text += "\n#line 1 \"" + source + "\"\n";
  text += embedded_source(source).text;
  return text;
}

namespace detail {

tensor::cuda::Kernel kernel(const std::string& source, const std::vector<std::string>& options, const char* entry,
                            int max_dynamic_shared) {
  static std::mutex mutex;
  static std::map<std::string, tensor::cuda::Kernel> cache;
  std::string key = source + '|' + entry;
  for (const auto& o : options) key += '|' + o;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const std::string text = kernel_text(source);
  const tensor::cuda::Module& module = tensor::cuda::load_module(source, text, options);
  tensor::cuda::Kernel k = module.kernel(entry);
  if (max_dynamic_shared > 0) k.set_max_dynamic_shared(max_dynamic_shared);
  cache.emplace(key, k);
  return k;
}

int n_sms() { return tensor::cuda::device_info().n_sms; }

}  // namespace detail
}  // namespace pal::cuda

// Device buffers for the GPU tests: inputs uploaded, outputs poisoned with NaN before a kernel writes them
// (a value it leaves unwritten then fails the comparison), results read back.
#pragma once

#include <cstddef>
#include <vector>

#include "tensor/cuda/memory_pool.h"

namespace orchard::testing {

inline tensor::cuda::DeviceBuffer upload(const void* data, std::size_t bytes) {
  tensor::cuda::DeviceBuffer b = tensor::cuda::MemoryPool::global().allocate(bytes);
  b.copy_from_host(data, bytes);
  return b;
}

inline tensor::cuda::DeviceBuffer device_floats(const std::vector<float>& host) {
  return upload(host.data(), host.size() * sizeof(float));
}

// n floats, every byte 0xFF (a NaN).
inline tensor::cuda::DeviceBuffer poisoned(std::size_t n) {
  tensor::cuda::DeviceBuffer b = tensor::cuda::MemoryPool::global().allocate(n * sizeof(float));
  b.fill_bytes(0xFF);
  return b;
}

inline std::vector<float> to_host(const tensor::cuda::DeviceBuffer& b, std::size_t n) {
  std::vector<float> v(n);
  b.copy_to_host(v.data(), n * sizeof(float));
  return v;
}

}  // namespace orchard::testing

// Which backend a forward pass runs on: the `--device` request resolved against what this build and this
// machine offer, with the reason the log gives.
#include <fmt/format.h>

#include "pie/backend.h"
#include "pie/error.h"
#include "tensor/cuda/device.h"

namespace pie {

DeviceRequest parse_device_request(std::string_view text) {
  if (text == "auto") return DeviceRequest::automatic;
  if (text == "cpu") return DeviceRequest::cpu;
  if (text == "cuda") return DeviceRequest::cuda;
  throw Error(fmt::format("[backend] device \"{}\": expected cpu, cuda or auto", text));
}

DeviceChoice choose_device(DeviceRequest request) {
  if (request == DeviceRequest::cpu) return {tensor::Device::cpu, "asked for (--device cpu)"};
  const std::string why_not = tensor::cuda::unavailable_reason();
  if (request == DeviceRequest::cuda) {
    if (!why_not.empty()) throw Error(fmt::format("[backend] --device cuda: CUDA cannot be used here: {}", why_not));
    return {tensor::Device::cuda, fmt::format("asked for (--device cuda): {}", tensor::cuda::device_info().name)};
  }
  if (!why_not.empty()) return {tensor::Device::cpu, fmt::format("no usable GPU: {}", why_not)};
  return {tensor::Device::cuda, fmt::format("a usable GPU: {}", tensor::cuda::device_info().name)};
}

std::unique_ptr<Backend> make_backend(tensor::Device device, std::int32_t n_threads, const CudaOptions& cuda) {
  if (device == tensor::Device::cuda) return make_cuda_backend(0, cuda);
  return make_cpu_backend(n_threads);
}

#if !ORCHARD_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int, const CudaOptions&) {
  throw Error(fmt::format("[backend] CUDA cannot be used here: {}", tensor::cuda::unavailable_reason()));
}
#endif

}  // namespace pie

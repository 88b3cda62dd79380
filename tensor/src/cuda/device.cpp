// Driver loading, device properties and the primary context.
#include "tensor/cuda/device.h"

#include "driver_api.h"

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if ORCHARD_HAVE_CUDA
#include <dlfcn.h>
#endif

namespace tensor::cuda {
namespace detail {

void throw_built_without_cuda(const char* op) {
  throw CudaUnavailable(std::string("[") + op +
                        "] built without CUDA: this Orchard was configured without the CUDA toolkit "
                        "(reconfigure with the toolkit installed and -DORCHARD_CUDA=ON)");
}

#if ORCHARD_HAVE_CUDA
namespace {

#define ORCHARD_STR2(x) #x
#define ORCHARD_STR(x) ORCHARD_STR2(x)

struct Loaded {
  DriverApi api;
  std::string error;  // why it could not be loaded; "" when it was
};

Loaded load_driver() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    out.error = std::string("no CUDA driver (") + (why ? why : "libcuda.so.1 not found") + ")";
    return out;
  }
  // The macros of cuda.h map e.g. cuMemAlloc to cuMemAlloc_v2; ORCHARD_STR expands them so that the
  // versioned symbol the header's prototype belongs to is the one looked up.
#define ORCHARD_CU_LOAD(fn)                                                                    \
  out.api.fn = reinterpret_cast<decltype(out.api.fn)>(dlsym(lib, ORCHARD_STR(fn)));           \
  if (out.api.fn == nullptr) {                                                                 \
    out.error = std::string("CUDA driver too old: libcuda.so.1 has no ") + ORCHARD_STR(fn);   \
    return out;                                                                                \
  }
  ORCHARD_CU_FUNCTIONS(ORCHARD_CU_LOAD)
#undef ORCHARD_CU_LOAD
  const CUresult init = out.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    out.api.cuGetErrorName(init, &name);
    out.error = std::string("no usable CUDA device (cuInit: ") + (name ? name : "error") + ")";
    return out;
  }
  int count = 0;
  if (out.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    out.error = "no CUDA device";
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load_driver();
  return instance;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw CudaUnavailable("[tensor::cuda] " + l.error);
  return l.api;
}

void check(CUresult status, const char* op, const std::string& what) {
  if (status == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& d = loaded().api;
  if (d.cuGetErrorName) d.cuGetErrorName(status, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(status, &text);
  throw DriverError(std::string("[") + op + "] " + what + ": " + (name ? name : "CUDA error") + " (" +
                        (text ? text : "unknown") + ")",
                    static_cast<int>(status));
}
#endif

}  // namespace detail

bool built_with_cuda() { return ORCHARD_HAVE_CUDA != 0; }

#if ORCHARD_HAVE_CUDA

std::string unavailable_reason() { return detail::loaded().error; }

namespace {

constexpr int kMaxDevices = 64;

struct DeviceSlot {
  std::once_flag once;
  CUcontext context = nullptr;
  DeviceInfo info;
};

std::array<DeviceSlot, kMaxDevices>& slots() {
  static std::array<DeviceSlot, kMaxDevices> s;
  return s;
}

DeviceSlot& slot(int ordinal) {
  const auto& d = detail::driver();
  int count = 0;
  detail::check(d.cuDeviceGetCount(&count), "tensor::cuda::device", "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count || ordinal >= kMaxDevices) {
    throw DriverError("[tensor::cuda::device] device ordinal " + std::to_string(ordinal) + " is outside [0, " +
                          std::to_string(count) + ")",
                      CUDA_ERROR_INVALID_DEVICE);
  }
  DeviceSlot& s = slots()[static_cast<std::size_t>(ordinal)];
  std::call_once(s.once, [&] {
    CUdevice dev = 0;
    detail::check(d.cuDeviceGet(&dev, ordinal), "tensor::cuda::device", "cuDeviceGet");
    detail::check(d.cuDevicePrimaryCtxRetain(&s.context, dev), "tensor::cuda::device", "cuDevicePrimaryCtxRetain");
    DeviceInfo& info = s.info;
    info.ordinal = ordinal;
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof(name), dev);
    info.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      detail::check(d.cuDeviceGetAttribute(&v, a, dev), "tensor::cuda::device", "cuDeviceGetAttribute");
      return v;
    };
    info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    info.n_sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info.l2_bytes = static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
    info.max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    std::size_t total = 0;
    d.cuDeviceTotalMem(&total, dev);
    info.total_memory = total;
    d.cuDriverGetVersion(&info.driver_version);
  });
  if (s.context == nullptr) {
    throw CudaUnavailable("[tensor::cuda::device] device " + std::to_string(ordinal) +
                          ": its context could not be created earlier in this process");
  }
  return s;
}

}  // namespace

const DeviceInfo& device_info(int ordinal) { return slot(ordinal).info; }

void make_current(int ordinal) {
  DeviceSlot& s = slot(ordinal);
  detail::check(detail::driver().cuCtxSetCurrent(s.context), "tensor::cuda::make_current", "cuCtxSetCurrent");
}

void synchronize() {
  make_current();
  detail::check(detail::driver().cuCtxSynchronize(), "tensor::cuda::synchronize", "cuCtxSynchronize");
}

void profiler_range(bool open) {
  make_current();
  detail::check(open ? detail::driver().cuProfilerStart() : detail::driver().cuProfilerStop(),
                "tensor::cuda::profiler_range", open ? "cuProfilerStart" : "cuProfilerStop");
}

MemoryInfo memory_info(int ordinal) {
  make_current(ordinal);
  std::size_t free_bytes = 0, total_bytes = 0;
  detail::check(detail::driver().cuMemGetInfo(&free_bytes, &total_bytes), "tensor::cuda::memory_info", "cuMemGetInfo");
  return {free_bytes, total_bytes};
}

#else  // !ORCHARD_HAVE_CUDA

std::string unavailable_reason() {
  return "built without CUDA (configure with the CUDA toolkit and -DORCHARD_CUDA=ON)";
}
const DeviceInfo& device_info(int) { detail::throw_built_without_cuda("tensor::cuda::device_info"); }
void make_current(int) { detail::throw_built_without_cuda("tensor::cuda::make_current"); }
void synchronize() { detail::throw_built_without_cuda("tensor::cuda::synchronize"); }
void profiler_range(bool) { detail::throw_built_without_cuda("tensor::cuda::profiler_range"); }
MemoryInfo memory_info(int) { detail::throw_built_without_cuda("tensor::cuda::memory_info"); }

#endif

}  // namespace tensor::cuda

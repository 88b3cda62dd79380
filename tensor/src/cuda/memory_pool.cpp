// The caching device allocator.
#include "tensor/cuda/memory_pool.h"

#include "driver_api.h"
#include "tensor/cuda/device.h"

#include <string>

namespace tensor::cuda {
namespace {

constexpr std::size_t kMinBlock = 256;
constexpr std::size_t kLargeThreshold = 32u << 20;  // past this, round to 2 MiB instead of a power of two
constexpr std::size_t kLargeGranule = 2u << 20;

[[maybe_unused]] void check_range(const char* op, std::size_t offset, std::size_t n, std::size_t bytes) {
  if (offset > bytes || n > bytes - offset) {
    throw tensor::ShapeError(std::string("[") + op + "] bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + n) + ") run past the buffer of " + std::to_string(bytes) +
                             " bytes");
  }
}

}  // namespace

std::size_t MemoryPool::size_class(std::size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes > kLargeThreshold) return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
  std::size_t c = kMinBlock;
  while (c < bytes) c <<= 1;
  return c;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    capacity_ = o.capacity_;
    o.pool_ = nullptr;
    o.ptr_ = 0;
    o.bytes_ = o.capacity_ = 0;
  }
  return *this;
}

MemoryPool& MemoryPool::global() {
  // Leaked on purpose: buffers in static objects may be released after main returns.
  static MemoryPool* pool = new MemoryPool();
  return *pool;
}

#if ORCHARD_HAVE_CUDA
using detail::check;
using detail::driver;

void DeviceBuffer::reset() {
  if (ptr_ != 0 && pool_ != nullptr) pool_->release(ptr_, capacity_);
  pool_ = nullptr;
  ptr_ = 0;
  bytes_ = capacity_ = 0;
}

void DeviceBuffer::copy_from_host(const void* src, std::size_t n, std::size_t offset, const Stream* stream) {
  check_range("tensor::cuda::DeviceBuffer::copy_from_host", offset, n, bytes_);
  if (n == 0) return;
  make_current();
  if (stream != nullptr) {
    check(driver().cuMemcpyHtoDAsync(ptr_ + offset, src, n, static_cast<CUstream>(stream->handle())),
          "tensor::cuda::DeviceBuffer::copy_from_host", std::to_string(n) + " bytes");
  } else {
    check(driver().cuMemcpyHtoD(ptr_ + offset, src, n), "tensor::cuda::DeviceBuffer::copy_from_host",
          std::to_string(n) + " bytes");
  }
}

void DeviceBuffer::copy_to_host(void* dst, std::size_t n, std::size_t offset, const Stream* stream) const {
  check_range("tensor::cuda::DeviceBuffer::copy_to_host", offset, n, bytes_);
  if (n == 0) return;
  make_current();
  if (stream != nullptr) {
    check(driver().cuMemcpyDtoHAsync(dst, ptr_ + offset, n, static_cast<CUstream>(stream->handle())),
          "tensor::cuda::DeviceBuffer::copy_to_host", std::to_string(n) + " bytes");
  } else {
    check(driver().cuMemcpyDtoH(dst, ptr_ + offset, n), "tensor::cuda::DeviceBuffer::copy_to_host",
          std::to_string(n) + " bytes");
  }
}

void DeviceBuffer::copy_from_device(const DeviceBuffer& src, std::size_t n, const Stream* stream) {
  check_range("tensor::cuda::DeviceBuffer::copy_from_device", 0, n, bytes_);
  check_range("tensor::cuda::DeviceBuffer::copy_from_device", 0, n, src.bytes_);
  if (n == 0) return;
  make_current();
  check(driver().cuMemcpyDtoDAsync(ptr_, src.ptr_, n, stream ? static_cast<CUstream>(stream->handle()) : nullptr),
        "tensor::cuda::DeviceBuffer::copy_from_device", std::to_string(n) + " bytes");
}

void DeviceBuffer::fill_bytes(std::uint8_t value, const Stream* stream) {
  if (bytes_ == 0) return;
  make_current();
  if (stream != nullptr) {
    check(driver().cuMemsetD8Async(ptr_, value, bytes_, static_cast<CUstream>(stream->handle())),
          "tensor::cuda::DeviceBuffer::fill_bytes", std::to_string(bytes_) + " bytes");
  } else {
    check(driver().cuMemsetD8(ptr_, value, bytes_), "tensor::cuda::DeviceBuffer::fill_bytes",
          std::to_string(bytes_) + " bytes");
  }
}

DeviceBuffer MemoryPool::allocate(std::size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  make_current();
  const std::size_t capacity = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(capacity);
    if (it != free_.end()) {
      const std::uint64_t ptr = it->second;
      free_.erase(it);
      cached_ -= capacity;
      in_use_ += capacity;
      return DeviceBuffer(this, ptr, bytes, capacity);
    }
  }
  CUdeviceptr ptr = 0;
  CUresult status = driver().cuMemAlloc(&ptr, capacity);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {  // give the cached blocks back and try once more
    trim();
    status = driver().cuMemAlloc(&ptr, capacity);
  }
  check(status, "tensor::cuda::MemoryPool::allocate", std::to_string(bytes) + " bytes");
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ += capacity;
  return DeviceBuffer(this, ptr, bytes, capacity);
}

void MemoryPool::release(std::uint64_t ptr, std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace(capacity, ptr);
  in_use_ -= capacity;
  cached_ += capacity;
}

void MemoryPool::trim() {
  std::multimap<std::size_t, std::uint64_t> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(free_);
    cached_ = 0;
  }
  if (blocks.empty()) return;
  make_current();
  for (const auto& [capacity, ptr] : blocks) driver().cuMemFree(ptr);
}

MemoryPool::~MemoryPool() {
  if (!free_.empty() && available()) trim();
}

#else

void DeviceBuffer::reset() {
  pool_ = nullptr;
  ptr_ = 0;
  bytes_ = capacity_ = 0;
}
void DeviceBuffer::copy_from_host(const void*, std::size_t, std::size_t, const Stream*) {
  detail::throw_built_without_cuda("tensor::cuda::DeviceBuffer::copy_from_host");
}
void DeviceBuffer::copy_to_host(void*, std::size_t, std::size_t, const Stream*) const {
  detail::throw_built_without_cuda("tensor::cuda::DeviceBuffer::copy_to_host");
}
void DeviceBuffer::copy_from_device(const DeviceBuffer&, std::size_t, const Stream*) {
  detail::throw_built_without_cuda("tensor::cuda::DeviceBuffer::copy_from_device");
}
void DeviceBuffer::fill_bytes(std::uint8_t, const Stream*) {
  detail::throw_built_without_cuda("tensor::cuda::DeviceBuffer::fill_bytes");
}
DeviceBuffer MemoryPool::allocate(std::size_t) { detail::throw_built_without_cuda("tensor::cuda::MemoryPool::allocate"); }
void MemoryPool::release(std::uint64_t, std::size_t) {}
void MemoryPool::trim() {}
MemoryPool::~MemoryPool() = default;

#endif

std::size_t MemoryPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}
std::size_t MemoryPool::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace tensor::cuda

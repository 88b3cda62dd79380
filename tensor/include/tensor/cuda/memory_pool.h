// Device memory: an RAII buffer and a caching pool. Freed blocks return to the pool by size class (powers
// of two from 256 bytes; 2 MiB multiples past 32 MiB) and are reused without a driver call, as the
// frameworks' allocators do. Thread-safe. Throws CudaUnavailable, or DriverError when the device is full.
#pragma once

#include <tensor/cuda/cuda_error.h>
#include <tensor/cuda/stream.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace tensor::cuda {

class MemoryPool;

// Owns `bytes` of device memory (returned to its pool, or freed, on destruction). Empty when moved from.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryPool* pool, std::uint64_t ptr, std::size_t bytes, std::size_t capacity)
      : pool_(pool), ptr_(ptr), bytes_(bytes), capacity_(capacity) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  std::uint64_t device_ptr() const { return ptr_; }  // the CUdeviceptr
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == 0; }
  void reset();

  // Host <-> device copies of `n` bytes at byte `offset` (synchronous when stream == nullptr).
  // Throws tensor::ShapeError when the range runs past the buffer, DriverError on failure.
  void copy_from_host(const void* src, std::size_t n, std::size_t offset = 0, const Stream* stream = nullptr);
  void copy_to_host(void* dst, std::size_t n, std::size_t offset = 0, const Stream* stream = nullptr) const;
  // Device -> device copy of `n` bytes from `src` into this buffer, queued on `stream` (default stream if null).
  // Throws tensor::ShapeError when n runs past either buffer, DriverError on failure.
  void copy_from_device(const DeviceBuffer& src, std::size_t n, const Stream* stream = nullptr);
  // Sets every byte to `value` (used to poison outputs in tests).
  void fill_bytes(std::uint8_t value, const Stream* stream = nullptr);

 private:
  MemoryPool* pool_ = nullptr;
  std::uint64_t ptr_ = 0;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
};

class MemoryPool {
 public:
  // The process-wide pool of device 0.
  static MemoryPool& global();
  MemoryPool() = default;
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A buffer of at least `bytes` (256-byte aligned); bytes == 0 gives an empty buffer.
  DeviceBuffer allocate(std::size_t bytes);
  // Frees every cached block back to the driver.
  void trim();
  std::size_t bytes_in_use() const;
  std::size_t bytes_cached() const;

  // Rounds a request up to its size class.
  static std::size_t size_class(std::size_t bytes);

 private:
  friend class DeviceBuffer;
  void release(std::uint64_t ptr, std::size_t capacity);

  mutable std::mutex mutex_;
  std::multimap<std::size_t, std::uint64_t> free_;  // capacity -> block
  std::size_t in_use_ = 0;
  std::size_t cached_ = 0;
};

}  // namespace tensor::cuda

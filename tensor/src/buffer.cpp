#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/error.h"
#include "tensor/tensor.h"

namespace tensor {

struct Buffer::Storage {
  enum class Kind { owned, mapped, borrowed };
  Kind kind = Kind::owned;
  std::byte* data = nullptr;
  std::size_t size = 0;
  std::size_t map_size = 0;
  Device device = Device::cpu;
  bool writable = true;
  std::shared_ptr<void> owner;  // adopted memory: what keeps it alive

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (kind == Kind::owned) {
      std::free(data);
    } else if (kind == Kind::mapped && map_size > 0) {
      munmap(data, map_size);
    }
  }
};

std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Buffer Buffer::allocate(std::size_t bytes, Device device, std::size_t alignment) {
  if (device != Device::cpu) {
    throw IoError("[tensor::Buffer::allocate] device " + std::string(device_name(device)) +
                  ": host allocation only; device buffers belong to the CUDA backend");
  }
  if (alignment < 8 || (alignment & (alignment - 1)) != 0) {
    throw IoError("[tensor::Buffer::allocate] alignment " + std::to_string(alignment) +
                  " is not a power of two >= 8");
  }
  auto s = std::make_shared<Storage>();
  // Large buffers (weights, KV caches) go on 2 MiB boundaries and ask for transparent huge pages: fewer
  // TLB misses, and the hardware prefetchers (which stop at page boundaries) keep streaming.
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (bytes >= kHuge && alignment < kHuge) alignment = kHuge;
  const std::size_t rounded = ((bytes + alignment - 1) / alignment) * alignment;
  s->data = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded));
  if (s->data == nullptr) {
    throw IoError("[tensor::Buffer::allocate] out of memory allocating " + std::to_string(bytes) +
                  " bytes");
  }
  if (rounded >= kHuge) ::madvise(s->data, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  std::memset(s->data, 0, rounded == 0 ? alignment : rounded);
  s->size = bytes;
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

Buffer Buffer::map_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError("[tensor::Buffer::map_file] " + path.string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError("[tensor::Buffer::map_file] " + path.string() + ": " + std::strerror(err));
  }
  auto s = std::make_shared<Storage>();
  s->kind = Storage::Kind::mapped;
  s->writable = false;
  s->size = static_cast<std::size_t>(st.st_size);
  if (s->size > 0) {
    void* p = ::mmap(nullptr, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError("[tensor::Buffer::map_file] " + path.string() + ": mmap of " +
                    std::to_string(s->size) + " bytes failed: " + std::strerror(err));
    }
    s->data = static_cast<std::byte*>(p);
    s->map_size = s->size;
  }
  ::close(fd);
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

Buffer Buffer::borrow(void* data, std::size_t bytes, bool writable) {
  auto s = std::make_shared<Storage>();
  s->kind = Storage::Kind::borrowed;
  s->data = static_cast<std::byte*>(data);
  s->size = bytes;
  s->writable = writable;
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

Buffer Buffer::adopt(void* data, std::size_t bytes, Device device, std::shared_ptr<void> owner) {
  auto s = std::make_shared<Storage>();
  s->kind = Storage::Kind::borrowed;
  s->data = static_cast<std::byte*>(data);
  s->size = bytes;
  s->device = device;
  s->writable = false;
  s->owner = std::move(owner);
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

std::byte* Buffer::data() const { return storage_ ? storage_->data : nullptr; }
std::size_t Buffer::size() const { return storage_ ? storage_->size : 0; }
Device Buffer::device() const { return storage_ ? storage_->device : Device::cpu; }
bool Buffer::writable() const { return storage_ && storage_->writable; }
bool Buffer::is_mapped() const { return storage_ && storage_->kind == Storage::Kind::mapped; }

}  // namespace tensor

// Shapes, strides, devices, buffers and tensor views.
//
// A Buffer owns aligned memory or views a read-only memory-mapped file (weights are used in place, never
// copied); copies of a Buffer share the storage. A Tensor is a view: buffer + byte offset + dtype + shape
// + byte strides. Shapes are row-major: the last dimension is the innermost (contiguous) one, e.g. a
// weight matrix is [n_out, n_in] and each of its n_out rows holds n_in elements.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>

#include "tensor/dtype.h"

namespace tensor {

enum class Device : std::uint8_t { cpu, cuda };
std::string_view device_name(Device d);

inline constexpr int kMaxDims = 4;

struct Shape {
  int rank = 0;
  std::array<std::int64_t, kMaxDims> dims{};  // dims[0] outermost, dims[rank-1] innermost

  Shape() = default;
  // Throws ShapeError for more than kMaxDims dimensions or a negative size.
  Shape(std::initializer_list<std::int64_t> d);
  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // "[4096, 14336]"
};

// Byte strides, one per dimension (bytes[rank-1] is the element/block step of the innermost dimension).
struct Strides {
  std::array<std::int64_t, kMaxDims> bytes{};
};

// Strides of a dense row-major tensor. Throws ShapeError when the innermost size is not a multiple of
// the dtype's block size.
Strides contiguous_strides(DType t, const Shape& shape);
// Bytes of a dense tensor of this shape (same checks).
std::size_t dense_bytes(DType t, const Shape& shape);

class Buffer {
 public:
  Buffer() = default;
  // Aligned, zero-filled host memory of `bytes` bytes. Throws IoError on failure, for Device::cuda (the
  // CUDA backend allocates its own buffers), or for an alignment that is not a power of two >= 8.
  static Buffer allocate(std::size_t bytes, Device device = Device::cpu, std::size_t alignment = 64);
  // Maps a whole file read-only (MAP_PRIVATE). Throws IoError naming the path and errno text.
  static Buffer map_file(const std::filesystem::path& path);
  // Wraps memory the caller owns and keeps alive (no copy, no free).
  static Buffer borrow(void* data, std::size_t bytes, bool writable);
  // Wraps `bytes` of `device` memory at `data` that `owner` keeps alive for as long as the buffer (or a
  // copy) lives: device memory a backend allocated (data is then a device address, not for host reads).
  static Buffer adopt(void* data, std::size_t bytes, Device device, std::shared_ptr<void> owner);

  std::byte* data() const;  // nullptr for an empty buffer
  std::size_t size() const;
  Device device() const;
  bool writable() const;  // false for mapped files
  bool is_mapped() const;
  bool empty() const { return storage_ == nullptr; }

  struct Storage;

 private:
  std::shared_ptr<Storage> storage_;
};

class Tensor {
 public:
  Tensor() = default;
  // A view of `buffer` at `offset` with explicit strides. Throws ShapeError when any element lies
  // outside the buffer, when the innermost dimension is not dense for a quantized type, or on a bad shape.
  Tensor(Buffer buffer, std::size_t offset, DType dtype, Shape shape, Strides strides);
  // A dense view of `buffer` at `offset` (same checks).
  static Tensor view(Buffer buffer, std::size_t offset, DType dtype, Shape shape);
  // A new dense zero-filled tensor in its own buffer.
  static Tensor empty(DType dtype, Shape shape, Device device = Device::cpu);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int rank() const { return shape_.rank; }
  std::int64_t dim(int i) const { return shape_[i]; }
  std::int64_t numel() const { return shape_.numel(); }
  const Buffer& buffer() const { return buffer_; }
  std::size_t offset() const { return offset_; }
  bool is_contiguous() const;
  std::size_t nbytes() const;  // bytes spanned when dense

  std::byte* data() const { return buffer_.data() + offset_; }
  // A default-constructed tensor views nothing (an absent optional weight).
  bool empty() const { return buffer_.empty(); }
  explicit operator bool() const { return !empty(); }
  template <typename T>
  T* data_as() const {
    return reinterpret_cast<T*>(data());
  }
  // Pointer to the start of row `index` along the outer dimensions (all but the innermost), row-major.
  // Throws ShapeError when out of range.
  std::byte* row(std::int64_t index) const;
  std::int64_t n_rows() const;  // product of all but the innermost dimension

  // The sub-tensor [begin, end) along dimension `dim` (a view). Throws ShapeError when out of range.
  Tensor slice(int dim, std::int64_t begin, std::int64_t end) const;
  // The same elements under another shape; the tensor must be contiguous. Throws ShapeError otherwise.
  Tensor reshape(Shape shape) const;

 private:
  Buffer buffer_;
  std::size_t offset_ = 0;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
};

}  // namespace tensor

#include "tensor/tensor.h"

#include <string>

#include "tensor/error.h"

namespace tensor {

Shape::Shape(std::initializer_list<std::int64_t> d) {
  if (d.size() > static_cast<std::size_t>(kMaxDims)) {
    throw ShapeError("[tensor::Shape] rank " + std::to_string(d.size()) + " exceeds " +
                     std::to_string(kMaxDims));
  }
  for (std::int64_t v : d) {
    if (v < 0) throw ShapeError("[tensor::Shape] negative dimension " + std::to_string(v));
    dims[static_cast<std::size_t>(rank++)] = v;
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[static_cast<std::size_t>(i)] != o.dims[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return s + "]";
}

Strides contiguous_strides(DType t, const Shape& shape) {
  Strides st;
  if (shape.rank == 0) return st;
  const std::int64_t inner = shape[shape.rank - 1];
  if (inner % block_size(t) != 0) {
    throw ShapeError("[tensor::contiguous_strides] " + std::string(dtype_name(t)) + " shape " +
                     shape.to_string() + ": innermost size " + std::to_string(inner) +
                     " is not a multiple of the block size " + std::to_string(block_size(t)));
  }
  st.bytes[static_cast<std::size_t>(shape.rank - 1)] = static_cast<std::int64_t>(block_bytes(t));
  std::int64_t step = static_cast<std::int64_t>(row_bytes(t, inner));
  for (int i = shape.rank - 2; i >= 0; --i) {
    st.bytes[static_cast<std::size_t>(i)] = step;
    step *= shape[i];
  }
  return st;
}

std::size_t dense_bytes(DType t, const Shape& shape) {
  if (shape.rank == 0) return dtype_info(t).block_bytes;
  std::size_t n = row_bytes(t, shape[shape.rank - 1]);
  for (int i = 0; i < shape.rank - 1; ++i) n *= static_cast<std::size_t>(shape[i]);
  return n;
}

Tensor::Tensor(Buffer buffer, std::size_t offset, DType dtype, Shape shape, Strides strides)
    : buffer_(std::move(buffer)), offset_(offset), dtype_(dtype), shape_(shape), strides_(strides) {
  const std::string where = "[tensor::Tensor] " + std::string(dtype_name(dtype)) + " " + shape.to_string();
  if (shape.rank > 0) {
    const std::int64_t inner = shape[shape.rank - 1];
    if (inner % block_size(dtype) != 0) {
      throw ShapeError(where + ": innermost size " + std::to_string(inner) +
                       " is not a multiple of the block size " + std::to_string(block_size(dtype)));
    }
    if (is_quantized(dtype) &&
        strides.bytes[static_cast<std::size_t>(shape.rank - 1)] != static_cast<std::int64_t>(block_bytes(dtype))) {
      throw ShapeError(where + ": the innermost dimension of a quantized tensor must be dense");
    }
  }
  if (shape.numel() == 0) return;
  // The lowest and highest byte touched must lie within the buffer.
  std::int64_t lo = 0, hi = static_cast<std::int64_t>(block_bytes(dtype));
  for (int i = 0; i < shape.rank; ++i) {
    const std::int64_t units = i == shape.rank - 1 ? shape[i] / block_size(dtype) : shape[i];
    const std::int64_t span = (units - 1) * strides.bytes[static_cast<std::size_t>(i)];
    (span < 0 ? lo : hi) += span;
  }
  const std::int64_t start = static_cast<std::int64_t>(offset) + lo;
  const std::int64_t end = static_cast<std::int64_t>(offset) + hi;
  if (start < 0 || end > static_cast<std::int64_t>(buffer_.size())) {
    throw ShapeError(where + " at offset " + std::to_string(offset) + ": bytes [" + std::to_string(start) +
                     ", " + std::to_string(end) + ") run past the buffer of " +
                     std::to_string(buffer_.size()) + " bytes");
  }
}

Tensor Tensor::view(Buffer buffer, std::size_t offset, DType dtype, Shape shape) {
  const Strides st = contiguous_strides(dtype, shape);
  return Tensor(std::move(buffer), offset, dtype, shape, st);
}

Tensor Tensor::empty(DType dtype, Shape shape, Device device) {
  Buffer b = Buffer::allocate(dense_bytes(dtype, shape), device);
  return view(std::move(b), 0, dtype, shape);
}

bool Tensor::is_contiguous() const {
  if (shape_.rank == 0) return true;
  const Strides dense = contiguous_strides(dtype_, shape_);
  for (int i = 0; i < shape_.rank; ++i) {
    if (shape_[i] != 1 && dense.bytes[static_cast<std::size_t>(i)] != strides_.bytes[static_cast<std::size_t>(i)]) {
      return false;
    }
  }
  return true;
}

std::size_t Tensor::nbytes() const { return dense_bytes(dtype_, shape_); }

std::int64_t Tensor::n_rows() const {
  std::int64_t n = 1;
  for (int i = 0; i + 1 < shape_.rank; ++i) n *= shape_[i];
  return n;
}

std::byte* Tensor::row(std::int64_t index) const {
  if (index < 0 || index >= n_rows()) {
    throw ShapeError("[tensor::Tensor::row] row " + std::to_string(index) + " out of range for shape " +
                     shape_.to_string());
  }
  std::int64_t off = 0;
  for (int i = shape_.rank - 2; i >= 0; --i) {
    const std::int64_t d = shape_[i];
    off += (index % d) * strides_.bytes[static_cast<std::size_t>(i)];
    index /= d;
  }
  return data() + off;
}

Tensor Tensor::slice(int dim, std::int64_t begin, std::int64_t end) const {
  if (dim < 0 || dim >= shape_.rank || begin < 0 || end < begin || end > shape_[dim]) {
    throw ShapeError("[tensor::Tensor::slice] dim " + std::to_string(dim) + " range [" +
                     std::to_string(begin) + ", " + std::to_string(end) + ") out of range for shape " +
                     shape_.to_string());
  }
  Shape s = shape_;
  s.dims[static_cast<std::size_t>(dim)] = end - begin;
  std::int64_t step = strides_.bytes[static_cast<std::size_t>(dim)];
  std::int64_t first = begin;
  if (dim == shape_.rank - 1) {
    if (begin % block_size(dtype_) != 0 || end % block_size(dtype_) != 0) {
      throw ShapeError("[tensor::Tensor::slice] " + std::string(dtype_name(dtype_)) + ": range [" +
                       std::to_string(begin) + ", " + std::to_string(end) +
                       ") does not fall on block boundaries of " + std::to_string(block_size(dtype_)));
    }
    first = begin / block_size(dtype_);
  }
  return Tensor(buffer_, offset_ + static_cast<std::size_t>(first * step), dtype_, s, strides_);
}

Tensor Tensor::reshape(Shape shape) const {
  if (!is_contiguous()) {
    throw ShapeError("[tensor::Tensor::reshape] " + shape_.to_string() + " is not contiguous");
  }
  if (shape.numel() != numel()) {
    throw ShapeError("[tensor::Tensor::reshape] " + shape_.to_string() + " has " + std::to_string(numel()) +
                     " elements, " + shape.to_string() + " has " + std::to_string(shape.numel()));
  }
  return view(buffer_, offset_, dtype_, shape);
}

}  // namespace tensor

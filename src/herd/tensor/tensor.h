// Tensor: a typed, strided view of memory on one device, owning its storage or borrowing it.
//
// The runtime's kernels work on raw pointers and sizes; Tensor is the light bookkeeping around them
// (dtype, shape, strides, device) that layers, communicators and checkpoints pass around. Storage is
// either owned (a shared, 64-byte aligned heap block, so views keep it alive) or borrowed (memory from
// an Arena, a communication buffer or a caller's array; the caller keeps it alive). Views and slices
// never copy. Shapes are at most kMaxDims dimensions and live inline, so a Tensor is cheap to copy.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "herd/core/check.h"
#include "herd/core/dtype.h"

namespace herd::tensor {

// Where the bytes live. Only kCPU has a backend today; kCUDA is declared so that interfaces taking a
// Device do not change when the CUDA backend arrives (ARCHITECTURE.md, "Device split").
enum class Device { kCPU, kCUDA };
const char* device_name(Device d);

inline constexpr int kMaxDims = 6;

// A shape or a stride list: up to kMaxDims int64 values, stored inline.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<std::int64_t> v);
  int size() const { return n_; }
  std::int64_t operator[](int i) const {
    HERD_DCHECK(i >= 0 && i < n_);
    return v_[i];
  }
  std::int64_t& operator[](int i) {
    HERD_DCHECK(i >= 0 && i < n_);
    return v_[i];
  }
  void push_back(std::int64_t x);
  std::int64_t numel() const;  // product of the entries (1 for a scalar)
  bool operator==(const Dims& o) const;
  std::string str() const;  // "(8, 512, 64)"

 private:
  std::array<std::int64_t, kMaxDims> v_{};
  int n_ = 0;
};

// Row-major (C-order) strides for a shape, in elements.
Dims contiguous_strides(const Dims& shape);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}

class Tensor {
 public:
  Tensor() = default;

  // Owned, contiguous, zero-filled storage on the CPU.
  static Tensor empty(const Dims& shape, DType dtype, Device device = Device::kCPU);
  static Tensor zeros(const Dims& shape, DType dtype) { return empty(shape, dtype); }
  // Borrowed storage: `data` must outlive every view of the result.
  static Tensor borrow(void* data, const Dims& shape, DType dtype, Device device = Device::kCPU);
  static Tensor borrow(void* data, const Dims& shape, const Dims& strides, DType dtype, Device device = Device::kCPU);

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int dim() const { return shape_.size(); }
  std::int64_t size(int i) const { return shape_[i < 0 ? i + dim() : i]; }
  std::int64_t stride(int i) const { return strides_[i < 0 ? i + dim() : i]; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t element_bytes() const { return dtype_bytes(dtype_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_bytes(); }
  bool is_contiguous() const;
  bool owns_storage() const { return storage_ != nullptr; }

  void* raw() const { return data_; }
  // Typed pointer to the first element; checks that T matches the dtype.
  template <typename T>
  T* data() const {
    HERD_CHECK(dtype_ == dtype_of<T>(), "tensor dtype is ", dtype_name(dtype_));
    return static_cast<T*>(data_);
  }
  // Element at a multi-index (tests and debugging; kernels use pointers).
  template <typename T>
  T& at(std::initializer_list<std::int64_t> idx) const {
    HERD_CHECK(static_cast<int>(idx.size()) == dim(), "index rank ", idx.size(), " vs tensor rank ", dim());
    std::int64_t off = 0;
    int i = 0;
    for (std::int64_t x : idx) {
      HERD_CHECK(x >= 0 && x < shape_[i], "index ", x, " out of range for dim ", i, " of size ", shape_[i]);
      off += x * strides_[i++];
    }
    return data<T>()[off];
  }

  // Views (no copy; share the storage).
  Tensor view(const Dims& shape) const;                               // contiguous tensors only; same numel
  Tensor slice(int dim, std::int64_t begin, std::int64_t end) const;  // [begin, end) along dim
  Tensor select(int dim, std::int64_t index) const;                   // drops dim
  Tensor transpose(int a, int b) const;

  // Copies (fp32 <-> fp64 converted element-wise; shapes must match). The result is owned.
  Tensor clone() const;
  Tensor to(DType dtype) const;
  void copy_from(const Tensor& src);  // elementwise into this (any strides), converting the dtype
  void fill(double value);

  std::string str() const;  // "Tensor(fp32, (8, 512), cpu, owned)"

 private:
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;  // null when borrowed
  Dims shape_;
  Dims strides_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
};

}  // namespace herd::tensor

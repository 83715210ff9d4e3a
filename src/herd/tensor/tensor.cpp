// Tensor bookkeeping: shapes, views and the slow, general element-wise copy used off the hot path.
#include "herd/tensor/tensor.h"

#include <cstring>
#include <sstream>

#include "herd/core/aligned.h"

namespace herd::tensor {

const char* device_name(Device d) {
  switch (d) {
    case Device::kCPU: return "cpu";
    case Device::kCUDA: return "cuda";
  }
  return "?";
}

Dims::Dims(std::initializer_list<std::int64_t> v) {
  HERD_CHECK(static_cast<int>(v.size()) <= kMaxDims, "at most ", kMaxDims, " dims, got ", v.size());
  for (std::int64_t x : v) v_[n_++] = x;
}

void Dims::push_back(std::int64_t x) {
  HERD_CHECK(n_ < kMaxDims, "at most ", kMaxDims, " dims");
  v_[n_++] = x;
}

std::int64_t Dims::numel() const {
  std::int64_t p = 1;
  for (int i = 0; i < n_; ++i) p *= v_[i];
  return p;
}

bool Dims::operator==(const Dims& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (v_[i] != o.v_[i]) return false;
  return true;
}

std::string Dims::str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < n_; ++i) os << (i ? ", " : "") << v_[i];
  os << ")";
  return os.str();
}

Dims contiguous_strides(const Dims& shape) {
  Dims s = shape;
  std::int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Tensor Tensor::empty(const Dims& shape, DType dtype, Device device) {
  HERD_CHECK(device == Device::kCPU, "no allocator for device ", device_name(device), " yet");
  for (int i = 0; i < shape.size(); ++i) HERD_CHECK(shape[i] >= 0, "negative size in shape ", shape.str());
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_bytes(dtype);
  void* p = aligned_bytes(bytes);
  std::memset(p, 0, bytes);
  t.storage_ = std::shared_ptr<void>(p, AlignedFree());
  t.data_ = p;
  return t;
}

Tensor Tensor::borrow(void* data, const Dims& shape, DType dtype, Device device) {
  return borrow(data, shape, contiguous_strides(shape), dtype, device);
}

Tensor Tensor::borrow(void* data, const Dims& shape, const Dims& strides, DType dtype, Device device) {
  HERD_CHECK(shape.size() == strides.size(), "shape ", shape.str(), " vs strides ", strides.str());
  HERD_CHECK(data != nullptr || shape.numel() == 0, "borrowing a null pointer");
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = strides;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

Tensor Tensor::view(const Dims& shape) const {
  HERD_CHECK(is_contiguous(), "view of a non-contiguous tensor ", str());
  HERD_CHECK(shape.numel() == numel(), "view ", shape.str(), " of ", shape_.str(), ": element counts differ");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int d, std::int64_t begin, std::int64_t end) const {
  if (d < 0) d += dim();
  HERD_CHECK(d >= 0 && d < dim(), "slice dim ", d, " of ", str());
  HERD_CHECK(0 <= begin && begin <= end && end <= shape_[d], "slice [", begin, ", ", end, ") of dim ", d, " size ",
             shape_[d]);
  Tensor t = *this;
  t.shape_[d] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[d] * static_cast<std::int64_t>(element_bytes());
  return t;
}

Tensor Tensor::select(int d, std::int64_t index) const {
  if (d < 0) d += dim();
  Tensor s = slice(d, index, index + 1);
  Tensor t = s;
  t.shape_ = Dims();
  t.strides_ = Dims();
  for (int i = 0; i < dim(); ++i) {
    if (i == d) continue;
    t.shape_.push_back(s.shape_[i]);
    t.strides_.push_back(s.strides_[i]);
  }
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  if (a < 0) a += dim();
  if (b < 0) b += dim();
  HERD_CHECK(a >= 0 && a < dim() && b >= 0 && b < dim(), "transpose(", a, ", ", b, ") of ", str());
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

namespace {

// bf16 is the upper half of an fp32; rounding to nearest even on the way down.
double load_element(const void* base, std::int64_t off, DType dt) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(base)[off];
    case DType::kF64: return static_cast<const double*>(base)[off];
    case DType::kBF16: {
      std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(base)[off]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: HERD_CHECK(false, "element access for dtype ", dtype_name(dt), " is not implemented");
  }
  return 0;
}

void store_element(void* base, std::int64_t off, DType dt, double v) {
  switch (dt) {
    case DType::kF32: static_cast<float*>(base)[off] = static_cast<float>(v); return;
    case DType::kF64: static_cast<double*>(base)[off] = v; return;
    case DType::kBF16: {
      float f = static_cast<float>(v);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      static_cast<std::uint16_t*>(base)[off] = static_cast<std::uint16_t>(bits >> 16);
      return;
    }
    default: HERD_CHECK(false, "element access for dtype ", dtype_name(dt), " is not implemented");
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  HERD_CHECK(shape_ == src.shape_, "copy_from: shape ", src.shape_.str(), " into ", shape_.str());
  HERD_CHECK(device_ == Device::kCPU && src.device_ == Device::kCPU, "copy_from on the CPU only");
  if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous()) {
    std::memmove(data_, src.data_, nbytes());
    return;
  }
  const std::int64_t n = numel();
  Dims idx = shape_;
  for (int i = 0; i < dim(); ++i) idx[i] = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t so = 0, dof = 0;
    for (int i = 0; i < dim(); ++i) {
      so += idx[i] * src.strides_[i];
      dof += idx[i] * strides_[i];
    }
    store_element(data_, dof, dtype_, load_element(src.data_, so, src.dtype_));
    for (int i = dim() - 1; i >= 0; --i) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::clone() const { return to(dtype_); }

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape_, dtype, device_);
  t.copy_from(*this);
  return t;
}

void Tensor::fill(double value) {
  Tensor tmp = empty(Dims{1}, dtype_);
  store_element(tmp.data_, 0, dtype_, value);
  const std::int64_t n = numel();
  Dims idx = shape_;
  for (int i = 0; i < dim(); ++i) idx[i] = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t off = 0;
    for (int i = 0; i < dim(); ++i) off += idx[i] * strides_[i];
    std::memcpy(static_cast<char*>(data_) + off * static_cast<std::int64_t>(element_bytes()), tmp.data_,
                element_bytes());
    for (int i = dim() - 1; i >= 0; --i) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype_) << ", " << shape_.str() << ", " << device_name(device_) << ", "
     << (owns_storage() ? "owned" : "borrowed") << ")";
  return os.str();
}

}  // namespace herd::tensor

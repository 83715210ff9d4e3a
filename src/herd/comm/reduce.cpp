// The ordered reduction kernel: blocks of 256 elements through a private accumulator, so that dst may
// alias a source and the inner loop over one source vectorises.
#include "herd/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "herd/core/check.h"

namespace herd::comm {
namespace {

// 2 KiB of fp64: the accumulator and one block of each source stay in L1 while the block is reduced.
constexpr std::size_t kBlock = 256;

template <typename T, ReduceOp kOp>
void reduce_typed(const void* const* srcs, int n, void* dst_raw, std::size_t count) {
  T* dst = static_cast<T*>(dst_raw);
  T acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    const T* s0 = static_cast<const T*>(srcs[0]) + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = s0[i];
    for (int j = 1; j < n; ++j) {
      const T* s = static_cast<const T*>(srcs[j]) + base;
      for (std::size_t i = 0; i < len; ++i) {
        if constexpr (kOp == ReduceOp::kSum) {
          acc[i] = acc[i] + s[i];
        } else if constexpr (kOp == ReduceOp::kMax) {
          acc[i] = s[i] > acc[i] ? s[i] : acc[i];
        } else {
          acc[i] = s[i] < acc[i] ? s[i] : acc[i];
        }
      }
    }
    std::memcpy(dst + base, acc, len * sizeof(T));
  }
}

template <typename T>
void reduce_op(ReduceOp op, const void* const* srcs, int n, void* dst, std::size_t count) {
  switch (op) {
    case ReduceOp::kSum: reduce_typed<T, ReduceOp::kSum>(srcs, n, dst, count); return;
    case ReduceOp::kMax: reduce_typed<T, ReduceOp::kMax>(srcs, n, dst, count); return;
    case ReduceOp::kMin: reduce_typed<T, ReduceOp::kMin>(srcs, n, dst, count); return;
  }
}

}  // namespace

void reduce_ordered(DType t, ReduceOp op, const void* const* srcs, int n, void* dst, std::size_t count) {
  HERD_CHECK(n >= 1, "reduce_ordered over ", n, " sources");
  switch (t) {
    case DType::kF32: reduce_op<float>(op, srcs, n, dst, count); return;
    case DType::kF64: reduce_op<double>(op, srcs, n, dst, count); return;
    case DType::kI32: reduce_op<std::int32_t>(op, srcs, n, dst, count); return;
    case DType::kI64: reduce_op<std::int64_t>(op, srcs, n, dst, count); return;
    default: HERD_CHECK(false, "reduce_ordered on non-reducible ", dtype_name(t));
  }
}

}  // namespace herd::comm

// The one reduction kernel every backend uses, in a fixed order.
//
// reduce_ordered(dst, srcs[0..n)) computes, for every element i,
//   dst[i] = op(...op(op(srcs[0][i], srcs[1][i]), srcs[2][i])..., srcs[n-1][i])
// that is ((a0 + a1) + a2) + a3 for a sum over four ranks, whatever the group size, the backend or
// the chunking of the buffer. Because floating-point addition is not associative, this fixed order
// is what makes a parallel run bit-identical to a sequential reference sum in rank order, and the
// local and MPI backends bit-identical to each other. dst may alias any one source (in-place
// all-reduce): the kernel works in blocks through a private accumulator, reading every source of a
// block before writing it.
#pragma once

#include <cstddef>
#include <utility>

#include "herd/comm/types.h"

namespace herd::comm {

// srcs: n pointers to `count` elements of type `t` each; dst: `count` elements. t must be reducible.
void reduce_ordered(DType t, ReduceOp op, const void* const* srcs, int n, void* dst, std::size_t count);

// The element range [begin, end) of chunk `i` when `count` elements are cut into `n` near-equal chunks:
// the cut every backend's all-reduce uses (each rank reduces its own chunk), so they agree on who sums what.
inline std::pair<std::size_t, std::size_t> chunk_range(std::size_t count, int n, int i) {
  return {count * static_cast<std::size_t>(i) / static_cast<std::size_t>(n),
          count * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(n)};
}

// The reference the tests compare against: the same order, one element at a time, no blocking.
template <typename T>
T reduce_reference(ReduceOp op, const T* values, int n) {
  T acc = values[0];
  for (int j = 1; j < n; ++j) {
    const T v = values[j];
    switch (op) {
      case ReduceOp::kSum: acc = acc + v; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
    }
  }
  return acc;
}

}  // namespace herd::comm

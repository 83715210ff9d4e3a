// Token embedding lookup and its scatter-add backward.
//
// The table (or this rank's vocab shard of it) holds rows [vocab_begin, vocab_begin + rows) of the
// full (vocab, dim) table. A token outside the shard yields a zero row and receives no gradient, so a
// vocab-parallel embedding is the sum over shards (an all-reduce / reduce-scatter in parallel/tp).
// A token id outside [0, vocab) is a data bug (HERD_CHECK in the caller's loader, DCHECK here).
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

// out (n, dim) = table[ids[i] - vocab_begin], or 0 when the id is not in this shard. Overwrites out.
template <typename T>
void embedding_forward(const std::int32_t* ids, std::int64_t n, const T* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, T* out);

// The same from a bf16 table, widened into fp32 rows (exact).
void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, float* out);

// dtable[ids[i] - vocab_begin] += dout[i] for ids in the shard. Accumulates (+=) into dtable.
// Serial over tokens (repeated ids make a parallel scatter racy), vectorised over dim.
template <typename T>
void embedding_backward(const std::int32_t* ids, std::int64_t n, const T* dout, std::int64_t vocab_begin,
                        std::int64_t rows, std::int64_t dim, T* dtable);

}  // namespace herd::kernels

// Attention problems shared by the fp32 and bf16 attention tests: dimensions with the per-token
// positions and document ids of the mask.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/kernels/attention.h"

namespace herd::kernels::testing {

struct Problem {
  AttentionDims d;
  std::vector<std::int32_t> pos_q, doc_q, pos_k, doc_k;
  AttentionMask mask() const {
    return {pos_q.data(), doc_q.empty() ? nullptr : doc_q.data(), pos_k.data(), doc_k.empty() ? nullptr : doc_k.data()};
  }
};

// Self-attention over packed sequences: positions restart at 0 in each document (as the data loader
// packs them); document boundaries every `doc_len` tokens (0: one document).
inline Problem self_problem(std::int64_t b, std::int64_t t, std::int64_t hq, std::int64_t hkv, std::int64_t dim,
                            std::int64_t doc_len) {
  Problem p;
  p.d = {b, t, t, hq, hkv, dim};
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t len = doc_len > 0 ? doc_len + s : t;  // different boundaries per sequence
      p.pos_q.push_back(static_cast<std::int32_t>(i % len));
      p.doc_q.push_back(static_cast<std::int32_t>(i / len));
    }
  p.pos_k = p.pos_q;
  p.doc_k = p.doc_q;
  return p;
}

}  // namespace herd::kernels::testing

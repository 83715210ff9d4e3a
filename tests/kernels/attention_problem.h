// Attention problems shared by the fp32 and bf16 attention tests: dimensions with the per-token
// positions and document ids of the mask.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "herd/kernels/attention.h"
#include "kernels/test_util.h"

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

// Context parallelism over 4 chunks of a one-sequence problem: the rank holding chunks `rank` and
// 3 - rank computes its queries at their global positions against all the keys. Its problem, and the
// global index of each of its queries.
struct CpRank {
  Problem p;
  std::vector<std::int64_t> global;
};

inline CpRank cp_rank(const Problem& full, int rank) {
  const std::int64_t chunk = full.d.tq / 4;
  CpRank r;
  r.p.d = full.d;
  r.p.d.tq = 2 * chunk;
  r.p.pos_k = full.pos_k;
  r.p.doc_k = full.doc_k;
  for (const std::int64_t c : {rank, 3 - rank})
    for (std::int64_t i = 0; i < chunk; ++i) {
      const std::int64_t g = c * chunk + i;
      r.global.push_back(g);
      r.p.pos_q.push_back(full.pos_q[g]);
      r.p.doc_q.push_back(full.doc_q[g]);
    }
  return r;
}

// The rows (of `row` elements) of x at the given indices.
template <typename T>
std::vector<T> gather_rows(const std::vector<T>& x, const std::vector<std::int64_t>& rows, std::int64_t row) {
  std::vector<T> y;
  for (const std::int64_t g : rows) y.insert(y.end(), x.begin() + g * row, x.begin() + (g + 1) * row);
  return y;
}

// The context-parallel check: each of the two ranks of cp_rank, run by run_rank (CpRank -> outputs
// with out, lse, dq, dk, dv of that rank), has the rows of out, lse and dq that the whole sequence
// (`all`) has for its queries, within tol (0: equal); and the ranks' dk and dv sum to the whole
// sequence's within sum_tol of max(1, their largest entry).
template <typename Outputs, typename RunRank>
void expect_cp_ranks_match_full(const Problem& full, const Outputs& all, RunRank run_rank, double tol, double sum_tol) {
  const std::int64_t row = full.d.q_heads * full.d.head_dim;
  auto near = [tol](double a, double b) { return tol == 0 ? a == b : std::abs(a - b) <= tol; };
  std::vector<double> dk_sum(all.dk.size(), 0.0), dv_sum(all.dv.size(), 0.0);
  for (int rank = 0; rank < 2; ++rank) {
    const CpRank cp = cp_rank(full, rank);
    const Outputs local = run_rank(cp);
    for (std::size_t l = 0; l < cp.global.size(); ++l) {
      const std::int64_t g = cp.global[l], li = static_cast<std::int64_t>(l);
      for (std::int64_t e = 0; e < row; ++e) {
        ASSERT_PRED2(near, local.out[li * row + e], all.out[g * row + e]) << "query " << g << ", element " << e;
        ASSERT_PRED2(near, local.dq[li * row + e], all.dq[g * row + e]) << "query " << g << ", element " << e;
      }
      for (std::int64_t h = 0; h < full.d.q_heads; ++h)
        ASSERT_PRED2(near, local.lse[h * cp.p.d.tq + li], all.lse[h * full.d.tq + g]) << "query " << g;
    }
    for (std::size_t i = 0; i < dk_sum.size(); ++i) {
      dk_sum[i] += static_cast<double>(local.dk[i]);
      dv_sum[i] += static_cast<double>(local.dv[i]);
    }
  }
  EXPECT_LT(rel_error(dk_sum, all.dk), sum_tol);
  EXPECT_LT(rel_error(dv_sum, all.dv), sum_tol);
}

}  // namespace herd::kernels::testing

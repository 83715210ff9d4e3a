// Causal, document-masked grouped-query attention, tiled flash-style (no T x T score matrix).
//
// Layout: q (B, Tq, Hq, D), k and v (B, Tk, Hkv, D), out (B, Tq, Hq, D), with token strides (elements
// between consecutive tokens of one sequence; Hq*D or Hkv*D when dense, larger when q/k/v are column
// blocks of one fused QKV buffer). Query head h reads KV head h / (Hq / Hkv).
// Mask: key j is visible to query i iff doc_k[j] == doc_q[i] and pos_k[j] <= pos_q[i]; positions and
// document ids are per token, (B, Tq) and (B, Tk). So one call serves plain causal attention
// (pos = 0..T-1, one document), packed documents, and a context-parallel rank computing its two local
// query chunks (at their global positions) against all-gathered keys. A query that sees no key gets
// out = 0 and lse = -inf.
//
// Forward keeps out and the log-sum-exp lse (B, Hq, Tq) of the scaled scores (scale = 1/sqrt(D)).
// Backward recomputes the scores tile by tile from q, k, lse (FlashAttention-2) and writes dq, dk, dv
// (overwrites; dk/dv summed over the Hq/Hkv query heads sharing a KV head). Memory: per thread, a few
// tiles of kTileQ x kTileK scores and kTile x D rows; nothing grows with T x T.
// Parallelism: forward over (batch, query head, query tile); backward over (batch, KV head), each task
// owning its dk/dv rows and the dq rows of its query heads, so nothing is written twice.
#pragma once

#include <cstdint>

namespace herd::kernels {

struct AttentionDims {
  std::int64_t batch = 1;
  std::int64_t tq = 0;        // queries per sequence
  std::int64_t tk = 0;        // keys per sequence
  std::int64_t q_heads = 0;   // Hq
  std::int64_t kv_heads = 0;  // Hkv, divides Hq
  std::int64_t head_dim = 0;  // D
  // Token strides in elements; 0 means dense (Hq*D for q/out/dq/dout, Hkv*D for k/v/dk/dv).
  std::int64_t ld_q = 0, ld_k = 0, ld_v = 0, ld_o = 0;
};

struct AttentionMask {
  const std::int32_t* pos_q = nullptr;  // (B, Tq)
  const std::int32_t* doc_q = nullptr;  // (B, Tq); null: one document
  const std::int32_t* pos_k = nullptr;  // (B, Tk)
  const std::int32_t* doc_k = nullptr;  // (B, Tk); null: one document
};

inline constexpr std::int64_t kAttnTileQ = 64;
inline constexpr std::int64_t kAttnTileK = 64;

// out (B, Tq, Hq, D) and lse (B, Hq, Tq) are written.
template <typename T>
void attention_forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, T* out,
                       T* lse);

// dout like out; q, k, v, out, lse as in the forward. dq like q, dk/dv like k/v (token strides ld_q,
// ld_k, ld_v; dout uses ld_o), all written.
template <typename T>
void attention_backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

}  // namespace herd::kernels

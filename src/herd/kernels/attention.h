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
//
// bf16 (`train.precision = bf16`): q, k, v and the saved out in bf16, everything else fp32, with the
// numerics of FlashAttention-2's bf16 kernels: QK^T of bf16 inputs summed in fp32, the softmax
// statistics and exponentials in fp32, P rounded to bf16 before P V; in the backward dO, P and dS
// rounded to bf16 where they enter a matmul, every sum in fp32. kernels/cpu/attention_bf16.cpp has the
// error bound; docs/precision.md the table.
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

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

// bf16 inputs, fp32 outputs: out (B, Tq, Hq, D) and lse (B, Hq, Tq) in fp32 (the caller rounds out to
// bf16 for what it saves and what the next GEMM reads).
void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                       float* out, float* lse);
// out is the saved bf16 output, dout the fp32 gradient (rounded to bf16 as it is packed: the kernel
// packs it anyway, so the caller needs no bf16 copy); dq, dk, dv written in fp32 (the caller rounds
// them for the GEMMs that follow).
void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const float* dout, float* dq, float* dk, float* dv);

// How the bf16 kernel multiplies. kAuto: vdpbf16ps where the CPU has AVX512_BF16 (kDpbf16), else
// kConverted: the operands widened to fp32 and the fp32 micro-GEMM, the same products summed in
// another order, at the fp32 rate. Forcing kDpbf16 on a CPU without the instruction is a check
// failure. For tests and benchmarks; set it before the kernels run, not while they do.
enum class Bf16AttentionPath { kAuto, kDpbf16, kConverted };
void set_bf16_attention_path(Bf16AttentionPath p);
// The path kAuto resolves to (never kAuto).
Bf16AttentionPath bf16_attention_path();
// "AMX tiles (amx_bf16)", "vdpbf16ps (avx512_bf16)" or "converted to fp32 (...)", for logs and benchmark
// records.
const char* bf16_attention_description();

}  // namespace herd::kernels

// The device helpers and constants the mma.sync attention kernels share (attention_mma.cu: the forward and
// the file comment that states the fragment layouts, tiles and pipeline; attention_mma_backward.cu: delta, dq,
// dk / dv). Internal to kernels/cuda/.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "herd/kernels/cuda/attention_common.cuh"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda::attn::mma {

using bf = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and keys per tile
constexpr int kThreads = 128;
constexpr unsigned kFull = 0xffffffffu;

// Dynamic shared memory of `tiles` bf16 tiles of 64 rows x (d + 8).
constexpr std::size_t tiles_smem(int tiles, int d) {
  return static_cast<std::size_t>(tiles) * sizeof(bf) * kTile * static_cast<std::size_t>(d + 8);
}
static_assert(tiles_smem(6, kMaxHeadDim) <= 227 * 1024, "mma attention tiles exceed sm_90's shared memory");

// ldmatrix x4 of the 16 x 16 bf16 block at `blk` (a shared-memory tile of row stride ld elements): lane
// l gives the address of row (l & 7) + 8 ((l >> 3) & 1), column 8 (l >> 4) (matrix l / 8, as listed
// above). Registers r[i] = matrix i (kTrans: transposed).
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const bf* blk, int ld) {
  const int l = threadIdx.x & 31;
  const bf* row = blk + ((l & 7) + 8 * ((l >> 3) & 1)) * ld + 8 * (l >> 4);
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
}

// c += a b (one m16n8k16 product; fragment layouts above).
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values rounded to bf16 (nearest even) in one register: lo in the lower 16 bits.
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low half), .y = hi
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// The A fragment of the 16 x 16 block made of the C fragments c[2kk] (columns 16kk..16kk+7) and
// c[2kk+1] (columns 16kk+8..16kk+15), rounded to bf16 (layouts above: a0a1 = lo.c0c1, a2a3 = lo.c2c3,
// a4a5 = hi.c0c1, a6a7 = hi.c2c3).
__device__ __forceinline__ void c_to_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// acc (16 rows x 64: 8 C fragments) += A B^T for the warp's A rows (16 x D at `a`, stride ld) and the
// 64 rows of `b` (64 x D, stride ld): S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T.
template <int NF>
__device__ __forceinline__ void rows_times_tile_t(float (&acc)[8][4], const bf* a, const bf* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < NF; ++kk) {
    std::uint32_t af[4];
    ldsm_x4<false>(af, a + 16 * kk, ld);
#pragma unroll
    for (int jp = 0; jp < kTile / 16; ++jp) {
      std::uint32_t bfr[4];
      ldsm_x4<false>(bfr, b + (16 * jp) * ld + 16 * kk, ld);
      mma16816(acc[2 * jp], af, bfr[0], bfr[2]);
      mma16816(acc[2 * jp + 1], af, bfr[1], bfr[3]);
    }
  }
}

// out (16 x D: 2 NF C fragments) += X (16 x 64, the C fragments x, rounded to bf16) times the tile
// `b` (64 x D, stride ld): O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q.
template <int NF>
__device__ __forceinline__ void frags_times_tile(float (&out)[2 * NF][4], const float (&x)[8][4], const bf* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    std::uint32_t af[4];
    c_to_a(af, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int np = 0; np < NF; ++np) {
      std::uint32_t bfr[4];
      ldsm_x4<true>(bfr, b + (16 * kk) * ld + 16 * np, ld);
      mma16816(out[2 * np], af, bfr[0], bfr[1]);
      mma16816(out[2 * np + 1], af, bfr[2], bfr[3]);
    }
  }
}

// e^x as 2^(x log2 e): exp2f is the hardware ex2 (with its subnormal handling), a few instructions
// fewer than expf's range reduction. The rounding of x log2 e costs ~(1 + |x|) 1e-7 relative, and the
// arguments here are x <= 0 (up to rounding) where e^x matters only for |x| of a few tens: far inside
// the bf16 roundings that follow (2^-8).
__device__ __forceinline__ float exp_e(float x) { return exp2f(x * 1.4426950408889634f); }

// The position / document span of rows first..first+n-1 of a staged mask (n <= 64; n <= 0: the empty
// span, min INT_MAX and max INT_MIN), the same in every lane of the warp.
struct Span {
  int pos_min, pos_max, doc_min, doc_max;
};
__device__ __forceinline__ Span warp_span(const int* pos_s, const int* doc_s, int first, int n) {
  const int lane = threadIdx.x & 31;
  int pmin = INT_MAX, pmax = INT_MIN, dmin = INT_MAX, dmax = INT_MIN;
  for (int i = lane; i < n; i += 32) {
    pmin = min(pmin, pos_s[first + i]);
    pmax = max(pmax, pos_s[first + i]);
    dmin = min(dmin, doc_s[first + i]);
    dmax = max(dmax, doc_s[first + i]);
  }
  return {__reduce_min_sync(kFull, pmin), __reduce_max_sync(kFull, pmax), __reduce_min_sync(kFull, dmin),
          __reduce_max_sync(kFull, dmax)};
}
// The positions and document ids of one tile, read into registers a tile ahead (threads < 64, one
// token each; 0 past the end, as stage_mask leaves them) and staged into shared memory when the tile
// comes up, so the global load's latency hides behind the previous tile's work. `valid`: the thread's
// token exists (the tile-skipping vote of the pipelines below counts only those).
struct MaskAhead {
  int pos = 0, doc = 0;
  bool valid = false;
  // Tokens first..first+63 of the sequence (pos_g, doc_g: its first token; doc_g null: one document).
  __device__ __forceinline__ void load(const std::int32_t* pos_g, const std::int32_t* doc_g, std::int64_t first,
                                       std::int64_t total) {
    const int t = threadIdx.x;
    pos = 0;
    doc = 0;
    valid = t < kTile && first + t < total;
    if (valid) {
      pos = pos_g[first + t];
      doc = doc_g ? doc_g[first + t] : 0;
    }
  }
  __device__ __forceinline__ void store(int* pos_s, int* doc_s) const {
    const int t = threadIdx.x;
    if (t < kTile) {
      pos_s[t] = pos;
      doc_s[t] = doc;
    }
  }
};

// cp.async (LDGSTS): global to shared copies that bypass the registers and complete asynchronously, in
// groups: commit closes the thread's copies issued since the last commit into a group; wait<N> blocks
// until at most N of the thread's groups are pending. A barrier after the wait makes every thread's
// copies visible to the block. src_bytes 0 reads nothing and zero-fills the destination (tail rows).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool copy) {
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(copy ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool copy) {
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(copy ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A 64-row tile of D bf16 values (global rows from src, token stride ld; rows at or past `valid`
// zero-filled, as stage_bf16) into shared rows of stride ldd by a block of kThr threads, by cp.async
// when every source row is 16-byte aligned (visible after cp_async_wait and a barrier), else by
// stage_bf16's plain loads and stores (visible after the barrier). valid >= 1: src is then a readable
// address for the zero-fills.
template <int D, int kThr = kThreads>
__device__ __forceinline__ void stage_bf16_async(bf* dst, int ldd, const bf* src, std::int64_t ld, int valid) {
  const bool vec = ((reinterpret_cast<std::uintptr_t>(src) | static_cast<std::uintptr_t>(ld * 2)) & 15) == 0;
  if (!vec) {
    stage_bf16<kThr, kTile>(dst, ldd, src, ld, valid, D);
    return;
  }
  constexpr int kChunks = D / 8, kAll = kTile * kChunks;  // 16-byte chunks: per row, per tile (8 D)
#pragma unroll
  for (int i = 0; i < (kAll + kThr - 1) / kThr; ++i) {
    const int idx = threadIdx.x + i * kThr, r = idx / kChunks, c = (idx - r * kChunks) * 8;
    if (kAll % kThr == 0 || idx < kAll) {
      const bool copy = r < valid;
      cp_async16(dst + r * ldd + c, copy ? src + r * ld + c : src, copy);
    }
  }
}

// No query of qs sees a key of ks.
__device__ __forceinline__ bool none_visible(const Span& qs, const Span& ks) {
  return ks.pos_min > qs.pos_max || ks.doc_max < qs.doc_min || ks.doc_min > qs.doc_max;
}
// Every query of qs sees every key of ks (both non-empty).
__device__ __forceinline__ bool all_visible(const Span& qs, const Span& ks) {
  return ks.pos_max <= qs.pos_min && ks.doc_min == ks.doc_max && qs.doc_min == qs.doc_max && ks.doc_min == qs.doc_min;
}

// The 16 x D fp32 accumulator fragments of one warp (rows r0 + g and r0 + g + 8 of a tile starting at
// global row `dst`, token stride ld) to global memory, rows < valid (overwrite).
template <int NF>
__device__ __forceinline__ void write_acc(float* dst, std::int64_t ld, const float (&acc)[2 * NF][4], int r0,
                                          int valid) {
  const int lane = threadIdx.x & 31, ra = r0 + (lane >> 2), rb = ra + 8, c = 2 * (lane & 3);
  float* da = dst + ra * ld + c;
  float* db = dst + rb * ld + c;
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n) {
    if (ra < valid) {
      da[8 * n] = acc[n][0];
      da[8 * n + 1] = acc[n][1];
    }
    if (rb < valid) {
      db[8 * n] = acc[n][2];
      db[8 * n + 1] = acc[n][3];
    }
  }
}

}  // namespace herd::kernels::cuda::attn::mma

// The bf16 micro-GEMM of attention's tiles on AMX (tile_gemm_bf16.h): the same operands, pairs along
// the reduction index, fed to TDPBF16PS 16 x 16 x 16 pairs at a time.
//
// An AMX tile holds 16 rows of 64 bytes. TDPBF16PS C, A, B computes, for each of C's 16 x 16 fp32
// elements, C[i][j] += sum over the tile's 16 pairs p of A[i].pair[p] . B[p].pair[j]: A is 16 rows of
// 16 pair words (a row-major A, a_ps = 1) and B 16 rows (pairs of k) of 16 columns' pair words (the
// "down" layout), so both operands load as they are stored, with their row strides. What does not fit
// a whole tile (an m or n edge, a kp that is not a multiple of 16, or an A given by pairs of rows,
// a_is = 1, which a tile would need transposed: in registers where the tile is whole) is copied into
// zero-padded 16 x 16 word tiles first; zero pairs add nothing. A C tile on an edge is summed in a
// 16 x 16 buffer and only its valid part is written back, so C's padding is never touched.
//
// Linux grants a process the 8 KiB tile register state only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM): the first call asks, and a refusal (an old kernel, a hypervisor that hides it)
// leaves the vdpbf16ps path. The tile configuration (8 tiles of 16 x 64 bytes) is loaded at every call,
// because oneDNN's AMX GEMMs on the same thread load their own, and released at its end, except inside
// an AmxTileScope (tile_gemm_bf16.h), which holds it for a run of micro-GEMMs.
//
// One C tile at a time: a 2 x 2 block of C tiles (four independent TDPBF16PS chains) measured the same
// in attention, with and without the register transpose (docs/kernels.md).
//
// Numerics: as vdpbf16ps (tile_gemm_bf16.h), each product of two bf16 values is exact and the sums are
// fp32 with round-to-nearest-even, subnormals flushed; the pairs are summed in k order within and
// across tiles, so the results are those of an fp32 sum of the exact products in one fixed order.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "herd/core/check.h"
#include "herd/kernels/cpu/common.h"
#include "herd/kernels/cpu/cpu_features.h"
#include "herd/kernels/cpu/tile_gemm_bf16.h"

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HERD_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))
#define HERD_HAVE_AMX_BUILD 1
#endif

namespace herd::kernels::cpu {

namespace {
std::atomic<TileGemmIsa> g_isa{TileGemmIsa::kAuto};
thread_local bool t_scoped = false;  // an AmxTileScope holds this thread's tile configuration
}  // namespace

bool have_amx_tiles() {
#ifdef HERD_HAVE_AMX_BUILD
  static const bool granted = [] {
    if (!cpu_features().amx_bf16) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

void set_tile_gemm_isa(TileGemmIsa isa) { g_isa.store(isa); }

TileGemmIsa tile_gemm_isa() {
  const TileGemmIsa isa = g_isa.load(std::memory_order_relaxed);
  if (isa == TileGemmIsa::kAvx512Bf16) return isa;
  if (isa == TileGemmIsa::kAmx) {
    HERD_CHECK(have_amx_tiles(), "the AMX micro-GEMM was asked for on a CPU or kernel without AMX-BF16 tiles");
    return isa;
  }
  return have_amx_tiles() ? TileGemmIsa::kAmx : TileGemmIsa::kAvx512Bf16;
}

#ifdef HERD_HAVE_AMX_BUILD
namespace {

constexpr std::int64_t kT = 16;  // tile rows, and 32-bit words (pairs, or fp32 sums) per tile row

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

const TileConfig& full_tiles() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = kT * 4;
      c.rows[t] = kT;
    }
    return c;
  }();
  return cfg;
}

// The 16 x 16 word tile at rows r0.., columns c0.. of a (rows, cols) word matrix (element (r, c) at
// x[r * rs + c * cs]), zero past its edges, into dst (16 x 16, row stride 16). A whole tile stored by
// columns (rs = 1: an A given by pairs of rows) is transposed in registers instead of copied word by
// word with a stride.
void copy_tile(const std::uint32_t* x, std::int64_t rs, std::int64_t cs, std::int64_t rows, std::int64_t cols,
               std::int64_t r0, std::int64_t c0, std::uint32_t* dst) {
  const std::int64_t nr = std::min(kT, rows - r0), nc = std::min(kT, cols - c0);
  if (rs == 1 && cs != 1 && nr == kT && nc == kT) {
    transpose_words16(x + r0 + c0 * cs, cs, dst);  // x's columns c0.. are the tile's rows
    return;
  }
  for (std::int64_t r = 0; r < kT; ++r) {
    std::uint32_t* d = dst + r * kT;
    if (r >= nr) {
      std::memset(d, 0, kT * 4);
      continue;
    }
    const std::uint32_t* s = x + (r0 + r) * rs + c0 * cs;
    if (cs == 1) {
      std::memcpy(d, s, static_cast<std::size_t>(nc) * 4);
    } else {
      for (std::int64_t c = 0; c < nc; ++c) d[c] = s[c * cs];
    }
    std::fill(d + nc, d + kT, 0u);
  }
}

HERD_AMX_TARGET void load_config() { _tile_loadconfig(&full_tiles()); }
HERD_AMX_TARGET void release_tiles() { _tile_release(); }

HERD_AMX_TARGET void gemm_amx(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                              std::int64_t a_is, std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c,
                              std::int64_t ldc, bool accumulate) {
  const std::int64_t mt = (m + kT - 1) / kT, nt = (n + kT - 1) / kT, kt = (kp + kT - 1) / kT;
  // Operands in place where whole tiles cover them; else packed, tile after tile, 256 words each, in
  // this thread's scratch slots 5 and 6 (attention_bf16.cpp's packers hold slots 0-4 of the same type).
  const bool a_direct = a_ps == 1 && m % kT == 0 && kp % kT == 0;
  const bool b_direct = n % kT == 0 && kp % kT == 0;
  std::uint32_t* ap =
      a_direct ? nullptr : thread_scratch<std::uint32_t, 5>(static_cast<std::size_t>(mt * kt * kT * kT));
  std::uint32_t* bp =
      b_direct ? nullptr : thread_scratch<std::uint32_t, 6>(static_cast<std::size_t>(kt * nt * kT * kT));
  if (!a_direct) {
    for (std::int64_t i = 0; i < mt; ++i)
      for (std::int64_t q = 0; q < kt; ++q)
        copy_tile(a, a_is, a_ps, m, kp, i * kT, q * kT, ap + (i * kt + q) * kT * kT);
  }
  if (!b_direct) {
    for (std::int64_t q = 0; q < kt; ++q)
      for (std::int64_t j = 0; j < nt; ++j) copy_tile(b, ldb, 1, kp, n, q * kT, j * kT, bp + (q * nt + j) * kT * kT);
  }
  alignas(64) float edge[kT * kT];
  const bool own_config = !t_scoped;
  if (own_config) load_config();
  for (std::int64_t i = 0; i < mt; ++i) {
    const std::int64_t rows = std::min(kT, m - i * kT);
    for (std::int64_t j = 0; j < nt; ++j) {
      const std::int64_t cols = std::min(kT, n - j * kT);
      float* cij = c + i * kT * ldc + j * kT;
      const bool whole = rows == kT && cols == kT;
      if (!accumulate) {
        _tile_zero(0);
      } else if (whole) {
        _tile_loadd(0, cij, ldc * 4);
      } else {
        for (std::int64_t r = 0; r < kT; ++r)
          for (std::int64_t s = 0; s < kT; ++s) edge[r * kT + s] = r < rows && s < cols ? cij[r * ldc + s] : 0.0f;
        _tile_loadd(0, edge, kT * 4);
      }
      for (std::int64_t q = 0; q < kt; ++q) {
        if (a_direct) {
          _tile_loadd(4, a + i * kT * a_is + q * kT, a_is * 4);
        } else {
          _tile_loadd(4, ap + (i * kt + q) * kT * kT, kT * 4);
        }
        if (b_direct) {
          _tile_loadd(6, b + q * kT * ldb + j * kT, ldb * 4);
        } else {
          _tile_loadd(6, bp + (q * nt + j) * kT * kT, kT * 4);
        }
        _tile_dpbf16ps(0, 4, 6);
      }
      if (whole) {
        _tile_stored(0, cij, ldc * 4);
      } else {
        _tile_stored(0, edge, kT * 4);
        for (std::int64_t r = 0; r < rows; ++r)
          std::memcpy(cij + r * ldc, edge + r * kT, static_cast<std::size_t>(cols) * 4);
      }
    }
  }
  // Back to the init state (here, or where the scope ends): a core with live tile data cannot enter its
  // deep idle states (Intel's AMX guidance), and the next call loads its configuration anyway.
  if (own_config) release_tiles();
}

}  // namespace
#endif

AmxTileScope::AmxTileScope() {
#ifdef HERD_HAVE_AMX_BUILD
  if (t_scoped || tile_gemm_isa() != TileGemmIsa::kAmx) return;
  load_config();
  t_scoped = held_ = true;
#endif
}

AmxTileScope::~AmxTileScope() {
#ifdef HERD_HAVE_AMX_BUILD
  if (!held_) return;
  release_tiles();
  t_scoped = false;
#endif
}

void tile_gemm_amx(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a, std::int64_t a_is,
                   std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                   bool accumulate) {
#ifdef HERD_HAVE_AMX_BUILD
  // No special cases: m or n of 0 is no tile, and kp of 0 no TDPBF16PS between C's load (or zero) and store.
  HERD_CHECK(have_amx_tiles(), "tile_gemm_amx needs AMX-BF16 tiles");
  gemm_amx(m, n, kp, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
#else
  (void)m, (void)n, (void)kp, (void)a, (void)a_is, (void)a_ps, (void)b, (void)ldb, (void)c, (void)ldc, (void)accumulate;
  HERD_CHECK(false, "tile_gemm_amx needs AMX-BF16 tiles (x86-64 Linux)");
#endif
}

}  // namespace herd::kernels::cpu

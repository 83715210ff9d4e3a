// gemm through cblas (OpenBLAS), gemm_bf16 through oneDNN's matmul, the naive references, and the
// shared thread-count setting.
//
// Threading: herd splits a large GEMM itself, across the OpenMP team its other kernels use, into
// independent column or row blocks of C, each a single-threaded library call; the libraries run one
// thread each. With two thread pools (OpenBLAS's pthreads and OpenMP's) the OpenMP workers keep
// spinning for milliseconds after each of herd's parallel regions and take the cores from the BLAS
// threads that start next: on 2 cores, 19% of the step's CPU time went to that spinning (perf, tiny
// preset). One pool removes it, and lets each block use the faster single-threaded library
// (oneDNN for non-transposed A, docs/blas.md). Splitting along m or n leaves every element's
// k-summation to one call, as in an unsplit call; a bf16 weight gradient sums its k in chunks of 512
// (kKChunk), chunk after chunk in k order at every thread count.
#include "herd/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>
#ifdef HERD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <signal.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "herd/core/check.h"
#include "herd/core/log.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/cpu/cpu_features.h"

namespace herd::kernels {

namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

void check_dims(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                std::int64_t ldc) {
  HERD_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  // Row-major: A stored (m, k) or, transposed, (k, m); its row stride covers a stored row.
  HERD_CHECK(lda >= (ta == Trans::kNo ? k : m) && lda >= 1, "gemm lda=", lda);
  HERD_CHECK(ldb >= (tb == Trans::kNo ? n : k) && ldb >= 1, "gemm ldb=", ldb);
  HERD_CHECK(ldc >= n && ldc >= 1, "gemm ldc=", ldc);
  HERD_CHECK(m < (std::int64_t{1} << 31) && n < (std::int64_t{1} << 31) && k < (std::int64_t{1} << 31),
             "gemm dimension beyond the 32-bit BLAS interface");
}

#ifdef HERD_HAVE_DNNL
// Holds the calling thread's asynchronous signals while a oneDNN kernel runs, and delivers them after.
// oneDNN's JIT GEMM kernels (2.6 in Debian 12, and up to 3.11) point rsp into the heap while they run,
// so the frame of a signal handled on their thread lands in the heap and corrupts it (fixed in
// oneDNN 3.12): a SIGTERM to a training rank, or SIGUSR2 for a dump, aborted it in a later malloc or
// free in 1 of 4 tries. Held, a signal goes to a thread that is not in such a kernel, or waits for this
// one's return. The faults a kernel itself raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL) stay deliverable.
class AsyncSignalsHeld {
 public:
  AsyncSignalsHeld() {
    sigset_t held;
    sigfillset(&held);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&held, s);
    pthread_sigmask(SIG_BLOCK, &held, &previous_);
  }
  ~AsyncSignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  AsyncSignalsHeld(const AsyncSignalsHeld&) = delete;
  AsyncSignalsHeld& operator=(const AsyncSignalsHeld&) = delete;

 private:
  sigset_t previous_;
};
#endif

std::atomic<GemmPolicy> g_policy{GemmPolicy::kAuto};
std::atomic<int> g_threads{0};  // herd's thread count for GEMM splitting; 0 until first set or use

// The first use fixes OpenBLAS at one thread (herd splits GEMMs itself) and takes the OpenMP default
// as herd's thread count unless set_num_threads came first.
void init_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    int expected = 0;
    g_threads.compare_exchange_strong(expected, omp_get_max_threads());
  });
}

// single: the call is a block of a split GEMM (or runs inside some other parallel region), so one thread;
// otherwise one thread is when OpenMP has one. oneDNN is the faster single-threaded sgemm for non-transposed A.
bool use_onednn(Trans ta, bool single) {
#ifdef HERD_HAVE_DNNL
  switch (g_policy.load(std::memory_order_relaxed)) {
    case GemmPolicy::kOpenBLAS: return false;
    case GemmPolicy::kOneDNN: return true;
    case GemmPolicy::kAuto: return ta == Trans::kNo && (single || omp_get_max_threads() == 1);
  }
#endif
  (void)ta;
  (void)single;
  return false;
}

void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                  bool single) {
#ifdef HERD_HAVE_DNNL
  if (use_onednn(ta, single)) {
    const AsyncSignalsHeld held;
    const dnnl_status_t st = dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', m, n, k, alpha, a,
                                        lda, b, ldb, beta, c, ldc);
    HERD_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st));
    return;
  }
#endif
  (void)single;
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                  std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc,
                  bool /*single*/) {
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// bf16 inputs (below): oneDNN's matmul where it serves the layout, else converted to fp32; the output
// in fp32, or rounded to bf16 as it is written.
void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                  std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                  bool single);
void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                  std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, bf16* c, std::int64_t ldc,
                  bool single);

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kSplitMinMacs = 2.0e6;
// Block edges are multiples of this, so every block but the last is whole vectors and cache lines.
constexpr std::int64_t kSplitAlign = 64;

// On oneDNN's path a bf16 weight gradient (C = A^T B into fp32, k the tokens) runs as calls of at most
// this many k, each added into C. oneDNN 2.6 copies the transposed A and re-lays B into AMX pairs inside
// every call; at k = 4,096 its weight gradients of `small` ran at 444-594 GFLOP/s on one thread against
// 682-897 forward, and in chunks of 512 at 586-734. At two threads each thread takes its own rows of C
// (it copies only its own columns of A^T): the qkv, wo and down gradients 1,050-1,287 -> 1,351-1,673,
// gate_up 1,450-1,520 either way (`herd_bench_kernels --threads T --reps 5 --only gemm_bf16`; the
// step's other shapes unchanged; docs/precision.md, "Weight gradients in k chunks").
constexpr std::int64_t kKChunk = 512;

// Whether op(A) op(B) runs in k chunks: bf16 inputs, an fp32 C (a bf16 C is rounded once, so it cannot
// be accumulated in parts), A transposed (the weight gradient's layout), and k beyond one chunk.
template <typename In, typename Out>
bool in_k_chunks(Trans ta, std::int64_t k) {
  return std::is_same_v<In, bf16> && std::is_same_v<Out, float> && ta == Trans::kYes && k > kKChunk;
}

// One block of C: the library call, or, in_k_chunks, the k chunks in order, the first with the caller's
// beta and the rest adding (beta 1): every element of C sums its chunks in the same order whatever the
// thread count or block.
template <typename In, typename T, typename Out>
void block_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const In* a,
                std::int64_t lda, const In* b, std::int64_t ldb, T beta, Out* c, std::int64_t ldc, bool single) {
  if (!in_k_chunks<In, Out>(ta, k)) {
    library_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, single);
    return;
  }
  for (std::int64_t k0 = 0; k0 < k; k0 += kKChunk) {
    const std::int64_t kn = std::min(kKChunk, k - k0);
    const In* bk = tb == Trans::kNo ? b + k0 * ldb : b + k0;
    library_gemm(ta, tb, m, n, kn, alpha, a + k0 * lda, lda, bk, ldb, k0 == 0 ? beta : T(1), c, ldc, single);
  }
}

// C (m, n) in `parts` blocks along n when n is the larger side (row-major C: column blocks), else
// along m; each block is an ordinary GEMM on offset pointers. A GEMM in k chunks splits along m where
// it can: each thread then copies only its own part of the transposed A.
// In: the input element type (T, or bf16 with T = float); Out: C's (T, or bf16 with bf16 inputs).
template <typename In, typename T, typename Out = T>
void split_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const In* a,
                std::int64_t lda, const In* b, std::int64_t ldb, T beta, Out* c, std::int64_t ldc, int parts) {
  const bool along_n = in_k_chunks<In, Out>(ta, k) ? m < 2 * kSplitAlign : n >= m;
  const std::int64_t len = along_n ? n : m;
  const std::int64_t block = (len + parts - 1) / parts;
  const std::int64_t step = std::max(kSplitAlign, (block + kSplitAlign - 1) / kSplitAlign * kSplitAlign);
  const std::int64_t blocks = (len + step - 1) / step;
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t b0 = i * step, bn = std::min(step, len - b0);
    if (along_n) {
      const In* bb = tb == Trans::kNo ? b + b0 : b + b0 * ldb;
      block_gemm(ta, tb, m, bn, k, alpha, a, lda, bb, ldb, beta, c + b0, ldc, true);
    } else {
      const In* ab = ta == Trans::kNo ? a + b0 * lda : a + b0;
      block_gemm(ta, tb, bn, n, k, alpha, ab, lda, b, ldb, beta, c + b0 * ldc, ldc, true);
    }
  }
}

template <typename In, typename T, typename Out = T>
void gemm_impl(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const In* a,
               std::int64_t lda, const In* b, std::int64_t ldb, T beta, Out* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  init_threads();
  const int threads = g_threads.load(std::memory_order_relaxed);
  const bool inside = omp_in_parallel();
  const bool big = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= kSplitMinMacs;
  if (threads > 1 && !inside && big && std::max(m, n) >= 2 * kSplitAlign) {
    split_gemm<In, T, Out>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
    return;
  }
  block_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, inside);
}

// --- bf16 inputs, fp32 accumulation and output ---------------------------------------------------

std::atomic<Bf16GemmPath> g_bf16_path{Bf16GemmPath::kAuto};

#ifdef HERD_HAVE_DNNL
// One oneDNN matmul per (layout, sizes, strides, alpha, beta), created on first use and kept by the
// thread that uses it (herd's split runs each block on one thread of the team, so the primitives,
// their scratchpads and the stream are never shared). A layout oneDNN serves only with its reference
// implementation (or not at all) is remembered as unsupported and converted instead.
struct MatmulKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  std::uint32_t alpha_bits, beta_bits;
  bool ta, tb, dst_bf16;
  bool operator==(const MatmulKey&) const = default;
};
struct MatmulKeyHash {
  std::size_t operator()(const MatmulKey& x) const {
    std::size_t h = 1469598103934665603ull;
    for (std::int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldc, static_cast<std::int64_t>(x.alpha_bits),
                           static_cast<std::int64_t>(x.beta_bits), static_cast<std::int64_t>(x.ta),
                           static_cast<std::int64_t>(x.tb), static_cast<std::int64_t>(x.dst_bf16)}) {
      h = (h ^ static_cast<std::size_t>(v)) * 1099511628211ull;
    }
    return h;
  }
};
struct Matmul {
  bool ok = false;
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

Matmul make_matmul(const MatmulKey& key, float alpha, float beta) {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  Matmul mm;
  try {
    // Row-major op(A) (m, k) and op(B) (k, n) by strides: a transposed operand is the stored matrix
    // read down its columns.
    mm.a = dnnl::memory::desc({key.m, key.k}, dt::bf16, key.ta ? dims{1, key.lda} : dims{key.lda, 1});
    mm.b = dnnl::memory::desc({key.k, key.n}, dt::bf16, key.tb ? dims{1, key.ldb} : dims{key.ldb, 1});
    // A bf16 destination: oneDNN sums in fp32 and rounds to bf16 (nearest even) as it writes.
    mm.c = dnnl::memory::desc({key.m, key.n}, key.dst_bf16 ? dt::bf16 : dt::f32, dims{key.ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, cpu_engine());
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return mm;  // the slow reference: convert instead
    mm.prim = dnnl::matmul(pd);
    mm.ok = true;
  } catch (const dnnl::error&) {
    mm.ok = false;
  }
  return mm;
}

// false when oneDNN cannot serve this layout (the caller converts). C: float, or bf16.
template <typename C>
bool onednn_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, C* c, std::int64_t ldc) {
  thread_local std::unordered_map<MatmulKey, Matmul, MatmulKeyHash> cache;
  thread_local dnnl::stream stream(cpu_engine());
  const MatmulKey key{m,
                      n,
                      k,
                      lda,
                      ldb,
                      ldc,
                      float_bits(alpha),
                      float_bits(beta),
                      ta == Trans::kYes,
                      tb == Trans::kYes,
                      std::is_same_v<C, bf16>};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_matmul(key, alpha, beta)).first;
  const Matmul& mm = it->second;
  if (!mm.ok) return false;
  const dnnl::engine& eng = cpu_engine();
  dnnl::memory am(mm.a, eng, const_cast<bf16*>(a)), bm(mm.b, eng, const_cast<bf16*>(b)), cm(mm.c, eng, c);
  const AsyncSignalsHeld held;
  mm.prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
  return true;
}
#endif

// Widens a stored (rows, cols) bf16 matrix with row stride ld into a packed fp32 one.
void widen(std::int64_t rows, std::int64_t cols, const bf16* x, std::int64_t ld, float* out) {
  if (ld == cols) {
    to_float(x, rows * cols, out);
    return;
  }
  for (std::int64_t i = 0; i < rows; ++i) to_float(x + i * ld, cols, out + i * cols);
}

// The converted path: both inputs widened to fp32 (exact), then gemm<float>.
void converted_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                    std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const std::int64_t ar = ta == Trans::kNo ? m : k, ac = ta == Trans::kNo ? k : m;
  const std::int64_t br = tb == Trans::kNo ? k : n, bc = tb == Trans::kNo ? n : k;
  thread_local std::vector<float> wa, wb;
  if (wa.size() < static_cast<std::size_t>(ar * ac)) wa.resize(static_cast<std::size_t>(ar * ac));
  if (wb.size() < static_cast<std::size_t>(br * bc)) wb.resize(static_cast<std::size_t>(br * bc));
  widen(ar, ac, a, lda, wa.data());
  widen(br, bc, b, ldb, wb.data());
  gemm_impl<float, float>(ta, tb, m, n, k, alpha, wa.data(), ac, wb.data(), bc, beta, c, ldc);
}

// Whether oneDNN runs bf16 matmuls here with an implementation of its own: the CPU has bf16
// instructions and oneDNN is not held below them (ONEDNN_MAX_CPU_ISA, or a build for one ISA level,
// core/cpu_isa.h), in which case it cannot create the primitive at all.
bool onednn_runs_bf16() {
#ifdef HERD_HAVE_DNNL
  static const bool runs = [] {
    if (!cpu_has_bf16()) return false;
    constexpr std::int64_t n = 64;
    const MatmulKey key{n, n, n, n, n, n, float_bits(1.0f), float_bits(0.0f), false, false, false};
    return make_matmul(key, 1.0f, 0.0f).ok;
  }();
  return runs;
#else
  return false;
#endif
}

Bf16GemmPath resolved_bf16_path() {
  static const Bf16GemmPath detected = onednn_runs_bf16() ? Bf16GemmPath::kOneDNN : Bf16GemmPath::kConverted;
  const Bf16GemmPath p = g_bf16_path.load(std::memory_order_relaxed);
  return p == Bf16GemmPath::kAuto ? detected : p;
}

// One block of a split bf16 GEMM, or an unsplit one: oneDNN when it serves the layout, else converted.
void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                  std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                  bool /*single*/) {
#ifdef HERD_HAVE_DNNL
  if (onednn_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
#endif
  converted_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The fp32 result rounded to bf16 row by row (beta = 0: C is only written).
void rounded_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                  std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc, bool converted) {
  thread_local std::vector<float> wc;
  if (wc.size() < static_cast<std::size_t>(m * n)) wc.resize(static_cast<std::size_t>(m * n));
  if (converted) {
    converted_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, wc.data(), n);
  } else {
    library_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, wc.data(), n, true);
  }
  for (std::int64_t i = 0; i < m; ++i) to_bf16(wc.data() + i * n, n, c + i * ldc);
}

void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                  std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, bf16* c, std::int64_t ldc,
                  bool /*single*/) {
  HERD_CHECK(beta == 0.0f, "a bf16 GEMM output is written, not accumulated");
#ifdef HERD_HAVE_DNNL
  if (onednn_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
#endif
  rounded_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc, false);
}

}  // namespace

void set_gemm_policy(GemmPolicy p) { g_policy.store(p); }
GemmPolicy gemm_policy() { return g_policy.load(); }
bool have_onednn() {
#ifdef HERD_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

template <>
void gemm<float>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_impl<float, float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<double>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                  std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  gemm_impl<double, double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool cpu_has_bf16() {
  const cpu::CpuFeatures isa = cpu::cpu_features();
  return isa.avx512_bf16 || isa.amx_bf16;
}

void set_bf16_gemm_path(Bf16GemmPath p) { g_bf16_path.store(p); }
Bf16GemmPath bf16_gemm_path() { return resolved_bf16_path(); }

std::string bf16_gemm_description() {
  if (bf16_gemm_path() == Bf16GemmPath::kOneDNN) {
    return std::string("oneDNN bf16 matmul (") + (cpu::cpu_features().amx_bf16 ? "amx_bf16" : "avx512_bf16") + ")";
  }
  if (!have_onednn()) return "converted to fp32 and run as fp32 GEMMs (built without oneDNN)";
#if defined(HERD_CPU_FORCED)
  if (!cpu_has_bf16()) {
    return "converted to fp32 and run as fp32 GEMMs (no bf16 instructions at this build's level, "
           "HERD_CPU_ISA=" HERD_CPU_FORCED ")";
  }
#endif
  if (!cpu_has_bf16()) return "converted to fp32 and run as fp32 GEMMs (no bf16 instructions on this CPU)";
  if (!onednn_runs_bf16()) {
    const char* held = std::getenv("ONEDNN_MAX_CPU_ISA");
    return std::string("converted to fp32 and run as fp32 GEMMs (oneDNN has no bf16 matmul here") +
           (held != nullptr ? std::string(": ONEDNN_MAX_CPU_ISA=") + held : std::string()) + ")";
  }
  return "converted to fp32 and run as fp32 GEMMs (set by the caller)";
}

namespace {
// Whether bf16 GEMMs run converted to fp32; the first call under kAuto says so once on the log.
bool converted_bf16() {
  if (resolved_bf16_path() != Bf16GemmPath::kConverted) return false;
  static std::once_flag said;
  if (g_bf16_path.load() == Bf16GemmPath::kAuto) {
    std::call_once(said, [] {
      log_warning("bf16: ", bf16_gemm_description(),
                  "; the numerics are those of bf16 (bf16 inputs, fp32 sums), the speed that of fp32");
    });
  }
  return true;
}
}  // namespace

void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
               std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (converted_bf16()) {
    converted_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  gemm_impl<bf16, float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                       std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (converted_bf16()) {
    rounded_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c, ldc, true);
    return;
  }
  gemm_impl<bf16, float, bf16>(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

namespace {

double widened(float x) { return x; }
double widened(double x) { return x; }
double widened(bf16 x) { return to_float(x); }

// The naive triple loop in double, over stored inputs of type In (widened exactly) and outputs T.
template <typename In, typename T>
void naive_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const In* a,
                std::int64_t lda, const In* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const In x = ta == Trans::kNo ? a[i * lda + p] : a[p * lda + i];
        const In y = tb == Trans::kNo ? b[p * ldb + j] : b[j * ldb + p];
        s += widened(x) * widened(y);
      }
      // beta == 0 ignores C, as BLAS does (C may be uninitialised).
      const double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * s + prev);
    }
  }
}

}  // namespace

void gemm_bf16_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  naive_gemm<bf16, float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  naive_gemm<T, T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void gemm_reference<float>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                    std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
template void gemm_reference<double>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                     std::int64_t, const double*, std::int64_t, double, double*, std::int64_t);

void set_num_threads(int n) {
  HERD_CHECK(n >= 1, "thread count ", n);
  g_threads.store(n);
  init_threads();
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_name() { return openblas_get_config(); }

}  // namespace herd::kernels

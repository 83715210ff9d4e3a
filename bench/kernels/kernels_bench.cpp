// Kernel throughput on the small preset's shapes (dim 512, 8 heads / 2 KV heads of 64, FFN 1536,
// vocab 8192, 8 sequences of 512): herd's gemm wrapper against the BLAS's own square-GEMM peak, and
// the non-GEMM kernels (attention forward/backward, cross-entropy, RMSNorm, SwiGLU, RoPE, AdamW) in
// GFLOP/s or GB/s, with their time per training step. Median of --reps runs. Writes JSON. Attention
// runs in fp32 and with bf16 inputs, at the small and the tiny preset's heads. --only SECTION runs
// the square GEMM (the peak every row is a fraction of) and that section alone: gemm, gemm_bf16 (the
// same shapes through gemm_bf16, where the CPU has bf16 instructions), attention, cross_entropy or memory.
//
//   herd_bench_kernels [--out file.json] [--threads N] [--reps N] [--seq 512] [--batch 8] [--clock wall|cpu]
//                      [--only SECTION] [--operand-offset BYTES (gemm_bf16's operands, default 0)]
//                      [--flush-mb MB (before each timed run, write a buffer that size: cold operands)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/core/aligned.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/cpu/tile_gemm.h"
#include "herd/kernels/cpu/tile_gemm_bf16.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/library_env.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/rope.h"
#include "herd/kernels/swiglu.h"

namespace {

using namespace herd::kernels;

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The machine is shared: besides wall time, the process CPU time of each run is kept. With one
// thread it is the time the kernel would take on an idle core (cache sharing aside), so
// --clock cpu gives stable numbers under contention; with several threads it over-counts spinning.
bool g_cpu_clock = false;
std::vector<double> g_wall;  // wall-clock median of the last measurement

// --flush-mb: written (one byte per cache line) before each timed run and outside its time, so that
// the operands come from memory as in a training step, where a layer's other tensors pass through
// the caches between two uses of one (docs/precision.md: the step's GEMMs run between the hot and
// the flushed rates). Empty: operands stay hot from the run before.
std::vector<unsigned char> g_flush;

void flush_caches() {
  for (std::size_t i = 0; i < g_flush.size(); i += 64) ++g_flush[i];
}

double median_seconds(int reps, const std::function<void()>& f) {
  f();  // warm-up: thread pools, scratch buffers, page faults
  std::vector<double> t, w;
  for (int r = 0; r < reps; ++r) {
    flush_caches();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    f();
    t.push_back(process_cpu_seconds() - c0);
    w.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::sort(w.begin(), w.end());
  g_wall = {w[w.size() / 2]};
  return g_cpu_clock ? t[t.size() / 2] : w[w.size() / 2];
}

// Operands start on a cache line, as the trainer's tensors do (core/aligned.h says why it matters).
using Buf = herd::AlignedVector<float>;

Buf filled(std::size_t n, float scale = 0.02f) {
  Buf v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>(static_cast<int>((i * 2654435761u) % 2001) - 1000) / 1000.0f;
  return v;
}

struct Gemm {
  const char* name;
  Trans ta, tb;
  std::int64_t m, n, k;
  // Stored A and B: elements, and row strides (a transposed operand is stored the other way round).
  std::int64_t lda() const { return ta == Trans::kNo ? k : m; }
  std::int64_t ldb() const { return tb == Trans::kNo ? n : k; }
  std::int64_t a_size() const { return m * k; }
  std::int64_t b_size() const { return k * n; }
};

}  // namespace

int main(int argc, char** argv) {
  herd::kernels::settle_library_env(argv);  // the OpenMP wait and OpenBLAS kernels herd itself runs with
  std::string out_path, only;
  std::size_t operand_offset = 0;  // bytes past the cache line of the gemm_bf16 operands
  int threads = 1, reps = 5;
  std::int64_t seq = 512, batch = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--out") out_path = argv[i + 1];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--seq") seq = std::atoll(argv[i + 1]);
    if (a == "--batch") batch = std::atoll(argv[i + 1]);
    if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
    if (a == "--only") only = argv[i + 1];
    if (a == "--operand-offset") operand_offset = static_cast<std::size_t>(std::atoll(argv[i + 1]));
    if (a == "--flush-mb") g_flush.assign(static_cast<std::size_t>(std::atoll(argv[i + 1])) << 20, 0);
    if (a == "--gemm") {
      const std::string g = argv[i + 1];
      set_gemm_policy(g == "openblas" ? GemmPolicy::kOpenBLAS
                      : g == "onednn" ? GemmPolicy::kOneDNN
                                      : GemmPolicy::kAuto);
    }
  }
  set_num_threads(threads);
  const std::int64_t dim = 512, hq = 8, hkv = 2, hd = 64, ffn = 1536, vocab = 8192, n = batch * seq;
  auto wanted = [&](const char* section) { return only.empty() || only == section; };
  herd::Json doc = herd::bench::envelope("kernels");
  doc["threads"] = threads;
  if (!only.empty()) doc["only"] = only;
  doc["flush_mb"] = g_flush.size() >> 20;
  doc["clock"] = g_cpu_clock ? "process cpu time" : "wall";
  doc["blas"] = blas_name();
  const GemmPolicy policy = gemm_policy();
  doc["gemm_policy"] = policy == GemmPolicy::kOpenBLAS ? "openblas" : policy == GemmPolicy::kOneDNN ? "onednn" : "auto";
  doc["have_onednn"] = have_onednn();
  doc["shape"] = {{"dim", dim}, {"q_heads", hq},  {"kv_heads", hkv}, {"head_dim", hd},
                  {"ffn", ffn}, {"vocab", vocab}, {"seq", seq},      {"batch", batch}};
  auto report = [&](const std::string& name, double sec, double flops, double bytes, double per_step) {
    herd::Json r{{"kernel", name}, {"seconds", sec}, {"wall_seconds", g_wall[0]}, {"calls_per_step", per_step}};
    if (flops > 0) r["gflops"] = flops / sec * 1e-9;
    if (bytes > 0) r["gbytes_per_s"] = bytes / sec * 1e-9;
    std::fprintf(stderr, "%-34s %9.3f ms  %8.1f GFLOP/s  %7.1f GB/s  x%g per step\n", name.c_str(), sec * 1e3,
                 flops > 0 ? flops / sec * 1e-9 : 0.0, bytes > 0 ? bytes / sec * 1e-9 : 0.0, per_step);
    doc["results"].push_back(r);
    return r;
  };

  // GEMMs: the BLAS's peak on a large square, then the model's shapes through herd's wrapper.
  const Gemm gemms[] = {
      {"gemm square 2048", Trans::kNo, Trans::kNo, 2048, 2048, 2048},
      {"gemm qkv fwd (NT)", Trans::kNo, Trans::kYes, n, dim + 2 * hkv * hd, dim},
      {"gemm wo fwd (NT)", Trans::kNo, Trans::kYes, n, dim, dim},
      {"gemm gate_up fwd (NT)", Trans::kNo, Trans::kYes, n, 2 * ffn, dim},
      {"gemm down fwd (NT)", Trans::kNo, Trans::kYes, n, dim, ffn},
      {"gemm gate_up dx (NN)", Trans::kNo, Trans::kNo, n, dim, 2 * ffn},
      {"gemm gate_up dw (TN)", Trans::kYes, Trans::kNo, 2 * ffn, dim, n},
      {"gemm qkv dw (TN)", Trans::kYes, Trans::kNo, dim + 2 * hkv * hd, dim, n},
      {"gemm wo dw (TN)", Trans::kYes, Trans::kNo, dim, dim, n},
      {"gemm down dw (TN)", Trans::kYes, Trans::kNo, dim, ffn, n},
  };
  double peak = 0;
  for (const Gemm& g : gemms) {
    auto a = filled(static_cast<std::size_t>(g.a_size())), b = filled(static_cast<std::size_t>(g.b_size()));
    Buf c(g.m * g.n);
    const double sec = median_seconds(reps, [&] {
      gemm<float>(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), g.lda(), b.data(), g.ldb(), 0.0f, c.data(), g.n);
    });
    herd::Json r = report(g.name, sec, 2.0 * g.m * g.n * g.k, 0, 0);
    if (peak == 0) peak = r["gflops"].get<double>();
    doc["results"].back()["fraction_of_square_peak"] = r["gflops"].get<double>() / peak;
    if (!wanted("gemm")) break;
  }
  doc["gemm_peak_gflops"] = peak;

  // The same shapes with bf16 inputs (gemm_bf16: bf16 products, fp32 sums and output) on the path this
  // CPU takes (bf16_gemm: oneDNN's bf16 matmul with bf16 instructions, else converted to fp32 GEMMs): the
  // rate of the bf16 step's GEMMs at its shapes, to set beside PyTorch's (bench/train/torch_peer.py
  // --matmul-shapes) on the same core.
  if (wanted("gemm_bf16")) {
    doc["bf16_gemm"] = bf16_gemm_description();
    doc["operand_offset_bytes"] = operand_offset;
    double peak16 = 0;
    for (const Gemm& g : gemms) {
      // --operand-offset shifts every operand that many bytes past the cache line (0: aligned, as the
      // trainer's tensors; 16: where glibc puts a large std::vector), to show what alignment is worth.
      const std::size_t shift16 = operand_offset / sizeof(herd::bf16), shift32 = operand_offset / sizeof(float);
      const auto af = filled(static_cast<std::size_t>(g.a_size())), bf = filled(static_cast<std::size_t>(g.b_size()));
      herd::AlignedVector<herd::bf16> a(af.size() + shift16), b(bf.size() + shift16);
      to_bf16(af.data(), static_cast<std::int64_t>(af.size()), a.data() + shift16);
      to_bf16(bf.data(), static_cast<std::int64_t>(bf.size()), b.data() + shift16);
      Buf c(static_cast<std::size_t>(g.m * g.n) + shift32);
      const double sec = median_seconds(reps, [&] {
        gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data() + shift16, g.lda(), b.data() + shift16, g.ldb(), 0.0f,
                  c.data() + shift32, g.n);
      });
      herd::Json r = report(std::string("bf16 ") + g.name, sec, 2.0 * g.m * g.n * g.k, 0, 0);
      if (peak16 == 0) peak16 = r["gflops"].get<double>();
      doc["results"].back()["fraction_of_square_peak"] = r["gflops"].get<double>() / peak16;
    }
    doc["gemm_bf16_peak_gflops"] = peak16;
  }

  // The twelve GEMMs of one transformer layer's forward and backward (fused QKV, output projection,
  // fused gate/up, down; each as Y = X W^T, dX = dY W, dW += dY^T X), run back to back: the figure the
  // training step's GEMM time follows.
  if (wanted("gemm")) {
    const std::int64_t outs[4] = {dim + 2 * hkv * hd, dim, 2 * ffn, dim};
    const std::int64_t ins[4] = {dim, dim, dim, ffn};
    std::vector<Buf> x, w, y, dw;
    for (int l = 0; l < 4; ++l) {
      x.push_back(filled(n * ins[l], 1.0f));
      w.push_back(filled(outs[l] * ins[l]));
      y.push_back(filled(n * outs[l], 1.0f));
      dw.push_back(Buf(outs[l] * ins[l]));
    }
    Buf dx(n * ffn);
    double flop = 0;
    for (int l = 0; l < 4; ++l) flop += 6.0 * n * outs[l] * ins[l];
    const double sec = median_seconds(reps, [&] {
      for (int l = 0; l < 4; ++l) {
        gemm<float>(Trans::kNo, Trans::kYes, n, outs[l], ins[l], 1.0f, x[l].data(), ins[l], w[l].data(), ins[l], 0.0f,
                    y[l].data(), outs[l]);
        gemm<float>(Trans::kNo, Trans::kNo, n, ins[l], outs[l], 1.0f, y[l].data(), outs[l], w[l].data(), ins[l], 0.0f,
                    dx.data(), ins[l]);
        gemm<float>(Trans::kYes, Trans::kNo, outs[l], ins[l], n, 1.0f, y[l].data(), outs[l], x[l].data(), ins[l], 1.0f,
                    dw[l].data(), ins[l]);
      }
    });
    report("gemm layer mix (12 GEMMs fwd+bwd)", sec, flop, 0, 8);
    doc["results"].back()["fraction_of_square_peak"] = flop / sec * 1e-9 / peak;
  }

  // The attention micro-GEMM alone on one 64 x 64 x 64 tile (repeated to be measurable), fp32 and, on
  // a CPU with AVX512_BF16, the bf16 one (vdpbf16ps, and AMX tiles where the CPU has them) on operands
  // packed as the bf16 kernel packs them.
  if (wanted("attention")) {
    auto a = filled(64 * 64, 1.0f), b = filled(64 * 64, 1.0f);
    Buf c(64 * 64);
    const int inner = 2000;
    const double sec = median_seconds(reps, [&] {
      for (int r = 0; r < inner; ++r)
        herd::kernels::cpu::tile_gemm<float>(64, 64, 64, a.data(), 64, 1, b.data(), 64, c.data(), 64, true);
    });
    report("attention micro-GEMM 64x64x64", sec / inner, 2.0 * 64 * 64 * 64, 0, 0);
    doc["results"].back()["fraction_of_square_peak"] = 2.0 * 64 * 64 * 64 / (sec / inner) * 1e-9 / peak;
    if (herd::kernels::cpu::have_dpbf16()) {
      std::vector<std::uint32_t> a2(64 * 32), b2(32 * 64);
      herd::kernels::cpu::pack_pairs_across(a.data(), 64, 64, 64, a2.data(), 32);
      herd::kernels::cpu::pack_pairs_down(b.data(), 64, 64, 64, b2.data());
      using herd::kernels::cpu::TileGemmIsa;
      std::vector<TileGemmIsa> isas{TileGemmIsa::kAvx512Bf16};
      if (herd::kernels::cpu::have_amx_tiles()) isas.push_back(TileGemmIsa::kAmx);
      for (TileGemmIsa isa : isas) {
        herd::kernels::cpu::set_tile_gemm_isa(isa);
        const double sec16 = median_seconds(reps, [&] {
          for (int r = 0; r < inner; ++r)
            herd::kernels::cpu::tile_gemm_bf16(64, 64, 32, a2.data(), 32, 1, b2.data(), 64, c.data(), 64, true);
        });
        report(std::string("attention micro-GEMM 64x64x64 bf16 ") + (isa == TileGemmIsa::kAmx ? "amx" : "vdpbf16ps"),
               sec16 / inner, 2.0 * 64 * 64 * 64, 0, 0);
        doc["results"].back()["fraction_of_square_peak"] = 2.0 * 64 * 64 * 64 / (sec16 / inner) * 1e-9 / peak;
      }
      herd::kernels::cpu::set_tile_gemm_isa(TileGemmIsa::kAuto);
    }
  }

  // Attention, causal, one document per sequence, at the small preset's heads (8 on 2 KV heads of 64)
  // and the tiny one's (8 on 4 of 32): fp32, and bf16 inputs (attention.h's bf16 kernel on the path
  // this CPU takes; where that is vdpbf16ps, also the converted path forced). FLOPs counted on visible
  // (query, key) pairs: forward 4 D per pair (QK^T, PV), backward 8 D (dV, dP, dQ, dK), excluding the
  // recomputed QK^T.
  struct AttnShape {
    const char* name;
    std::int64_t hq, hkv, hd;
  };
  for (const AttnShape& a : {AttnShape{"small", hq, hkv, hd}, AttnShape{"tiny", 8, 4, 32}}) {
    if (!wanted("attention")) break;
    AttentionDims d{batch, seq, seq, a.hq, a.hkv, a.hd};
    std::vector<std::int32_t> pos(n);
    for (std::int64_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>(i % seq);
    const AttentionMask m{pos.data(), nullptr, pos.data(), nullptr};
    auto q = filled(n * a.hq * a.hd, 1.0f), k = filled(n * a.hkv * a.hd, 1.0f), v = filled(n * a.hkv * a.hd, 1.0f);
    auto dout = filled(n * a.hq * a.hd, 1.0f);
    Buf out(q.size()), lse(batch * a.hq * seq), dq(q.size()), dk(k.size()), dv(v.size());
    const double pairs = static_cast<double>(batch) * a.hq * seq * (seq + 1) / 2.0;
    const double fwd_flop = 4.0 * a.hd * pairs, bwd_flop = 8.0 * a.hd * pairs;
    auto attention_row = [&](const std::string& what, double sec, double flop, double fp32_sec) {
      report("attention " + what + " (causal, " + a.name + ")", sec, flop, 0, 8);
      herd::Json& r = doc["results"].back();
      r["fraction_of_square_peak"] = flop / sec * 1e-9 / peak;
      r["shape"] = {{"preset", a.name}, {"q_heads", a.hq}, {"kv_heads", a.hkv}, {"head_dim", a.hd}};
      if (fp32_sec > 0) r["speedup_vs_fp32"] = fp32_sec / sec;
    };
    const double fwd = median_seconds(
        reps, [&] { attention_forward<float>(d, m, q.data(), k.data(), v.data(), out.data(), lse.data()); });
    attention_row("fwd fp32", fwd, fwd_flop, 0);
    const double bwd = median_seconds(reps, [&] {
      attention_backward<float>(d, m, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                dk.data(), dv.data());
    });
    attention_row("bwd fp32", bwd, bwd_flop, 0);

    herd::AlignedVector<herd::bf16> q16(q.size()), k16(k.size()), v16(v.size()), out16(out.size());
    to_bf16(q.data(), static_cast<std::int64_t>(q.size()), q16.data());
    to_bf16(k.data(), static_cast<std::int64_t>(k.size()), k16.data());
    to_bf16(v.data(), static_cast<std::int64_t>(v.size()), v16.data());
    // kAuto; on an AMX CPU also the vdpbf16ps micro-GEMM forced (vdpbf16ps); then the converted path.
    struct Bf16Variant {
      Bf16AttentionPath path;
      bool force_vdpbf16ps;
      const char* tag;
    };
    std::vector<Bf16Variant> paths{{Bf16AttentionPath::kAuto, false, "bf16"}};
    if (herd::kernels::cpu::have_amx_tiles()) paths.push_back({Bf16AttentionPath::kAuto, true, "bf16 vdpbf16ps"});
    if (bf16_attention_path() == Bf16AttentionPath::kDpbf16) {
      paths.push_back({Bf16AttentionPath::kConverted, false, "bf16 converted"});
    }
    for (const Bf16Variant& variant : paths) {
      set_bf16_attention_path(variant.path);
      herd::kernels::cpu::set_tile_gemm_isa(variant.force_vdpbf16ps ? herd::kernels::cpu::TileGemmIsa::kAvx512Bf16
                                                                    : herd::kernels::cpu::TileGemmIsa::kAuto);
      const std::string tag = variant.tag;
      const double f16 = median_seconds(
          reps, [&] { attention_forward(d, m, q16.data(), k16.data(), v16.data(), out.data(), lse.data()); });
      attention_row("fwd " + tag, f16, fwd_flop, fwd);
      doc["results"].back()["path"] = bf16_attention_description();
      to_bf16(out.data(), static_cast<std::int64_t>(out.size()), out16.data());
      const double b16 = median_seconds(reps, [&] {
        attention_backward(d, m, q16.data(), k16.data(), v16.data(), out16.data(), lse.data(), dout.data(), dq.data(),
                           dk.data(), dv.data());
      });
      attention_row("bwd " + tag, b16, bwd_flop, bwd);
      doc["results"].back()["path"] = bf16_attention_description();
    }
    set_bf16_attention_path(Bf16AttentionPath::kAuto);
    herd::kernels::cpu::set_tile_gemm_isa(herd::kernels::cpu::TileGemmIsa::kAuto);
  }

  // Cross-entropy fused with the output projection, forward + backward (3 GEMMs of n x vocab x dim).
  if (wanted("cross_entropy")) {
    auto h = filled(n * dim, 1.0f), w = filled(vocab * dim);
    Buf lse(n), dh(n * dim), dw(vocab * dim);
    std::vector<std::int32_t> tgt(n);
    for (std::int64_t i = 0; i < n; ++i) tgt[i] = static_cast<std::int32_t>((i * 7919) % vocab);
    const double sec = median_seconds(reps, [&] {
      cross_entropy_forward_backward<float>(h.data(), n, dim, w.data(), vocab, tgt.data(), 1.0f / n, lse.data(),
                                            dh.data(), dw.data());
    });
    report("cross_entropy fwd+bwd", sec, 6.0 * n * vocab * dim, 0, 1);
    doc["results"].back()["fraction_of_square_peak"] = 6.0 * n * vocab * dim / sec * 1e-9 / peak;
    // The two sweeps a vocab-parallel rank runs (statistics, combine, gradients with the logits
    // recomputed: 4 GEMMs), against which the one sweep above saves a logits GEMM; and both in bf16.
    Buf stats(3 * n);
    auto two_sweeps = [&](const auto* hh, const auto* ww) {
      ce_shard_stats(hh, n, dim, ww, 0, vocab, tgt.data(), stats.data(), stats.data() + n, stats.data() + 2 * n);
      ce_combine_stats<float>(n, 1, stats.data(), stats.data() + n, stats.data() + 2 * n, tgt.data(), lse.data());
      ce_shard_backward(hh, n, dim, ww, 0, vocab, tgt.data(), lse.data(), 1.0f / n, dh.data(), dw.data());
    };
    const double two = median_seconds(reps, [&] { two_sweeps(h.data(), w.data()); });
    report("cross_entropy fwd+bwd two sweeps", two, 6.0 * n * vocab * dim, 0, 1);
    doc["results"].back()["one_sweep_speedup"] = two / sec;
    herd::AlignedVector<herd::bf16> h16(h.size()), w16(w.size());
    to_bf16(h.data(), static_cast<std::int64_t>(h.size()), h16.data());
    to_bf16(w.data(), static_cast<std::int64_t>(w.size()), w16.data());
    const double sec16 = median_seconds(reps, [&] {
      cross_entropy_forward_backward(h16.data(), n, dim, w16.data(), vocab, tgt.data(), 1.0f / n, lse.data(), dh.data(),
                                     dw.data());
    });
    report("cross_entropy fwd+bwd bf16", sec16, 6.0 * n * vocab * dim, 0, 1);
    doc["results"].back()["speedup_vs_fp32"] = sec / sec16;
    const double two16 = median_seconds(reps, [&] { two_sweeps(h16.data(), w16.data()); });
    report("cross_entropy fwd+bwd bf16 two sweeps", two16, 6.0 * n * vocab * dim, 0, 1);
    doc["results"].back()["one_sweep_speedup"] = two16 / sec16;
  }

  // Memory-bound kernels: bytes moved per call.
  if (wanted("memory")) {
    auto x = filled(n * dim, 1.0f), w = filled(dim, 1.0f), dy = filled(n * dim, 1.0f);
    Buf y(n * dim), r(n), dx(n * dim), dw(dim);
    report("rmsnorm fwd",
           median_seconds(
               reps, [&] { rmsnorm_forward<float>(x.data(), dim, w.data(), n, dim, 1e-5, y.data(), dim, r.data()); }),
           0, 8.0 * n * dim, 17);
    report("rmsnorm bwd",
           median_seconds(reps,
                          [&] {
                            rmsnorm_backward<float>(dy.data(), dim, x.data(), dim, w.data(), r.data(), n, dim,
                                                    dx.data(), dim, Accumulate::kAdd, dw.data());
                          }),
           0, 16.0 * n * dim, 17);
  }
  if (wanted("memory")) {
    auto gu = filled(n * 2 * ffn, 1.0f), d = filled(n * ffn, 1.0f);
    Buf o(n * ffn), dgu(n * 2 * ffn);
    report(
        "swiglu fwd",
        median_seconds(
            reps, [&] { swiglu_forward<float>(gu.data(), 2 * ffn, gu.data() + ffn, 2 * ffn, n, ffn, o.data(), ffn); }),
        0, 12.0 * n * ffn, 8);
    report("swiglu bwd",
           median_seconds(reps,
                          [&] {
                            swiglu_backward<float>(d.data(), ffn, gu.data(), 2 * ffn, gu.data() + ffn, 2 * ffn, n, ffn,
                                                   dgu.data(), 2 * ffn, dgu.data() + ffn, 2 * ffn);
                          }),
           0, 20.0 * n * ffn, 8);
  }
  if (wanted("memory")) {
    RopeTable<float> table(RopeConfig{hd, 500000.0}, seq);
    std::vector<std::int32_t> pos(n);
    for (std::int64_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>(i % seq);
    auto q = filled(n * hq * hd, 1.0f);
    report("rope fwd (q)",
           median_seconds(reps, [&] { rope_forward<float>(table, pos.data(), n, hq, q.data(), hq * hd); }), 0,
           8.0 * n * hq * hd, 16);
  }
  if (wanted("memory")) {
    const std::int64_t params = 32'500'000;
    auto p = filled(params), g = filled(params);
    Buf m1(params), v1(params);
    std::int64_t step = 0;
    report(
        "adamw 32.5M params",
        median_seconds(
            reps, [&] { adamw_step<float>(p.data(), g.data(), m1.data(), v1.data(), params, AdamWConfig{}, ++step); }),
        0, 28.0 * params, 1);
  }
  herd::bench::write_result(doc, out_path);
  return 0;
}

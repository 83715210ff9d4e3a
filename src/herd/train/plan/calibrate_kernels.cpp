#include "herd/train/plan/calibrate_kernels.h"

#include <algorithm>
#include <cmath>

#include "herd/core/aligned.h"
#include "herd/core/format.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/measure/timing.h"
#include "herd/model/flops.h"
#include "herd/model/params.h"

namespace herd::train::calibration {

namespace {

// The median of the repeats (measure/timing.h): one-thread kernels on this thread's CPU clock (a
// core of its own even when other jobs share the cores), several threads on the wall clock.
template <typename F>
double time_median(int repeats, F&& f) {
  const measure::Clock clock = kernels::num_threads() == 1 ? measure::Clock::kThreadCpu : measure::Clock::kWall;
  return measure::time_median(repeats, clock, std::forward<F>(f));
}

// Kernel operands start on a cache line, as the arena's tensors do (core/aligned.h says why it matters).
AlignedVector<float> filled(std::int64_t n, float x) { return AlignedVector<float>(static_cast<std::size_t>(n), x); }

// Total FLOPs over total time of the layer's and head's GEMMs, three transposes each; `rows` gets one
// table row per shape.
struct GemmTake {
  double flops = 0, seconds = 0;
  std::vector<std::vector<std::string>> rows;
};
// bf16: gemm_bf16 on bf16 copies of the same operands (the GEMMs of `train.precision = bf16`).
GemmTake gemm_take(const model::LlamaConfig& m, std::int64_t rows, int repeats, const char* label,
                   bool use_bf16 = false) {
  const std::int64_t h = m.hidden, q = m.n_heads * m.head_dim, kv = m.n_kv_heads * m.head_dim;
  const std::int64_t shapes[][2] = {{q + 2 * kv, h}, {h, q}, {2 * m.ffn_hidden, h}, {h, m.ffn_hidden}, {m.vocab, h}};
  GemmTake out;
  for (const auto& s : shapes) {
    const std::int64_t n = s[0], k = s[1];
    AlignedVector<float> a = filled(rows * std::max(n, k), 0.01f), b = filled(n * k, 0.02f);
    AlignedVector<float> c = filled(std::max(rows * n, rows * k), 0.0f), w = filled(n * k, 0.0f);
    AlignedVector<bf16> a16(use_bf16 ? a.size() : 0), b16(use_bf16 ? b.size() : 0), c16(use_bf16 ? c.size() : 0);
    if (use_bf16) {
      kernels::to_bf16(a.data(), static_cast<std::int64_t>(a.size()), a16.data());
      kernels::to_bf16(b.data(), static_cast<std::int64_t>(b.size()), b16.data());
      kernels::to_bf16(c.data(), static_cast<std::int64_t>(c.size()), c16.data());
    }
    using kernels::Trans;
    // y (rows, n) = x (rows, k) W^T; dx (rows, k) = dy (rows, n) W; dW (n, k) += dy^T x.
    auto mm = [&](Trans ta, Trans tb, std::int64_t mm_m, std::int64_t mm_n, std::int64_t mm_k, const float* fa,
                  const bf16* ha, std::int64_t lda, const float* fb, const bf16* hb, std::int64_t ldb, float beta,
                  float* fc, std::int64_t ldc) {
      if (use_bf16) {
        kernels::gemm_bf16(ta, tb, mm_m, mm_n, mm_k, 1.f, ha, lda, hb, ldb, beta, fc, ldc);
      } else {
        kernels::gemm<float>(ta, tb, mm_m, mm_n, mm_k, 1.f, fa, lda, fb, ldb, beta, fc, ldc);
      }
    };
    const double f = time_median(repeats, [&] {
      mm(Trans::kNo, Trans::kYes, rows, n, k, a.data(), a16.data(), k, b.data(), b16.data(), k, 0.f, c.data(), n);
    });
    const double d = time_median(repeats, [&] {
      mm(Trans::kNo, Trans::kNo, rows, k, n, a.data(), a16.data(), n, b.data(), b16.data(), k, 0.f, c.data(), k);
    });
    const double g = time_median(repeats, [&] {
      mm(Trans::kYes, Trans::kNo, n, k, rows, a.data(), a16.data(), n, c.data(), c16.data(), k, 1.f, w.data(), k);
    });
    const double fl = 2.0 * static_cast<double>(rows * n * k);
    out.flops += 3 * fl;
    out.seconds += f + d + g;
    out.rows.push_back(
        {std::string("gemm ") + label, std::to_string(rows) + "x" + std::to_string(n) + "x" + std::to_string(k),
         format_fixed(1e3 * (f + d + g) / 3, 3) + " ms", format_fixed(3 * fl / (f + d + g) / 1e9, 1) + " GFLOP/s"});
  }
  return out;
}

}  // namespace

// "" when `now` is within kFarFromLast of `last` (or there is no last), else why the take is redone.
std::string far_from_last(const char* what, double now, double last, const std::string& taken_at) {
  if (!(last > 0) || !(now > 0)) return "";
  const double r = now / last;
  if (r <= kFarFromLast && r >= 1 / kFarFromLast) return "";
  return std::string(what) + " " + format_fixed(r, 2) + "x the last calibration's (" + taken_at + ")";
}

GemmRates measure_gemms(Session& s) {
  GemmRates r;
  kernels::set_num_threads(1);
  GemmTake g1, gall, g16;
  auto best_of = [&s](GemmTake& best, const char* label, bool use_bf16) {
    return [&s, &best, label, use_bf16] {
      GemmTake g = gemm_take(s.m, s.rows, s.o.repeats, label, use_bf16);
      if (best.seconds == 0 || g.seconds < best.seconds) best = g;
      return g.seconds;
    };
  };
  s.measure("gemm, 1 thread", false, best_of(g1, "1 thread", false), [&](double secs) {
    return far_from_last("GEMM rate", g1.flops / secs, s.last_number("gemm_flops_per_s_one_thread"), s.last_taken_at());
  });
  r.one_thread = g1.flops / g1.seconds;
  kernels::set_num_threads(s.cores);
  r.all_cores_disturbed =
      s.measure("gemm, all cores", true, best_of(gall, "all cores", false), [&](double secs) -> std::string {
         if (s.cores < 2) return "";
         const double sc = (gall.flops / secs / r.one_thread - 1.0) / static_cast<double>(s.cores - 1);
         if (sc >= kLowestScaling) return "";
         return "thread scaling " + format_fixed(sc, 2) + " far below 1";
       }).disturbed;
  r.all_cores = gall.flops / gall.seconds;
  kernels::set_num_threads(1);
  s.measure("gemm bf16, 1 thread", false, best_of(g16, "bf16, 1 thread", true), [&](double secs) {
    return far_from_last("bf16 GEMM rate", g16.flops / secs, s.last_number("gemm_bf16_flops_per_s_one_thread"),
                         s.last_taken_at());
  });
  r.bf16_one_thread = g16.flops / g16.seconds;
  for (const GemmTake* g : {&g1, &gall, &g16}) {
    for (const auto& row : g->rows) s.table_rows.push_back(row);
  }
  return r;
}

AttentionRates measure_attention(Session& s, const GemmRates& g) {
  const model::LlamaConfig& m = s.m;
  const CalibrateOptions& o = s.o;
  const std::int64_t rows = s.rows;
  kernels::AttentionDims ad;
  ad.batch = o.micro_batch;
  ad.tq = ad.tk = o.seq_len;
  ad.q_heads = m.n_heads;
  ad.kv_heads = m.n_kv_heads;
  ad.head_dim = m.head_dim;
  std::vector<std::int32_t> pos(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % o.seq_len);
  kernels::AttentionMask mask;
  mask.pos_q = mask.pos_k = pos.data();
  const std::int64_t qn = rows * m.n_heads * m.head_dim, kn = rows * m.n_kv_heads * m.head_dim;
  AlignedVector<float> q = filled(qn, 0.1f), k = filled(kn, 0.05f), v = filled(kn, 0.2f), out_a = filled(qn, 0);
  AlignedVector<float> lse = filled(o.micro_batch * m.n_heads * o.seq_len, 0), dq = filled(qn, 0), dk = filled(kn, 0);
  AlignedVector<float> dv = filled(kn, 0);
  const double af =
      s.measure("attention fwd", false, [&] {
         return time_median(o.repeats, [&] {
           kernels::attention_forward<float>(ad, mask, q.data(), k.data(), v.data(), out_a.data(), lse.data());
         });
       }).seconds;
  const double ab = s.measure("attention bwd", false, [&] {
                       return time_median(o.repeats, [&] {
                         kernels::attention_backward<float>(ad, mask, q.data(), k.data(), v.data(), out_a.data(),
                                                            lse.data(), q.data(), dq.data(), dk.data(), dv.data());
                       });
                     }).seconds;
  AlignedVector<bf16> q16(static_cast<std::size_t>(qn)), k16(static_cast<std::size_t>(kn)),
      v16(static_cast<std::size_t>(kn)), o16(static_cast<std::size_t>(qn)), dq16(q16.size()), dk16(k16.size()),
      dv16(v16.size());
  kernels::to_bf16(q.data(), qn, q16.data());
  kernels::to_bf16(k.data(), kn, k16.data());
  kernels::to_bf16(v.data(), kn, v16.data());
  const double af16 =
      s.measure("attention fwd, bf16", false, [&] {
         return time_median(o.repeats, [&] {
           kernels::attention_forward(ad, mask, q16.data(), k16.data(), v16.data(), out_a.data(), lse.data());
           kernels::to_bf16(out_a.data(), qn, o16.data());
         });
       }).seconds;
  const double ab16 = s.measure("attention bwd, bf16", false, [&] {
                         return time_median(o.repeats, [&] {
                           kernels::attention_backward(ad, mask, q16.data(), k16.data(), v16.data(), o16.data(),
                                                       lse.data(), q.data(), dq.data(), dk.data(), dv.data());
                           kernels::to_bf16(dq.data(), qn, dq16.data());
                           kernels::to_bf16(dk.data(), kn, dk16.data());
                           kernels::to_bf16(dv.data(), kn, dv16.data());
                         });
                       }).seconds;
  const double pairs = *model::attention_pairs(o.seq_len, model::AttentionMask::causal());
  const double attn_flops = 4.0 * static_cast<double>(o.micro_batch * m.n_heads * m.head_dim) * pairs;
  AttentionRates r;
  r.fwd = std::clamp(attn_flops / (af * g.one_thread), 0.01, 1.0);
  r.bwd = std::clamp(2.5 * attn_flops / (ab * g.one_thread), 0.01, 1.0);
  r.bf16_fwd = std::clamp(attn_flops / (af16 * g.bf16_one_thread), 0.01, 1.0);
  r.bf16_bwd = std::clamp(2.5 * attn_flops / (ab16 * g.bf16_one_thread), 0.01, 1.0);
  const std::string ashape = std::to_string(o.micro_batch) + "x" + std::to_string(o.seq_len) + "x" +
                             std::to_string(m.n_heads) + "/" + std::to_string(m.n_kv_heads) + "x" +
                             std::to_string(m.head_dim);
  auto row = [&](const char* what, double secs, double eff, const char* of) {
    s.table_rows.push_back(
        {what, ashape, format_fixed(1e3 * secs, 3) + " ms", format_fixed(100 * eff, 1) + "% of " + of});
  };
  row("attention fwd", af, r.fwd, "gemm");
  row("attention bwd", ab, r.bwd, "gemm");
  row("attention fwd, bf16", af16, r.bf16_fwd, "bf16 gemm");
  row("attention bwd, bf16", ab16, r.bf16_bwd, "bf16 gemm");
  return r;
}

double measure_stream(Session& s) {
  const std::int64_t rows = s.rows, h = s.m.hidden;
  AlignedVector<float> x = filled(rows * h, 0.3f), y = filled(rows * h, 0), w = filled(h, 1.0f), rstd = filled(rows, 0);
  AlignedVector<float> dx = filled(rows * h, 0), dw = filled(h, 0);
  const double norm =
      s.measure("rmsnorm fwd+bwd", false, [&] {
         const double nf = time_median(s.o.repeats, [&] {
           kernels::rmsnorm_forward<float>(x.data(), h, w.data(), rows, h, 1e-5, y.data(), h, rstd.data());
         });
         const double nbw = time_median(s.o.repeats, [&] {
           kernels::rmsnorm_backward<float>(y.data(), h, x.data(), h, w.data(), rstd.data(), rows, h, dx.data(), h,
                                            kernels::Accumulate::kOverwrite, dw.data());
         });
         return nf + nbw;
       }).seconds;
  const double stream = 5.0 * 4.0 * static_cast<double>(rows * h) / norm;
  s.table_rows.push_back({"rmsnorm fwd+bwd", std::to_string(rows) + "x" + std::to_string(h),
                          format_fixed(1e3 * norm, 3) + " ms", format_fixed(stream / 1e9, 1) + " GB/s"});
  return stream;
}

double measure_optimizer(Session& s) {
  // The model's parameters, at most 64 Mi (1.8 GB of traffic a pass): far beyond any cache either way.
  const std::int64_t n = std::min<std::int64_t>(model::model_params(s.m).total(), std::int64_t{64} << 20);
  AlignedVector<float> p = filled(n, 0.01f), g = filled(n, 0.001f), m = filled(n, 0.f), v = filled(n, 0.f);
  kernels::AdamWConfig cfg;
  std::int64_t step = 0;
  const double secs = s.measure("adamw", false, [&] {
                         return time_median(s.o.repeats, [&] {
                           kernels::adamw_step<float>(p.data(), g.data(), m.data(), v.data(), n, cfg, ++step);
                         });
                       }).seconds;
  const double bw = 28.0 * static_cast<double>(n) / secs;
  s.table_rows.push_back({"adamw", std::to_string(n) + " params", format_fixed(1e3 * secs, 3) + " ms",
                          format_fixed(bw / 1e9, 1) + " GB/s"});
  return bw;
}

// Per-op overhead in microseconds: a 16^3 GEMM is all call and threading cost.
double measure_op_overhead(Session& s, double gemm_one_thread) {
  AlignedVector<float> sa = filled(256, 1.f), sb = filled(256, 1.f), sc = filled(256, 0.f);
  const double tiny = s.measure("op overhead", false, [&] {
                         return time_median(s.o.repeats, [&] {
                           for (int i = 0; i < 1000; ++i) {
                             kernels::gemm<float>(kernels::Trans::kNo, kernels::Trans::kNo, 16, 16, 16, 1.f, sa.data(),
                                                  16, sb.data(), 16, 0.f, sc.data(), 16);
                           }
                         });
                       }).seconds;
  const double overhead_us = std::max(0.0, tiny / 1000 * 1e6 - 8192.0 / gemm_one_thread * 1e6);
  s.table_rows.push_back({"op overhead", "gemm 16^3", format_fixed(overhead_us, 2) + " us", ""});
  return overhead_us;
}

Result<CommCalibration> measure_comm(const Session& s) {
  const std::vector<std::int64_t> counts = {4096, 262144, 1048576};
  HERD_ASSIGN_OR_RETURN(std::vector<measure::CommSample> two,
                        measure::time_local_collectives(2, counts, s.o.repeats * 2));
  HERD_ASSIGN_OR_RETURN(std::vector<measure::CommSample> four,
                        measure::time_local_collectives(4, counts, s.o.repeats * 2));
  CommCalibration r;
  r.fit = measure::fit_link(two, 4.0 * static_cast<double>(counts.front()) * 2,
                            4.0 * static_cast<double>(counts.back()) * 2);
  r.samples = std::move(two);
  r.samples.insert(r.samples.end(), four.begin(), four.end());
  return r;
}

topology::Cluster kernel_cluster(const topology::Cluster& preset, int cores, const GemmRates& g,
                                 const AttentionRates& at, double stream, double optimizer_bw, double overhead_us,
                                 double gemm_scaling, const measure::LinkFit& fit) {
  topology::Cluster c = preset;
  c.name = "local-cpu";
  topology::Accelerator& a = c.accelerator;
  a.peak_tflops_fp32 = g.one_thread / 1e12;
  a.peak_tflops_bf16 = g.bf16_one_thread / 1e12;
  a.bf16_matmul_efficiency = 1.0;
  a.bf16_attention_fwd_efficiency = at.bf16_fwd;
  a.bf16_attention_bwd_efficiency = at.bf16_bwd;
  a.bf16_memory_bw_efficiency = 1.0;
  a.matmul_efficiency = 1.0;
  a.attention_fwd_efficiency = at.fwd;
  a.attention_bwd_efficiency = at.bwd;
  a.memory_bw_gb_per_s = stream / 1e9;
  a.memory_bw_efficiency = 1.0;
  a.optimizer_bw_efficiency = std::clamp(optimizer_bw / stream, 0.01, 1.0);
  a.kernel_overhead_us = overhead_us;
  a.host_cores = cores;
  a.thread_scaling = gemm_scaling;
  c.tiers[0].bw_gb_per_s = fit.bytes_per_s / 1e9;
  c.tiers[0].latency_us = fit.latency_s * 1e6;
  c.tiers[0].efficiency = 1.0;
  return c;
}

}  // namespace herd::train::calibration

// The CUDA backend's calibration (kernels/device.h, DeviceBackend::measure_rates): herd's own CUDA kernels
// timed with events on the compute stream at one micro-batch of a model's shapes, bf16 as
// train.precision = bf16 runs them. cli/calibrate_device.cpp turns the times into the accelerator's
// efficiencies. Plain C++ on kernels.h and runtime.h.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "herd/kernels/cuda/kernels.h"
#include "herd/kernels/cuda/runtime.h"
#include "herd/kernels/device.h"

namespace herd::kernels::cuda {
namespace {

// Median seconds per call of `fn` over `repeats` calls after one untimed call, each between two events.
double median_seconds(int repeats, const std::function<void()>& fn) {
  fn();
  Event start, stop;
  std::vector<double> s;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    start.record(compute_stream());
    fn();
    stop.record(compute_stream());
    stop.synchronize();
    s.push_back(1e-3 * Event::elapsed_ms(start, stop));
  }
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
  return s[s.size() / 2];
}

// A device buffer of n bf16 (or fp32) values set to `value`.
template <typename T>
DeviceBuffer<T> filled(std::int64_t n, float value) {
  DeviceBuffer<float> f(n);
  std::vector<float> host(static_cast<std::size_t>(n), value);
  copy_to_device(f.data(), host.data(), f.bytes());
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    DeviceBuffer<bf16> b(n);
    cuda::to_bf16(f.data(), n, b.data());
    return b;
  }
}

// y (m, n) = x (m, k) W^T, dx = dy W, dW += dy^T x: a linear's three GEMMs, as nn/block_precision.h makes them.
struct Linear {
  std::int64_t m, n, k;
  double flops() const { return 3 * 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  void run(const bf16* x, const bf16* w, const bf16* dy, float* y, float* dx, float* dw) const {
    cuda::gemm_bf16(Trans::kNo, Trans::kYes, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
    cuda::gemm_bf16(Trans::kNo, Trans::kNo, m, k, n, 1.0f, dy, n, w, k, 0.0f, dx, k);
    cuda::gemm_bf16(Trans::kYes, Trans::kNo, n, k, m, 1.0f, dy, n, x, k, 1.0f, dw, k);
  }
};

// The linears' time and FLOPs: every buffer sized for the largest.
std::pair<double, double> time_linears(const std::vector<Linear>& ls, int repeats) {
  std::int64_t xs = 0, ws = 0, ys = 0;
  for (const Linear& l : ls) {
    xs = std::max(xs, l.m * l.k);
    ws = std::max(ws, l.n * l.k);
    ys = std::max(ys, l.m * l.n);
  }
  DeviceBuffer<bf16> x = filled<bf16>(xs, 0.01f), w = filled<bf16>(ws, 0.02f), dy = filled<bf16>(ys, 0.01f);
  DeviceBuffer<float> y(ys), dx(xs), dw(ws);
  fill_zero(dw.data(), dw.bytes());
  double flops = 0;
  for (const Linear& l : ls) flops += l.flops();
  const double s = median_seconds(repeats, [&] {
    for (const Linear& l : ls) l.run(x.data(), w.data(), dy.data(), y.data(), dx.data(), dw.data());
  });
  return {s, flops};
}

}  // namespace

DeviceRates measure_device_rates(const DeviceRateShapes& sh) {
  set_device(0);
  DeviceRates r;
  r.device = describe_device(0);
  const std::int64_t n = sh.rows, d = sh.hidden, q = sh.heads * sh.head_dim, kv = sh.kv_heads * sh.head_dim;
  std::tie(r.block_gemm_s, r.block_gemm_flops) =
      time_linears({{n, q + 2 * kv, d}, {n, d, q}, {n, 2 * sh.ffn, d}, {n, d, sh.ffn}}, sh.repeats);
  std::tie(r.head_gemm_s, r.head_gemm_flops) = time_linears({{n, sh.vocab, d}}, sh.repeats);

  AttentionDims ad;
  ad.batch = sh.rows / sh.seq_len;
  ad.tq = ad.tk = sh.seq_len;
  ad.q_heads = sh.heads;
  ad.kv_heads = sh.kv_heads;
  ad.head_dim = sh.head_dim;
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % sh.seq_len);
  DeviceBuffer<std::int32_t> dpos(n);
  copy_to_device(dpos.data(), pos.data(), dpos.bytes());
  const AttentionMask mask{dpos.data(), nullptr, dpos.data(), nullptr};
  DeviceBuffer<bf16> qb = filled<bf16>(n * q, 0.1f), kb = filled<bf16>(n * kv, 0.05f), vb = filled<bf16>(n * kv, 0.2f);
  DeviceBuffer<bf16> ob(n * q);
  DeviceBuffer<float> lse(ad.batch * sh.heads * sh.seq_len), dout = filled<float>(n * q, 0.01f), dq(n * q), dk(n * kv),
                                                             dv(n * kv);
  r.attention_fwd_s = median_seconds(
      sh.repeats, [&] { cuda::attention_forward(ad, mask, qb.data(), kb.data(), vb.data(), ob.data(), lse.data()); });
  r.attention_bwd_s = median_seconds(sh.repeats, [&] {
    cuda::attention_backward(ad, mask, qb.data(), kb.data(), vb.data(), ob.data(), lse.data(), dout.data(), dq.data(),
                             dk.data(), dv.data());
  });

  DeviceBuffer<float> x = filled<float>(n * d, 0.3f), y(n * d), w = filled<float>(d, 1.0f), rstd(n), dx(n * d), dw(d);
  r.stream_s = median_seconds(sh.repeats, [&] {
    cuda::rmsnorm_forward(x.data(), d, w.data(), n, d, 1e-5, y.data(), d, rstd.data());
    cuda::rmsnorm_backward(y.data(), d, x.data(), d, w.data(), rstd.data(), n, d, dx.data(), d, Accumulate::kOverwrite,
                           dw.data());
  });
  r.stream_bytes = 5.0 * 4.0 * static_cast<double>(n * d);  // x, y; dy, x, dx

  constexpr int kLaunches = 1000;
  DeviceBuffer<float> tiny = filled<float>(256, 1.0f);
  r.launch_s = median_seconds(sh.repeats,
                              [&] {
                                for (int i = 0; i < kLaunches; ++i) cuda::scale_buffer(tiny.data(), 256, 1.0f);
                              }) /
               kLaunches;
  // The optimizer's pass: one multi-tensor AdamW launch over 64 Mi parameters (1 GiB of fp32 state, far
  // beyond the caches, as a real model's is), then the bf16 copy of the weights the next step reads.
  constexpr std::int64_t kParams = std::int64_t{1} << 26;
  DeviceBuffer<float> p = filled<float>(kParams, 0.01f), g = filled<float>(kParams, 1e-3f), m1(kParams), m2(kParams);
  DeviceBuffer<bf16> p16(kParams);
  fill_zero(m1.data(), m1.bytes());
  fill_zero(m2.data(), m2.bytes());
  std::int64_t step = 0;
  r.optimizer_s = median_seconds(sh.repeats, [&] {
    cuda::adamw_step({{p.data(), g.data(), m1.data(), m2.data(), kParams}}, AdamWConfig{}, ++step);
    cuda::to_bf16(p.data(), kParams, p16.data());
  });
  r.optimizer_bytes = 30.0 * static_cast<double>(kParams);
  synchronize();
  return r;
}

}  // namespace herd::kernels::cuda

// herd calibrate --device cuda (cli/calibrate_device.h).
#include "herd/cli/calibrate_device.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/table.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/model/flops.h"
#include "herd/train/plan/calibration_store.h"

namespace herd::cli::calibration {

topology::Cluster device_cluster(const topology::Cluster& preset, const model::LlamaConfig& m,
                                 const kernels::DeviceRateShapes& sh, const kernels::DeviceRates& r) {
  topology::Cluster c = preset;
  topology::Accelerator& a = c.accelerator;
  const double peak = a.peak_tflops_bf16 * 1e12;
  const double layers = static_cast<double>(m.n_layers);
  const double gemm_rate =
      (layers * r.block_gemm_flops + r.head_gemm_flops) / (layers * r.block_gemm_s + r.head_gemm_s);
  const double pairs = *model::attention_pairs(sh.seq_len, model::AttentionMask::causal());
  const double attn_flops =
      4.0 * static_cast<double>(sh.rows / sh.seq_len * sh.heads * sh.head_dim) * pairs;  // forward
  a.bf16_matmul_efficiency = std::clamp(gemm_rate / peak, 0.01, 1.0);
  a.bf16_attention_fwd_efficiency = std::clamp(attn_flops / (r.attention_fwd_s * peak), 0.001, 1.0);
  a.bf16_attention_bwd_efficiency = std::clamp(2.5 * attn_flops / (r.attention_bwd_s * peak), 0.001, 1.0);
  a.bf16_memory_bw_efficiency = std::clamp(r.stream_bytes / r.stream_s / (a.memory_bw_gb_per_s * 1e9), 0.01, 1.0);
  a.optimizer_bw_efficiency = std::clamp(r.optimizer_bytes / r.optimizer_s / (a.memory_bw_gb_per_s * 1e9), 0.01, 1.0);
  a.kernel_overhead_us = r.launch_s * 1e6;
  c.name = preset.name + " (calibrated: herd's CUDA kernels)";
  return c;
}

int run_calibrate_device(const DeviceCalibrateOptions& o) {
  if (o.out.empty()) {
    return report_error("calibrate", Error("--out: a GPU calibration needs a file to write (--device cuda --out "
                                           "FILE), then herd estimate --cluster FILE --software herd"));
  }
  Result<model::LlamaConfig> mr = model::resolve_model(o.model);
  if (!mr.ok()) return report_error("calibrate", mr.error());
  const model::LlamaConfig& m = *mr;
  Result<topology::Cluster> preset = topology::resolve_cluster(o.cluster);
  if (!preset.ok()) return report_error("calibrate", preset.error().with_context("--cluster"));
  if (preset->accelerator.peak_tflops_bf16 <= 0 || preset->accelerator.memory_bw_gb_per_s <= 0 ||
      preset->accelerator.host_cores > 0) {
    return report_error("calibrate", Error("--cluster: '" + o.cluster +
                                           "' does not describe a GPU (no bf16 peak or HBM bandwidth, or host "
                                           "cores); name a GPU preset such as h200 or dgx-h100"));
  }
  if (Status s = kernels::check_device(kernels::Device::kCuda, "--device"); !s.ok()) {
    return report_error("calibrate", s.error());
  }
  kernels::DeviceRateShapes sh;
  sh.rows = o.micro_batch * o.seq_len;
  sh.seq_len = o.seq_len;
  sh.hidden = m.hidden;
  sh.ffn = m.ffn_hidden;
  sh.heads = m.n_heads;
  sh.kv_heads = m.n_kv_heads;
  sh.head_dim = m.head_dim;
  sh.vocab = m.vocab;
  sh.repeats = o.repeats;
  const kernels::DeviceRates r = kernels::device_backend(kernels::Device::kCuda)->measure_rates(sh);
  const topology::Cluster c = device_cluster(*preset, m, sh, r);
  const topology::Accelerator& a = c.accelerator;

  const std::string shape = std::to_string(o.micro_batch) + "x" + std::to_string(o.seq_len);
  Table t({"what", "shape", "median", "rate"});
  auto ms = [](double s) { return format_fixed(1e3 * s, 3) + " ms"; };
  auto pct = [](double e, const char* of) { return format_fixed(100 * e, 1) + "% of " + of; };
  t.add({"block GEMMs (bf16, fwd + both grads)", shape, ms(r.block_gemm_s),
         format_fixed(r.block_gemm_flops / r.block_gemm_s / 1e12, 0) + " TFLOP/s"});
  t.add({"loss head GEMMs", shape + " x " + std::to_string(m.vocab), ms(r.head_gemm_s),
         format_fixed(r.head_gemm_flops / r.head_gemm_s / 1e12, 0) + " TFLOP/s"});
  t.add({"-> matmul efficiency (step-weighted)", "", "", pct(a.bf16_matmul_efficiency, "bf16 peak")});
  t.add({"attention fwd (bf16, causal)", shape, ms(r.attention_fwd_s), pct(a.bf16_attention_fwd_efficiency, "peak")});
  t.add({"attention bwd", shape, ms(r.attention_bwd_s), pct(a.bf16_attention_bwd_efficiency, "peak")});
  t.add({"rmsnorm fwd+bwd (fp32)", std::to_string(sh.rows) + "x" + std::to_string(m.hidden), ms(r.stream_s),
         format_fixed(r.stream_bytes / r.stream_s / 1e9, 0) + " GB/s, " + pct(a.bf16_memory_bw_efficiency, "HBM")});
  t.add({"AdamW + bf16 re-copy (multi-tensor)", "64 Mi parameters", ms(r.optimizer_s),
         format_fixed(r.optimizer_bytes / r.optimizer_s / 1e9, 0) + " GB/s, " + pct(a.optimizer_bw_efficiency, "HBM")});
  t.add({"kernel launch gap", "1000 tiny kernels", format_fixed(r.launch_s * 1e6, 2) + " us", ""});
  std::cout << "herd calibrate --device cuda: " << r.device << "\n";
  t.print(std::cout);

  Json j = topology::cluster_to_json(c);
  j["calibration"] = {{"device", r.device},
                      {"taken_at", train::unix_now()},
                      {"model", m.name},
                      {"micro_batch", o.micro_batch},
                      {"seq_len", o.seq_len},
                      {"preset", o.cluster},
                      {"repeats", o.repeats},
                      {"block_gemm_s", r.block_gemm_s},
                      {"block_gemm_flops", r.block_gemm_flops},
                      {"head_gemm_s", r.head_gemm_s},
                      {"head_gemm_flops", r.head_gemm_flops},
                      {"attention_fwd_s", r.attention_fwd_s},
                      {"attention_bwd_s", r.attention_bwd_s},
                      {"stream_s", r.stream_s},
                      {"stream_bytes", r.stream_bytes},
                      {"launch_s", r.launch_s},
                      {"optimizer_s", r.optimizer_s},
                      {"optimizer_bytes", r.optimizer_bytes}};
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(o.out).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (Status s = write_file(o.out, json_text(j, 2) + "\n"); !s.ok()) {
    return report_error("calibrate", make_error("--out: ", s.error().message(), "; check the directory"));
  }
  std::cout << "wrote " << o.out << " (use it with herd estimate --cluster " << o.out
            << " --software herd --precision bf16)\n";
  return 0;
}

}  // namespace herd::cli::calibration

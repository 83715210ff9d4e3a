// Cluster presets. Every number is a published hardware figure or a documented achievable fraction;
// none is fitted to a training result. Sources and reasoning: docs/planner.md, "Cluster presets".
#include "herd/topology/cluster.h"

namespace herd::topology {

namespace {

// `herd calibrate` on this machine (docs/projection.md), one core each: 2026-11-29 18:25 UTC, load
// average 1.6, nothing else running; kernels timed by the thread's CPU clock (medians), so other
// jobs do not enter these numbers (host_share() models them). The runtime efficiency is a real
// single-rank training step of the tiny model against these kernel rates; the multi-rank efficiency
// the same work per rank on two thread ranks. This kind of shared virtual machine moves by up to
// 1.8x between hours (the GEMM rate was 92 GFLOP/s at 15:30 UTC): bench/projection/run.py and
// scripts/demo.sh calibrate just before they compare.
constexpr double kLocalGemmTflops = 0.1602;
constexpr double kLocalStreamGbPerS = 25.8;
constexpr double kLocalAttnFwdEff = 0.347;  // the runtime efficiency included
constexpr double kLocalAttnBwdEff = 0.461;
constexpr double kLocalRuntimeEff = 0.929;
constexpr double kLocalOpOverheadUs = 0.31;
constexpr double kLocalThreadScaling = 0.88;
constexpr double kLocalMultiRankEff = 0.80;
constexpr double kLocalCommGbPerS = 8.25;
constexpr double kLocalCommLatencyUs = 59.5;

// H100 SXM5 80 GB: 989 TFLOP/s dense BF16, 1979 FP8, 67 FP32 (NVIDIA H100 datasheet); 3.35 TB/s HBM3;
// 132 SMs; nvidia-smi reports 81,559 MiB = 79.6 GiB. Sustained fractions of peak = a short-run
// benchmark figure x 0.9, the clock a 700 W H100 holds under continuous tensor-core load relative to
// the clock its peak is quoted at (the Llama 3 paper sees power-driven DVFS in production):
// matmul 0.80 ("maximum achievable matmul FLOPS", 794 of 989 TFLOP/s, Bekman, ml-engineering) -> 0.72;
// flash attention at head_dim 128 and long sequences about 0.65 forward and 0.50 backward
// (FlashAttention-3, Shah et al. 2024) -> 0.585 and 0.45. PyTorch eager's FlashAttention-2 kernels:
// FA3 is 1.5-2.0x faster forward and 1.5-1.75x backward on H100 (same paper); the midpoints give
// 0.585 / 1.75 = 0.33 and 0.45 / 1.6 = 0.28. fp8 GEMMs reach a lower fraction of their (twice as high)
// peak: the same benchmark's fp8 (e4m3) figure is 1,402.6 of 1,979 TFLOP/s = 0.709 -> 0.638.
Accelerator h100() {
  Accelerator a;
  a.name = "H100 SXM 80GB";
  a.peak_tflops_bf16 = 989;
  a.peak_tflops_fp8 = 1979;
  a.peak_tflops_fp32 = 67;
  a.memory_gib = 79.6;
  a.memory_bw_gb_per_s = 3350;
  a.matmul_efficiency = 0.72;
  a.matmul_efficiency_fp8 = 0.638;
  a.attention_fwd_efficiency = 0.585;
  a.attention_bwd_efficiency = 0.45;
  a.memory_bw_efficiency = 0.80;
  a.eager_attention_fwd_efficiency = 0.33;
  a.eager_attention_bwd_efficiency = 0.28;
  a.sm_count = 132;
  a.kernel_overhead_us = 3;
  return a;
}

// NVLink 4 in an HGX H100 board: 18 links x 25 GB/s = 450 GB/s per GPU per direction; nccl-tests
// all-gather / reduce-scatter bus bandwidth on 8 GPUs is about 340 GB/s at the 100-300 MB sizes of
// tensor-parallel activations (about 360 GB/s only at GB sizes), hence efficiency 0.75.
Tier nvlink4() { return {"nvlink", 8, 450, 3, 0.75, 1, {}}; }

// This machine running herd's own ranks (2 cores, 24 GiB), fp32 throughout. Every
// number is one core's, measured by `herd calibrate --out build/local-cpu.json` on this machine
// (docs/projection.md has the run); host_share() divides them among the ranks. The peak is the
// measured herd GEMM rate at the tiny/small models' shapes; attention efficiencies are herd's kernels
// against that rate; matmul, attention and bandwidth efficiencies all carry the runtime efficiency.
Accelerator local_cpu() {
  Accelerator a;
  a.name = "CPU core (herd fp32 kernels)";
  a.peak_tflops_fp32 = kLocalGemmTflops;
  a.peak_tflops_bf16 = 2 * kLocalGemmTflops;  // avx512_bf16: twice fp32 (only the MFU denominator)
  a.memory_gib = 24;
  a.memory_bw_gb_per_s = kLocalStreamGbPerS;
  a.matmul_efficiency = kLocalRuntimeEff;
  a.attention_fwd_efficiency = kLocalAttnFwdEff;
  a.attention_bwd_efficiency = kLocalAttnBwdEff;
  a.memory_bw_efficiency = kLocalRuntimeEff;
  a.kernel_overhead_us = kLocalOpOverheadUs;
  a.speed_variation = 0;  // the preset assumes steady ranks; `herd calibrate` measures this host's rank skew
  a.host_cores = 2;
  a.thread_scaling = kLocalThreadScaling;
  a.multi_rank_efficiency = kLocalMultiRankEff;
  return a;
}

// The `local` communicator: ranks are threads, a collective is copies between their buffers in
// shared memory; bandwidth is the measured per-rank copy rate of an all-gather, latency its
// rendezvous per algorithm step. One tier (every rank is on the host).
Tier local_shm() { return {"shm", 64, kLocalCommGbPerS, kLocalCommLatencyUs, 1.0, 1, {}}; }

}  // namespace

std::vector<std::string> cluster_preset_names() {
  return {"llama3-h100", "dgx-h100", "dgx-a100", "h200", "tpu-v5p", "local-cpu"};
}

Result<Cluster> cluster_preset(const std::string& name) {
  Cluster c;
  c.name = name;
  if (name == "llama3-h100") {
    // Llama 3 paper 3.3 and its notes: 8 GPUs per server on NVLink; one 400 Gbps RoCE NIC per GPU;
    // 2 servers (16 GPUs) per rack under one ToR; 192 racks = 3,072-GPU pod with full bisection;
    // 8 pods = 24,576 GPUs through an aggregation layer oversubscribed 1:7; latency up to tens of us.
    c.accelerator = h100();
    c.tiers = {nvlink4(),
               {"rack", 16, 50, 5, 0.85, 1, {}},
               {"pod", 3072, 50, 10, 0.85, 1, {}},
               {"cluster", 24576, 50, 20, 0.85, 7, {}}};
    // Checkpoints go to Tectonic: 2 TB/s sustained, 7 TB/s peak (paper 3.3.1); the sustained figure.
    c.storage_bw_gb_per_s = 2000;
  } else if (name == "dgx-h100") {
    // DGX H100 SuperPOD: 8 x ConnectX-7 400 Gbps NDR InfiniBand per server, rail-optimised
    // non-blocking fat tree: 32 servers (256 GPUs) per scalable unit, a spine across units and a
    // core layer beyond 2,048 GPUs (NVIDIA DGX SuperPOD reference architecture).
    c.accelerator = h100();
    c.tiers = {nvlink4(),
               {"leaf", 256, 50, 4, 0.85, 1, {}},
               {"spine", 2048, 50, 6, 0.85, 1, {}},
               {"core", 32768, 50, 10, 0.85, 1, {}}};
  } else if (name == "dgx-a100") {
    // A100 SXM4 80 GB: 312 TFLOP/s BF16 (no FP8), 19.5 FP32, 2.039 TB/s, 108 SMs, 79.2 GiB usable;
    // achievable matmul 271/312 = 0.87 (Bekman); FlashAttention-2 about 0.65 forward and 0.5 backward
    // at long sequences (Dao 2023); a 400 W A100 holds its boost clock better: x 0.95 sustained.
    // NVLink 3: 12 x 25 = 300 GB/s per direction; 8 x 200 Gbps HDR InfiniBand per server; SuperPOD of
    // 20-server scalable units.
    c.accelerator = {.name = "A100 SXM 80GB",
                     .peak_tflops_bf16 = 312,
                     .peak_tflops_fp32 = 19.5,
                     .memory_gib = 79.2,
                     .memory_bw_gb_per_s = 2039,
                     .matmul_efficiency = 0.83,
                     .attention_fwd_efficiency = 0.62,
                     .attention_bwd_efficiency = 0.475,
                     .memory_bw_efficiency = 0.80,
                     .sm_count = 108,
                     .kernel_overhead_us = 4,
                     .speed_variation = 0.01};
    c.tiers = {{"nvlink", 8, 300, 3, 0.80, 1, {}},
               {"leaf", 160, 25, 4, 0.85, 1, {}},
               {"spine", 1120, 25, 6, 0.85, 1, {}},
               {"core", 8960, 25, 10, 0.85, 1, {}}};
  } else if (name == "h200") {
    // H200 SXM 141 GB: the H100's compute with 4.8 TB/s HBM3e (nvidia-smi: 140.4 GiB); DGX H200
    // network as DGX H100 (400 Gbps NDR per GPU, rail-optimised fat tree).
    c.accelerator = h100();
    c.accelerator.name = "H200 SXM 141GB";
    c.accelerator.memory_gib = 140.4;
    c.accelerator.memory_bw_gb_per_s = 4800;
    // Its fp8 GEMMs measured on their own (Bekman's table: 1,453.4 of 1,979 TFLOP/s = 0.734, against the
    // H100's 0.709; bf16 "the same" as the H100's), x 0.9 sustained.
    c.accelerator.matmul_efficiency_fp8 = 0.661;
    c.tiers = {nvlink4(),
               {"leaf", 256, 50, 4, 0.85, 1, {}},
               {"spine", 2048, 50, 6, 0.85, 1, {}},
               {"core", 32768, 50, 10, 0.85, 1, {}}};
  } else if (name == "tpu-v5p") {
    // TPU v5p (Google Cloud docs; scaling book): 459 TFLOP/s BF16, 96 GB HBM at 2.8 TB/s; a pod is a
    // 16 x 20 x 28 = 8,960-chip 3D torus of ICI links, 9e10 B/s per link per direction (the scaling
    // book's one-way figure for v5p; Google Cloud gives 1,200 GB/s bidirectional per chip, 100 per link
    // each way), 6 links per chip (one each way along each axis), about 1 us per hop.
    c.accelerator = {.name = "TPU v5p",
                     .peak_tflops_bf16 = 459,
                     .memory_gib = 96e9 / (1024.0 * 1024 * 1024),
                     .memory_bw_gb_per_s = 2765,
                     .matmul_efficiency = 0.80,
                     .attention_fwd_efficiency = 0.60,
                     .attention_bwd_efficiency = 0.45,
                     .memory_bw_efficiency = 0.80,
                     .speed_variation = 0.01};
    c.tiers = {{"ici", 8960, 90, 1, 0.80, 1, {16, 20, 28}}};
    c.gpus_per_node = 4;  // a v5p host (VM) holds 4 chips
  } else if (name == "local-cpu") {
    c.accelerator = local_cpu();
    c.tiers = {local_shm()};
  } else {
    std::string names;
    for (const auto& n : cluster_preset_names()) names += (names.empty() ? "" : ", ") + n;
    return make_error("unknown cluster preset '", name, "'; use one of ", names, " or a path to a cluster JSON file");
  }
  HERD_RETURN_IF_ERROR(validate(c));
  return c;
}

}  // namespace herd::topology

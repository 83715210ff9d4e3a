// A round-number accelerator for cost tests whose expected values are computed by hand, and the
// training spec they share.
#pragma once

#include "herd/model/config.h"
#include "herd/planner/cost.h"
#include "herd/topology/cluster.h"

namespace herd::testing {

inline const model::LlamaConfig k8b = *model::preset("llama3-8b");

// 1000 TFLOP/s bf16, 2000 fp8, 10,000 GB/s HBM, every efficiency 1 except flash attention (0.5 fused,
// 0.25 eager), no wave model, no launch gaps, no stragglers. At 10 TB/s every GEMM of llama3-8b at
// 4,096 rows is compute-bound. NVLink: 8 GPUs at 450 x 0.75 = 337.5 GB/s and 3 us per ring step.
inline topology::Cluster round_cluster() {
  topology::Cluster c;
  c.name = "round";
  topology::Accelerator& a = c.accelerator;
  a.name = "round";
  a.peak_tflops_bf16 = 1000, a.peak_tflops_fp8 = 2000, a.peak_tflops_fp32 = 100;
  a.memory_gib = 1000, a.memory_bw_gb_per_s = 10000;
  a.matmul_efficiency = 1, a.attention_fwd_efficiency = 0.5, a.attention_bwd_efficiency = 0.5;
  a.eager_attention_fwd_efficiency = 0.25, a.eager_attention_bwd_efficiency = 0.25;
  a.memory_bw_efficiency = 1, a.sm_count = 0, a.kernel_overhead_us = 0, a.speed_variation = 0;
  c.tiers = {{"nvlink", 8, 450, 3, 0.75, 1, {}}, {"net", 64, 50, 4, 1.0, 1, {}}};
  return c;
}

// One sequence of 4,096 tokens on one accelerator, 8 micro-batches per step.
inline const planner::TrainingSpec kOne{4096, 8, planner::Precision::kBF16};
// Forward GEMM FLOPs of a layer: 2 x 4096 rows x 218,103,808 weights = 1.78671e12 -> 1.78671e-3 s at 1e15.
inline constexpr double kGemmFwd = 2.0 * 4096 * 218103808 / 1e15;

inline planner::StepCosts costs(const planner::TrainingSpec& t, planner::Layout l = {}) {
  return *planner::step_costs(k8b, round_cluster(), t, l);
}

inline planner::StepCosts costs(const planner::TrainingSpec& t, model::Recompute rc) {
  planner::Layout l;
  l.recompute = rc;
  return costs(t, l);
}

}  // namespace herd::testing

// Time of the pieces of one training step on one accelerator: GEMMs by roofline, flash attention by
// an achieved fraction of peak (or materialized attention as batched GEMMs and s^2 traffic), the
// software profile's elementwise traffic (planner/software.h), fp8 casts, elementwise kernels by memory bandwidth, and
// collectives by the nccl-tests bandwidth model over the network tier each group crosses. The planner adds these up per
// layer and micro-batch; schedule/ turns them into a pipeline step. Derivations: docs/planner.md.
#pragma once

#include <cstdint>

#include "herd/model/config.h"
#include "herd/planner/layout.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

// --- Collectives: core/collective_bw.h's ring model (bus factor x bytes / bandwidth + latency steps)
// on the group's link, whose ring_steps count the latency steps. `bytes` is the size of the whole
// tensor (the gathered output of an all-gather, the input of a reduce-scatter or all-reduce).
double all_gather_s(double bytes, std::int64_t n, const topology::GroupLink& link);
double reduce_scatter_s(double bytes, std::int64_t n, const topology::GroupLink& link);
double all_reduce_s(double bytes, std::int64_t n, const topology::GroupLink& link);
double p2p_s(double bytes, const topology::GroupLink& link);

// --- Kernels.
// A GEMM (m x k) @ (k x n): max(FLOP time at the achievable fraction of peak, divided by the wave
// efficiency of 128 x 128 output tiles over the SMs; bytes of A, B, C over achievable HBM bandwidth).
double gemm_s(double m, double n, double k, double peak_flops, double bytes_per_element,
              const topology::Accelerator& acc);
// The same GEMM whose output C (m x n) is read and written at c_bytes per element (beta = 1): a
// weight-gradient GEMM accumulating into an fp32 buffer has c_bytes = 8 (4 read + 4 written).
double gemm_accumulate_s(double m, double n, double k, double peak_flops, double bytes_per_element, double c_bytes,
                         const topology::Accelerator& acc);
// Exposed part of a TP collective of comm_s seconds split into tp chunks pipelined with a GEMM of
// gemm_s seconds: max(comm, gemm) + min(comm, gemm) / tp - gemm (the first chunk, or what the GEMM
// cannot cover).
double tp_overlapped_exposed_s(double comm_s, double gemm_s, double tp);
// Forward + dgrad + wgrad of one linear applied to m tokens: y(m x n) = x(m x k) W(k x n).
double linear_train_s(double m, double n, double k, double peak_flops, double bytes_per_element,
                      const topology::Accelerator& acc, double* fwd_s);
// `bytes` over HBM at `efficiency` of its bandwidth; 0: the elementwise kernels' memory_bw_efficiency
// (the optimizer's pass passes optimizer_bw_efficiency, 0 where the accelerator gives none).
double memory_bound_s(double bytes, const topology::Accelerator& acc, double efficiency = 0);
// `batch` independent GEMMs (m x k) @ (k x n) in one launch (materialized attention's QK^T and PV):
// max(FLOPs at matmul_efficiency of peak, bytes over HBM); the batch fills the SMs (no wave loss).
double batched_gemm_s(double batch, double m, double n, double k, double peak_flops, double bytes_per_element,
                      const topology::Accelerator& acc);

// Per-micro-batch costs of one layer, of the embedding and of the output head on one accelerator.
struct PieceCost {
  double fwd_math = 0, bwd_math = 0;  // kernels, including recomputation in the backward
  double fwd_tp = 0, bwd_tp = 0;      // exposed tensor-parallel collectives
  double tp_hidden = 0;               // TP collectives hidden behind GEMMs (--tp-overlap on): reported, not timed
  double fwd_cp = 0, bwd_cp = 0;      // exposed context-parallel K/V all-gather and dK/dV reduce-scatter
  double model_flops = 0;             // per micro-batch on this accelerator, the MFU convention
  double hardware_flops = 0;          // what the kernels execute (recompute and flash backward included)
  double fwd() const { return fwd_math + fwd_tp + fwd_cp; }
  double bwd() const { return bwd_math + bwd_tp + bwd_cp; }
};

struct StepCosts {
  PieceCost layer, embedding, output;
  double boundary_bytes = 0;  // one pipeline boundary's activation per micro-batch, per accelerator
  // model/activations.h bytes one micro-batch keeps, per layer, on the first and on the last stage.
  double layer_activation_bytes = 0, embedding_activation_bytes = 0, output_activation_bytes = 0;
  topology::GroupLink tp_link, cp_link, pp_link, dp_link;
  double matmul_peak_flops = 0;  // per second, at the chosen precision
};

Result<StepCosts> step_costs(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                             const Layout& layout);

// Model FLOPs per token of the MFU convention: 6 x parameters + 12 x L x n_heads x head_dim x (T+1)/2
// (model::FlopConvention::kSixN, causal mask). The same number `herd model` prints.
double model_flops_per_token(const model::LlamaConfig& cfg, std::int64_t seq_len);

}  // namespace herd::planner

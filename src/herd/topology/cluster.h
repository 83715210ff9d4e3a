// Cluster: one accelerator type and the network tiers that join accelerators, innermost first.
//
// A tier is a domain of `size` accelerators (cumulative: 8 per NVLink server, 16 per rack, 3072 per
// pod, 24576 per cluster) with a per-accelerator, one-direction bandwidth into that tier, a per-step
// latency, an achieved fraction of the nominal bandwidth and an oversubscription ratio (1:7 at the
// Llama 3 aggregation layer). A tier may instead be a torus (TPU ICI): its accelerators sit on a grid
// with wrap-around links, and a group's bandwidth is the sum over the torus axes it spans.
//
// Ranks are placed on accelerators in order (rank r on accelerator r), so a group of n ranks at stride
// s (the [TP, CP, PP, DP] order of ParallelDims) spans aligned domains of s*n accelerators;
// link_for_group() returns the slowest link such a group crosses when every group of its kind runs the
// same collective at once. Derivations: docs/planner.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::topology {

struct Accelerator {
  std::string name;
  double peak_tflops_bf16 = 0;  // dense tensor-core peak; fp16 is the same on every preset
  double peak_tflops_fp8 = 0;   // 0 when the accelerator has no fp8 tensor cores
  double peak_tflops_fp32 = 0;  // non-tensor-core fp32 (elementwise, optimizer)
  double memory_gib = 0;        // usable HBM per accelerator
  double memory_bw_gb_per_s = 0;
  // Achievable fractions (documented defaults in docs/planner.md; optional in a cluster file):
  double matmul_efficiency = 0.8;  // large-GEMM throughput / peak (max achievable matmul FLOPS)
  // fp8 GEMMs / the fp8 peak, where it differs from the bf16 fraction above (Hopper: 0.71 of the fp8
  // peak against 0.80 of the bf16 one at the best shapes); 0 = the same as matmul_efficiency.
  double matmul_efficiency_fp8 = 0;
  double attention_fwd_efficiency = 0.6;   // flash-attention forward / peak
  double attention_bwd_efficiency = 0.45;  // flash-attention backward / peak
  double memory_bw_efficiency = 0.8;       // streaming kernels / nominal HBM bandwidth
  // The optimizer's pass over every parameter (one multi-tensor AdamW launch over GB of state) / nominal
  // HBM bandwidth, where it differs from the layers' elementwise kernels above (a GPU calibration
  // measures both: herd's AdamW streams at about 3x the rate of its per-layer norms); 0 = the same.
  double optimizer_bw_efficiency = 0;
  // Attention under the eager software profile (PyTorch's FlashAttention-2 kernels) / peak, where it
  // differs from the fused stack's kernels above (Hopper: FlashAttention-3 class); 0 = the same.
  double eager_attention_fwd_efficiency = 0;
  double eager_attention_bwd_efficiency = 0;
  std::int64_t sm_count = 0;      // for GEMM wave quantization; 0 = not modelled
  double kernel_overhead_us = 0;  // per kernel launch gap (host and launch latency)
  // Spread (standard deviation, as a fraction) of one accelerator's speed around the mean (thermal
  // and power-driven clock variation); a synchronous step waits for the slowest of the job.
  double speed_variation = 0.01;
  // CPU ranks (herd's own runtime on a host): the cores every rank of the job shares, 0 for a dedicated
  // accelerator. Then the peaks, memory_bw_gb_per_s and the tiers' bandwidth are one core's, and
  // host_share() turns them into what one rank of an n-rank job gets (docs/projection.md).
  std::int64_t host_cores = 0;
  // A rank that runs t > 1 threads (ranks < host_cores) gets 1 + (t - 1) x thread_scaling cores' worth.
  double thread_scaling = 1.0;
  // A rank of a multi-rank job computes at this fraction of a single-rank job's rates: the distributed
  // runtime around the same kernels (FSDP flat buffers, TP and CP layout copies), measured by
  // `herd calibrate` on the distributed path at degree 1 with its communication taken out.
  double multi_rank_efficiency = 1.0;
  // Threads per rank (herd train's train.threads); 0 = the launcher's rule, max(1, host_cores / ranks).
  std::int64_t threads_per_rank = 0;
  // Other jobs competing for the host's cores right now (measured when a run starts): Linux shares
  // the cores fairly among scheduling groups (one per session with autogroup), not among threads.
  double background_jobs = 0;
  // A host calibrated in both precisions (herd calibrate on a CPU: the efficiencies above are then its
  // fp32 runtime's) carries those of its bf16 runtime here, against peak_tflops_bf16; 0 = the same as
  // above (every GPU preset: its efficiencies are the bf16 ones already). JSON: accelerator.bf16.
  double bf16_matmul_efficiency = 0;
  double bf16_attention_fwd_efficiency = 0;
  double bf16_attention_bwd_efficiency = 0;
  double bf16_memory_bw_efficiency = 0;
};

// The accelerator as a run with bf16 (or fp16 / fp8) matmuls sees it: the bf16_* efficiencies in place
// of the others where given. `a` itself for an fp32 run.
Accelerator at_precision(const Accelerator& a, bool bf16);

struct Tier {
  std::string name;
  std::int64_t size = 0;            // accelerators in one domain of this tier (cumulative)
  double bw_gb_per_s = 0;           // per accelerator, one direction (per link for a torus)
  double latency_us = 0;            // per algorithm step (per hop for a torus)
  double efficiency = 0.8;          // achieved fraction of bw_gb_per_s (nccl-tests bus bandwidth / nominal)
  double oversubscription = 1;      // uplink oversubscription of this tier (7 for 1:7)
  std::vector<std::int64_t> torus;  // torus axis lengths, innermost first; empty for a switched tier
};

struct Cluster {
  std::string name;
  Accelerator accelerator;
  std::vector<Tier> tiers;
  // Aggregate write bandwidth of the storage checkpoints go to, GB/s, shared by the job's accelerators
  // (the planner's reliability projection); 0 when the cluster file gives none.
  double storage_bw_gb_per_s = 0;
  // Accelerators in one node (a server, a TPU host): what one node failure takes out of a job (the
  // planner's elastic recovery); 0 when the cluster file gives none, see node_size().
  std::int64_t gpus_per_node = 0;
  std::int64_t max_accelerators() const { return tiers.empty() ? 1 : tiers.back().size; }
  // gpus_per_node, or else the innermost tier's size when it is a switched one (a server's NVLink
  // domain), else 1.
  std::int64_t node_size() const {
    if (gpus_per_node > 0) return gpus_per_node;
    return !tiers.empty() && tiers.front().torus.empty() ? tiers.front().size : 1;
  }
  double memory_bytes() const { return accelerator.memory_gib * 1024.0 * 1024.0 * 1024.0; }
};

// Checks every field (positive sizes, increasing tiers, each a multiple of the previous, ...).
Status validate(const Cluster& c);

// From the JSON format of docs/planner.md; every missing, negative or mistyped field is an error that
// names it ("tiers[1].bw_gb_per_s: expected a number, got \"fast\"").
Result<Cluster> cluster_from_json(const Json& j);
Result<Cluster> load_cluster(const std::string& path);
Json cluster_to_json(const Cluster& c);

// What one of `ranks` ranks gets of a CPU host's cores, in units of one core. Each rank runs
// t = threads_per_rank threads, or max(1, floor(host_cores / ranks)) (as the launcher sets). The
// job's n = ranks x t threads get C = min(n, host_cores / (1 + background_jobs)) cores (a fair share
// among the scheduling groups), each thread s = C / n of a core, and a rank's t threads are worth
// s x (1 + (t - 1) x thread_scaling) cores: continuous in the background load, so a trace of it moves
// the share by a trace. 1 when host_cores is 0 (a dedicated accelerator).
double host_core_share(const Accelerator& a, std::int64_t ranks);
// How many of the job's threads share each core it gets, n / C in host_core_share's terms (1 when
// every thread has a core of its own, or host_cores is 0). Above 1 the cores are time-sliced, and a
// rank that waits gives its share to the ranks that can run.
double host_oversubscription(const Accelerator& a, std::int64_t ranks);
// The cluster as one rank of an n-rank job on a shared host sees it: peaks and memory bandwidth x
// host_core_share (x multi_rank_efficiency when ranks > 1), tier bandwidth x the core share alone
// (shared-memory copies need the same cores), per-op overheads and tier latencies x
// host_oversubscription. `c` itself when host_cores is 0; otherwise the copy lives in *storage.
const Cluster& host_share(const Cluster& c, std::int64_t ranks, Cluster* storage);

// Presets: llama3-h100, dgx-h100, dgx-a100, h200, tpu-v5p, local-cpu (this machine running herd's ranks;
// build/local-cpu.json from `herd calibrate`, given as projection.cluster_file, overrides its committed defaults).
std::vector<std::string> cluster_preset_names();
Result<Cluster> cluster_preset(const std::string& name);
// A preset name, or else a path to a cluster JSON file.
Result<Cluster> resolve_cluster(const std::string& name_or_path);

// The link a collective over a group uses: effective one-direction bandwidth per accelerator in bytes
// per second (after efficiency, oversubscription and, on a torus, the axes spanned), the per-step
// latency, and the number of algorithm steps of a ring all-gather over the group.
struct GroupLink {
  int tier = -1;          // index of the outermost tier the group crosses; -1 for a group of one
  std::string tier_name;  // "nvlink", "rack", ...; "local" for a group of one
  double bw_bytes_per_s = 0;
  double latency_s = 0;
  std::int64_t ring_steps = 0;  // n - 1 on a switched network; sum over torus axes of (extent - 1)
};

// Group of n ranks at stride s starting at rank 0 (every group of the same dimension looks alike).
// Error when the group does not fit in the cluster.
Result<GroupLink> link_for_group(const Cluster& c, std::int64_t stride, std::int64_t n);

}  // namespace herd::topology

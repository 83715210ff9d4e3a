// Software profiles: what the kernels of a run's software stack reach on a given accelerator, and
// how much elementwise traffic and how many launches a transformer layer costs under it. The GEMMs
// are the same cuBLAS / CUTLASS kernels under every profile; what differs is fusion (how many times
// an elementwise tensor crosses HBM, and in which precision), the attention kernel, the GEMM grouping
// and what `selective` recompute means. Every number is derived in docs/planner.md section 3,
// "Software profiles", op by op or from a published kernel benchmark; none is fitted to a run.
#pragma once

#include "herd/planner/layout.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

// Elementwise bytes of one transformer layer and micro-batch, as multiples of three tensors at the
// activations' precision: An the residual stream (the sequence-parallel shard), Q the local q + k
// (RoPE's inputs), F one local MLP-width tensor.
struct ElementwiseTraffic {
  double an = 0, q = 0, f_swiglu = 0, f_gelu = 0;
};

struct SoftwareProfile {
  Software software = Software::kFused;
  ElementwiseTraffic fwd, bwd;
  double launches_fwd = 0, launches_bwd = 0;  // kernels per layer beyond the GEMMs
  // The loss after the output head: bytes each local logit moves through HBM, forward and backward,
  // beside the head's GEMMs (the softmax cross-entropy's passes over the vocabulary shard).
  double loss_bytes_fwd = 8, loss_bytes_bwd = 8;
  bool fused_projections = true;                                      // q/k/v as one GEMM, gate/up as one GEMM
  double attention_fwd_efficiency = 0, attention_bwd_efficiency = 0;  // flash kernels / peak
  // `selective` recompute: the fraction of the forward's GEMM time replayed in the backward (0: only
  // elementwise work is rebuilt, herd's and Megatron's selective; 0.5: op-level selective
  // checkpointing that saves every second matmul output, torchtitan's policy).
  double selective_gemm_recompute = 0;
  // Fraction of the compute time lost while a collective overlaps it: NCCL runs one thread block per
  // channel on an SM of its own, 2 channels per network peer (NCCL_NCHANNELS_PER_NET_PEER) x 8 NICs
  // = 16 SMs of the accelerator's sm_count; 0 when the accelerator has no SM count (TPU, CPU).
  double overlap_slowdown = 0;
  // Share of the TP collective time that --tp-overlap's chunked schedule would hide (cost.cpp,
  // layer_tp) which is really hidden: kTpOverlapHiddenShareGpu on an accelerator with SMs, 1 without.
  double tp_overlap_hidden_share = 1;

  // herd's own runtime (Software::kHerd), where it departs from the fused stacks; false elsewhere.
  // The weight-gradient GEMMs accumulate into the fp32 gradient buffer in either precision (gemm_bf16
  // writes fp32 with beta = 1): no separate accumulation pass.
  bool weight_grads_in_place = false;
  // Full recompute replays the layer up to, not including, the down projection: its output, the next
  // layer's input, is what the forward kept; that GEMM and its TP collective are not redone.
  bool recompute_keeps_down_projection = false;
  // The output head makes its logits in fp32 tiles of 256 rows x 8,192 ids (kernels/cross_entropy.h)
  // in either precision.
  bool tiled_logits = false;
  // FSDP flat units (parallel/fsdp/flat_unit.h) keep every full gradient buffer until the end of the
  // backward in either precision, a group of one works in its shards in place, and the units gather
  // into and reduce-scatter from those full buffers (no communication buffers of their own).
  bool flat_unit_gradients = false;
  // On a CPU host the collectives run on the ranks' own threads, so nothing hides behind compute, and
  // the flat units are gathered again before every micro-batch (released after each backward).
  bool collectives_on_compute_threads = false;
};

// NCCL channels of a ring collective over 8 NICs per node (2 per network peer, NCCL's default).
inline constexpr double kNcclChannels = 16;

// On a GPU, the share of the TP collective time the chunked overlap schedule would hide that a run
// really hides (Transformer Engine's userbuffers, PyTorch's async TP): the median, over the tuned runs
// of tests/planner/published_runs.json that set --tp-overlap on, of (step without overlap - published)
// / (step without overlap - step with the schedule's whole hiding). The rest is lost to what runs
// beside the chunked GEMMs (their SMs, L2 and HBM shared with the copies; the chunks' own lower rate),
// which no kernel benchmark read quantifies. docs/planner.md section 4.4 has the nine runs.
inline constexpr double kTpOverlapHiddenShareGpu = 0.40;

// Bytes per local logit of the softmax cross-entropy, forward and backward (docs/planner.md section 3).
// Megatron-Core's vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py), op by op on fp32
// logits: the cast of the bf16 logits (read 2, write 4), the max (read 4), the in-place subtraction
// (4 + 4), exp (4 + 4), the sum (read 4) and the in-place division that leaves the softmax saved for
// the backward (4 + 4) = 38; backward, the in-place multiply by the loss gradient (4 + 4) and the cast
// of the gradient back to the logits' bf16 (4 + 2) = 14.
inline constexpr double kMegatronLossBytesFwd = 38, kMegatronLossBytesBwd = 14;
// PyTorch's F.cross_entropy on logits cast to fp32 (torchtitan's loss): the cast (2 + 4), log_softmax
// (max, sum of exp and the output: 3 reads and 1 write of 4) = 22; backward, nll_loss's dense gradient
// (write 4), log_softmax's backward (read the gradient twice and the output once, write 4: 16) and the
// cast back to bf16 (4 + 2) = 26.
inline constexpr double kTorchLossBytesFwd = 22, kTorchLossBytesBwd = 26;

// `acc` as the cluster gives it, before topology::host_share (whose host_cores says a CPU host).
SoftwareProfile software_profile(Software s, const topology::Accelerator& acc);

}  // namespace herd::planner

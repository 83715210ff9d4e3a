#include "herd/planner/software.h"

namespace herd::planner {

SoftwareProfile software_profile(Software s, const topology::Accelerator& acc) {
  SoftwareProfile p;
  p.software = s;
  p.overlap_slowdown = acc.sm_count > 0 ? kNcclChannels / static_cast<double>(acc.sm_count) : 0.0;
  p.tp_overlap_hidden_share = acc.sm_count > 0 ? kTpOverlapHiddenShareGpu : 1.0;
  if (s == Software::kEager) {
    // PyTorch eager, op by op (bytes per element of a bf16 tensor, 2 bytes):
    // RMSNorm `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w`: upcast (read 2,
    // write 4), pow (4 + 4), mean (read 4), multiply (4 + 4), downcast (4 + 2), weight (2 + 2) = 36
    // bytes = 18 An per norm, 36 An for two, + 6 An for the two residual adds = 42 An.
    // RoPE on q and k through complex fp32: upcast (2 + 4), complex multiply (4 + 4), downcast (4 + 2)
    // = 20 bytes = 10 Q. SwiGLU `silu(gate) * up`: silu (2 + 2), multiply (2 + 2 + 2) = 10 bytes = 5 F
    // (GeLU one op, 2 F). Autograd's backward of each op reads the output gradient and the saved
    // inputs and writes the input gradient, at the op's own precision: twice the forward's traffic.
    p.fwd = {42, 10, 5, 2};
    p.bwd = {84, 20, 10, 4};
    p.launches_fwd = 50;
    p.launches_bwd = 100;
    p.loss_bytes_fwd = kTorchLossBytesFwd;
    p.loss_bytes_bwd = kTorchLossBytesBwd;
  } else {
    // Fused kernels (Megatron / Transformer Engine): each norm reads An and writes An, each residual
    // add reads 2 An and writes An (10 An); RoPE reads and writes q and k in place (2 Q); SwiGLU reads
    // gate and up and writes their product (3 F; GeLU 2 F). The backward reads the output gradient and
    // the saved inputs and writes the input gradients: 14 An + 2 Q + 5 F (GeLU 3 F).
    p.fwd = {10, 2, 3, 2};
    p.bwd = {14, 2, 5, 3};
    p.launches_fwd = 20;
    p.launches_bwd = 40;
    p.loss_bytes_fwd = kMegatronLossBytesFwd;
    p.loss_bytes_bwd = kMegatronLossBytesBwd;
    p.attention_fwd_efficiency = acc.attention_fwd_efficiency;
    p.attention_bwd_efficiency = acc.attention_bwd_efficiency;
    if (s == Software::kFused) return p;
    if (s == Software::kHerd) {
      // herd's kernels are fused as above (one pass per norm, RoPE, SwiGLU and residual add, flash
      // attention); what differs is how it accumulates, recomputes, tiles and communicates.
      p.weight_grads_in_place = true;
      p.recompute_keeps_down_projection = true;
      p.tiled_logits = true;
      p.flat_unit_gradients = true;
      p.collectives_on_compute_threads = acc.host_cores > 0;
      // Its cross-entropy (kernels/cpu/cross_entropy.cpp) writes each fp32 logit tile once and reads it
      // once, and turns it into its gradient in place: 8 bytes a logit each way.
      p.loss_bytes_fwd = 8;
      p.loss_bytes_bwd = 8;
      return p;
    }
    // torch.compile (Inductor) fuses the elementwise chains between the GEMMs into generated kernels:
    // a norm with its casts, RoPE, SwiGLU and the residual adds each read their inputs and write their
    // outputs once, as the fused kernels above do. It does not change what the model code calls: the
    // rest below is eager's, the loss included (torchtitan compiles the blocks, not the loss).
    p.loss_bytes_fwd = kTorchLossBytesFwd;
    p.loss_bytes_bwd = kTorchLossBytesBwd;
  }
  // PyTorch model code (eager or compiled): separate q, k, v, gate and up GEMMs; `selective` recompute
  // is op-level selective checkpointing (every second forward matmul output saved, torchtitan's
  // policy); scaled_dot_product_attention runs FlashAttention-2 kernels, which on Hopper reach about
  // 1/1.75 (forward) and 1/1.6 (backward) of FlashAttention-3's rate (Shah et al. 2024: FA3 is 1.5-2.0x
  // faster forward, 1.5-1.75x backward). The accelerator says so (eager_attention_*_efficiency); where
  // it gives none, FA2 is the accelerator's best kernel (A100) and the fused efficiencies apply.
  p.fused_projections = false;
  p.selective_gemm_recompute = 0.5;
  p.attention_fwd_efficiency =
      acc.eager_attention_fwd_efficiency > 0 ? acc.eager_attention_fwd_efficiency : acc.attention_fwd_efficiency;
  p.attention_bwd_efficiency =
      acc.eager_attention_bwd_efficiency > 0 ? acc.eager_attention_bwd_efficiency : acc.attention_bwd_efficiency;
  return p;
}

}  // namespace herd::planner

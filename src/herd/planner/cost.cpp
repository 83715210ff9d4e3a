#include "herd/planner/cost.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "herd/core/collective_bw.h"
#include "herd/model/activations.h"
#include "herd/model/params.h"
#include "herd/planner/software.h"

namespace herd::planner {

// --- Collectives --------------------------------------------------------------------------------

// Every collective is the ring model of core/collective_bw.h over the group's link; send/recv is one
// step between two ranks.
double all_gather_s(double bytes, std::int64_t n, const topology::GroupLink& link) {
  return collective_seconds(Collective::kAllGather, n, bytes, link.bw_bytes_per_s, link.latency_s, link.ring_steps);
}

double reduce_scatter_s(double bytes, std::int64_t n, const topology::GroupLink& link) {
  return collective_seconds(Collective::kReduceScatter, n, bytes, link.bw_bytes_per_s, link.latency_s, link.ring_steps);
}

double all_reduce_s(double bytes, std::int64_t n, const topology::GroupLink& link) {
  return collective_seconds(Collective::kAllReduce, n, bytes, link.bw_bytes_per_s, link.latency_s, link.ring_steps);
}

double p2p_s(double bytes, const topology::GroupLink& link) {
  if (link.tier < 0) return 0;
  return collective_seconds(Collective::kSendRecv, 2, bytes, link.bw_bytes_per_s, link.latency_s, 1);
}

// --- Kernels ------------------------------------------------------------------------------------

namespace {

// Output tiles of 128 x 256 (the large-tile kernels cuBLAS and CUTLASS pick for big bf16 GEMMs) run
// in waves of one tile per SM; a partial last wave idles the rest (NVIDIA, "Matrix Multiplication
// Background User's Guide", tile and wave quantization).
double wave_efficiency(double m, double n, const topology::Accelerator& acc) {
  if (acc.sm_count <= 0) return 1.0;
  const double tiles = std::ceil(std::min(m, n) / 128.0) * std::ceil(std::max(m, n) / 256.0);
  const double waves = tiles / static_cast<double>(acc.sm_count);
  return waves / std::ceil(waves);
}

}  // namespace

double gemm_accumulate_s(double m, double n, double k, double peak_flops, double bpe, double c_bytes,
                         const topology::Accelerator& acc) {
  const double flops = 2.0 * m * n * k;
  const double compute = flops / (peak_flops * acc.matmul_efficiency * wave_efficiency(m, n, acc));
  const double memory = memory_bound_s((m * k + k * n) * bpe + m * n * c_bytes, acc);
  return std::max(compute, memory) + acc.kernel_overhead_us * 1e-6;
}

double gemm_s(double m, double n, double k, double peak_flops, double bpe, const topology::Accelerator& acc) {
  return gemm_accumulate_s(m, n, k, peak_flops, bpe, bpe, acc);
}

double linear_train_s(double m, double n, double k, double peak, double bpe, const topology::Accelerator& acc,
                      double* fwd_s) {
  const double f = gemm_s(m, n, k, peak, bpe, acc);
  if (fwd_s) *fwd_s += f;
  // dgrad: (m x n) @ (n x k); wgrad: (k x m) @ (m x n), accumulated into an fp32 buffer.
  return f + gemm_s(m, k, n, peak, bpe, acc) + gemm_s(k, n, m, peak, bpe, acc);
}

double tp_overlapped_exposed_s(double comm_s, double gemm_s, double tp) {
  if (comm_s <= 0) return 0;
  return std::max(comm_s, gemm_s) + std::min(comm_s, gemm_s) / tp - gemm_s;
}

double batched_gemm_s(double batch, double m, double n, double k, double peak_flops, double bpe,
                      const topology::Accelerator& acc) {
  const double compute = 2.0 * batch * m * n * k / (peak_flops * acc.matmul_efficiency);
  const double memory = memory_bound_s(batch * (m * k + k * n + m * n) * bpe, acc);
  return std::max(compute, memory) + acc.kernel_overhead_us * 1e-6;
}

double memory_bound_s(double bytes, const topology::Accelerator& acc, double efficiency) {
  return bytes / (acc.memory_bw_gb_per_s * 1e9 * (efficiency > 0 ? efficiency : acc.memory_bw_efficiency));
}

double model_flops_per_token(const model::LlamaConfig& cfg, std::int64_t seq_len) {
  return *model::train_model_flops_per_token(cfg, seq_len, model::AttentionMask::causal(),
                                             model::FlopConvention::kSixN);
}

// --- One layer, the embedding and the output head -------------------------------------------------

namespace {

// What every piece of the step's cost reads: the precision, the profile, and the local sizes of one
// micro-batch (tokens after CP, the residual stream after SP, heads and width after TP).
struct Shapes {
  bool fp32 = false, fp8 = false, materialized = false, swiglu = false;
  bool gaf = false;             // gradient accumulation fusion (--grad-acc-fusion on, not fp32)
  double gb = 0;                // bytes per accumulated gradient element
  double bf16_peak = 0;         // FLOP/s of attention and the output head (bf16, or fp32 on a CPU)
  double e = 0, gemm_bpe = 0;   // bytes per activation element; per GEMM input element (fp8: 1)
  double b = 0, t = 0, tn = 0;  // micro-batch size, local tokens, local residual-stream tokens
  double tp = 0, h = 0, hd = 0, heads = 0, kv = 0, ffn = 0;
  double m = 0;  // GEMM rows: SP gathers the sequence before every linear
  double launch = 0, microbatches = 0;
  double An = 0, Q = 0, F = 0;  // elementwise bytes: the residual stream, q + k, the MLP width
  double act_full = 0;          // one full activation of the residual stream (TP collectives)
  double seq = 0;               // the whole sequence T (materialized attention's keys)
  double scores = 0;            // score elements per layer and micro-batch (materialized attention)
};

Shapes shapes_of(const model::LlamaConfig& cfg, const topology::Accelerator& acc, const TrainingSpec& train,
                 const Layout& l) {
  Shapes s;
  s.fp32 = train.precision == Precision::kFP32;
  s.fp8 = train.precision == Precision::kFP8;
  s.materialized = train.system.attention == Attention::kMaterialized;
  s.swiglu = cfg.mlp == model::MlpKind::kSwiGLU;
  s.gaf = train.system.grad_acc_fusion && !s.fp32;
  s.gb = train.system.grad_bytes(train.precision);
  // Attention runs at the activations' precision (bf16, or fp32 on a CPU).
  s.bf16_peak = (s.fp32 ? acc.peak_tflops_fp32 : acc.peak_tflops_bf16) * 1e12;
  // Bytes per activation element (bf16/fp16, or fp32; fp8 GEMM inputs are cast copies).
  s.e = element_bytes(train.precision);
  s.gemm_bpe = s.fp8 ? 1.0 : s.e;
  s.b = static_cast<double>(l.microbatch);
  s.t = static_cast<double>(train.seq_len / l.cp);
  s.tn = l.sp() ? s.t / static_cast<double>(l.tp) : s.t;
  s.tp = static_cast<double>(l.tp);
  s.h = static_cast<double>(cfg.hidden);
  s.hd = static_cast<double>(cfg.head_dim);
  s.heads = static_cast<double>(cfg.n_heads) / s.tp;
  s.kv = static_cast<double>(cfg.n_kv_heads) / s.tp;
  s.ffn = static_cast<double>(cfg.ffn_hidden) / s.tp;
  s.m = s.b * s.t;
  s.launch = acc.kernel_overhead_us * 1e-6;
  s.microbatches = static_cast<double>(std::max<std::int64_t>(1, l.microbatches(train)));
  s.An = s.b * s.tn * s.h * s.e;
  s.Q = s.b * s.t * (s.heads + s.kv) * s.hd * s.e;
  s.F = s.b * s.t * s.ffn * s.e;
  s.act_full = s.b * s.t * s.h * s.e;
  s.seq = static_cast<double>(train.seq_len);
  s.scores = s.b * s.heads * s.t * s.seq;
  return s;
}

struct LinearTime {
  double fwd = 0, dgrad = 0, wgrad = 0;
};

// The layer's kernels, which the TP overlap and recomputation refer back to.
struct LayerKernels {
  std::array<LinearTime, 4> lin{};  // q/k/v, o, gate/up (or the GeLU up), down
  double gemm_fwd = 0;
  double attn_fwd = 0, attn_fwd_flops = 0;
};

// The compute of one layer (L.fwd_math, L.bwd_math): GEMMs, attention, elementwise traffic, and the
// gradient accumulation pass.
//
// GEMMs: fused q/k/v and gate/up (Megatron, TE) or one GEMM per projection (eager). Under fp8
// (Transformer Engine) every linear casts its input to fp8 with the transpose the weight gradient needs
// (read 2 bytes, write 1 + 1 per element, amax reduced in the same pass), the backward casts the output
// gradient the same way, and the weights are cast once per step (the fp8 copy and its transpose cached
// across micro-batches, TE's is_first_microbatch), all memory bound.
//
// With gradient accumulation fusion (--grad-acc-fusion on) the weight-gradient GEMM reads and writes
// the fp32 gradient buffer in its epilogue (beta = 1): 8 bytes per weight in the GEMM's memory term and
// no separate accumulation pass (below). The four linears are kept apart (q/k/v, o, gate/up, down) for
// the TP overlap, which pairs each sequence-parallel collective with the GEMM it feeds or follows.
Result<LayerKernels> layer_math(const model::LlamaConfig& cfg, const topology::Accelerator& acc,
                                const TrainingSpec& train, const Layout& l, const SoftwareProfile& sw, const Shapes& s,
                                double matmul_peak_flops, PieceCost& L) {
  // The layers' GEMMs run at the fp8 fraction of the fp8 peak under fp8 (where the accelerator gives
  // one); everything else (attention, the output head) keeps the bf16 fraction.
  topology::Accelerator gemm_acc = acc;
  if (s.fp8 && acc.matmul_efficiency_fp8 > 0) gemm_acc.matmul_efficiency = acc.matmul_efficiency_fp8;
  LayerKernels k;
  double cast_fwd = 0, cast_bwd = 0;
  auto linear = [&](LinearTime& x, double n, double kk) {
    const double peak = matmul_peak_flops;
    x.fwd += gemm_s(s.m, n, kk, peak, s.gemm_bpe, gemm_acc);
    x.dgrad += gemm_s(s.m, kk, n, peak, s.gemm_bpe, gemm_acc);
    x.wgrad += s.gaf ? gemm_accumulate_s(kk, n, s.m, peak, s.gemm_bpe, 2 * s.gb, gemm_acc)
                     : gemm_s(kk, n, s.m, peak, s.gemm_bpe, gemm_acc);
    if (s.fp8) {
      cast_fwd += memory_bound_s(4.0 * (s.m * kk + kk * n / s.microbatches), acc) + 2 * s.launch;
      cast_bwd += memory_bound_s(4.0 * s.m * n, acc) + s.launch;
    }
  };
  std::array<LinearTime, 4>& lin = k.lin;
  if (sw.fused_projections) {
    linear(lin[0], (s.heads + 2 * s.kv) * s.hd, s.h);
  } else {
    linear(lin[0], s.heads * s.hd, s.h), linear(lin[0], s.kv * s.hd, s.h), linear(lin[0], s.kv * s.hd, s.h);
  }
  linear(lin[1], s.h, s.heads * s.hd);
  if (sw.fused_projections || !s.swiglu) {
    linear(lin[2], (s.swiglu ? 2 : 1) * s.ffn, s.h);
  } else {
    linear(lin[2], s.ffn, s.h), linear(lin[2], s.ffn, s.h);
  }
  linear(lin[3], s.h, s.ffn);
  double gemm_all = 0;
  for (const LinearTime& x : lin) k.gemm_fwd += x.fwd, gemm_all += x.fwd + x.dgrad + x.wgrad;

  // Attention over the local queries. Flash: the causal pairs, split evenly by the 2*CP chunking, at
  // the profile's flash efficiencies; the backward does 2.5x the forward's FLOPs (recomputed scores).
  // Materialized: QK^T and PV as batched GEMMs over all t x T (query, key) pairs (the mask is applied
  // after the matmul), the backward four GEMMs of the same size (dS, dV, dQ, dK); the scores cross HBM
  // for the fused scale-mask-softmax (read 2, write 2 bytes per score) and dropout (read 2, write 2, a
  // 1-byte mask), and back (dropout 2 + 1 + 2, softmax 2 + 2 + 2).
  HERD_ASSIGN_OR_RETURN(const double pairs, model::attention_pairs(train.seq_len, model::AttentionMask::causal()));
  k.attn_fwd_flops = 4.0 * s.b * s.heads * s.hd * pairs / static_cast<double>(l.cp);
  double attn_bwd = 0;
  if (s.materialized) {
    const double bh = s.b * s.heads;
    const double qk = batched_gemm_s(bh, s.t, s.seq, s.hd, s.bf16_peak, s.e, acc),
                 pv = batched_gemm_s(bh, s.t, s.hd, s.seq, s.bf16_peak, s.e, acc);
    k.attn_fwd = qk + pv + memory_bound_s(9.0 * s.scores, acc) + 3 * s.launch;
    attn_bwd = 2.0 * (qk + pv) + memory_bound_s(11.0 * s.scores, acc) + 6 * s.launch;
  } else {
    k.attn_fwd = k.attn_fwd_flops / (s.bf16_peak * sw.attention_fwd_efficiency);
    attn_bwd = 2.5 * k.attn_fwd_flops / (s.bf16_peak * sw.attention_bwd_efficiency);
  }

  // Elementwise traffic (bytes): residual stream An, q+k for RoPE, the MLP width F, in the profile's
  // multiples (software.cpp derives them op by op).
  auto traffic = [&](const ElementwiseTraffic& x) {
    return x.an * s.An + x.q * s.Q + (s.swiglu ? x.f_swiglu : x.f_gelu) * s.F;
  };
  const double ew_fwd = traffic(sw.fwd);
  const double ew_bwd = traffic(sw.bwd);
  // fp32 gradient accumulation across micro-batches: the bf16 weight gradient is written, read back
  // and added into the fp32 buffer (2 + 2 + 4 + 4 bytes per local parameter).
  const model::LayerParams lp = model::layer_params_tp_shard(cfg, l.tp);
  // In fp32, with gradient accumulation fusion, and in herd's runtime in either precision (gemm_bf16
  // writes fp32 with beta = 1), the weight-gradient GEMM accumulates straight into the gradient buffer.
  // Otherwise the pass moves 2 + 2 + gb + gb bytes per parameter: 12 with fp32 gradients, 8 with bf16 ones.
  const double grad_acc = s.fp32 || s.gaf || sw.weight_grads_in_place
                              ? 0.0
                              : memory_bound_s((4.0 + 2 * s.gb) * static_cast<double>(lp.total()), acc);

  L.fwd_math = k.gemm_fwd + cast_fwd + k.attn_fwd + memory_bound_s(ew_fwd, acc) + sw.launches_fwd * s.launch;
  L.bwd_math = (gemm_all - k.gemm_fwd) + cast_bwd + attn_bwd + memory_bound_s(ew_bwd, acc) + grad_acc +
               sw.launches_bwd * s.launch;
  return k;
}

// The layer's TP collectives (Megatron with sequence parallelism): forward all-gathers before attention
// and MLP and reduce-scatters after them; backward mirrors them and re-gathers the two norm outputs for
// the weight gradients. Without SP: one all-reduce after attention and one after the MLP, each way.
//
// --tp-overlap on (sequence parallelism only; Transformer Engine's userbuffers and PyTorch's async TP
// need it): each collective is split into tp chunks pipelined with its GEMM, so of a collective of
// c seconds beside a GEMM of g seconds, max(c, g) + min(c, g) / tp - g is exposed (the first chunk, or
// what the GEMM cannot cover). Forward: all-gather with q/k/v and with gate/up, reduce-scatter with o
// and with down. Backward: the all-gathers of the output gradient with the dgrad of o and of down; of
// q/k/v's and gate/up's inputs with their dgrad, whose output gradient is reduce-scattered during their
// wgrad. The communication kernels take SMs: the overlapped span costs overlap_slowdown of its length.
// Returns the forward's TP time the overlap hides, and sets `down_tp` to the exposed collective after
// the down projection.
double layer_tp(const TrainingSpec& train, const Layout& l, const SoftwareProfile& sw, const Shapes& s,
                const topology::GroupLink& link, const LayerKernels& k, PieceCost& L, double& down_tp) {
  down_tp = 0;
  double hidden_f = 0, hidden_b = 0;  // TP collective time the overlap hides, forward and backward
  if (l.tp <= 1) return 0;
  const std::array<LinearTime, 4>& lin = k.lin;
  if (l.sp() && train.system.tp_overlap) {
    const double ag = all_gather_s(s.act_full, l.tp, link), rs = reduce_scatter_s(s.act_full, l.tp, link);
    // Of what the schedule would hide, the profile's tp_overlap_hidden_share is hidden (a GPU's
    // measured share, kTpOverlapHiddenShareGpu); the rest stays exposed.
    auto pair = [&](double comm, double gemm, double& exposed_sum, double& hidden) {
      const double x = comm - sw.tp_overlap_hidden_share * (comm - tp_overlapped_exposed_s(comm, gemm, s.tp));
      exposed_sum += x;
      hidden += comm - x;
    };
    pair(ag, lin[0].fwd, L.fwd_tp, hidden_f), pair(rs, lin[1].fwd, L.fwd_tp, hidden_f);
    pair(ag, lin[2].fwd, L.fwd_tp, hidden_f), pair(rs, lin[3].fwd, L.fwd_tp, hidden_f);
    pair(ag, lin[1].dgrad, L.bwd_tp, hidden_b), pair(ag, lin[3].dgrad, L.bwd_tp, hidden_b);
    pair(ag, lin[0].dgrad, L.bwd_tp, hidden_b), pair(rs, lin[0].wgrad, L.bwd_tp, hidden_b);
    pair(ag, lin[2].dgrad, L.bwd_tp, hidden_b), pair(rs, lin[2].wgrad, L.bwd_tp, hidden_b);
    L.fwd_math += sw.overlap_slowdown * hidden_f;
    L.bwd_math += sw.overlap_slowdown * hidden_b;
    L.tp_hidden = hidden_f + hidden_b;
  } else if (l.sp()) {
    const double ag = all_gather_s(s.act_full, l.tp, link), rs = reduce_scatter_s(s.act_full, l.tp, link);
    L.fwd_tp = 2 * ag + 2 * rs;
    L.bwd_tp = 4 * ag + 2 * rs;
    down_tp = rs;
  } else {
    down_tp = all_reduce_s(s.act_full, l.tp, link);
    L.fwd_tp = 2 * down_tp;
    L.bwd_tp = L.fwd_tp;
  }
  return hidden_f;
}

// Recomputation happens inside the backward of the layer. Selective: with materialized attention,
// exactly the attention core (QK^T, softmax, dropout, PV) is replayed (Korthikanti et al. 2022);
// otherwise the norms and the SwiGLU product are rebuilt elementwise, and under the eager profile
// op-level selective checkpointing also replays every second forward matmul.
void layer_recompute(const topology::Accelerator& acc, const Layout& l, const SoftwareProfile& sw, const Shapes& s,
                     const LayerKernels& k, double hidden_f, double down_tp, PieceCost& L) {
  if (l.recompute == model::Recompute::kSelective) {
    if (s.materialized) {
      L.bwd_math += k.attn_fwd;
    } else {
      L.bwd_math += memory_bound_s(4 * s.An + (s.swiglu ? 3 : 2) * s.F, acc) + sw.selective_gemm_recompute * k.gemm_fwd;
    }
  } else if (l.recompute == model::Recompute::kFull) {
    // The layer's forward again (torch.utils.checkpoint and Megatron's full recompute replay all of it).
    // herd's runtime stops before the down projection: its output, the next layer's input, is what was
    // kept, so that GEMM and the collective after it (SP reduce-scatter, or all-reduce) are not redone.
    L.bwd_math += L.fwd_math - (sw.recompute_keeps_down_projection ? k.lin[3].fwd : 0.0);
    L.bwd_tp += L.fwd_tp - (sw.recompute_keeps_down_projection ? down_tp : 0.0);
    L.tp_hidden += hidden_f;
    L.bwd_cp += L.fwd_cp;
  }
}

// Output head (vocab-parallel) and loss: the final norm output is gathered over TP, logits for the
// local vocabulary shard go through the profile's softmax cross-entropy (loss_bytes_fwd / _bwd per
// logit), and the softmax statistics are all-reduced over TP (latency only).
PieceCost output_cost(const model::ModelParams& mp, const topology::Accelerator& acc, const Layout& l,
                      const SoftwareProfile& sw, const Shapes& s, const topology::GroupLink& tp_link) {
  const double vocab_shard = static_cast<double>(mp.output > 0 ? mp.output : mp.embedding) / s.h;
  PieceCost O;
  double head_fwd = 0;
  // Under fp8 the output head stays in bf16 (Megatron and NeMo keep the first and last layers out of fp8).
  const double head_all = linear_train_s(s.m, vocab_shard, s.h, s.bf16_peak, s.e, acc, &head_fwd);
  const double logits = s.b * s.t * vocab_shard;
  O.fwd_math = head_fwd + memory_bound_s(sw.loss_bytes_fwd * logits + 4 * s.An, acc) + 4 * s.launch;
  // Its weight gradient is added into the fp32 buffer (read and write, 8 bytes per weight), in the
  // GEMM's epilogue under gradient accumulation fusion.
  O.bwd_math = head_all - head_fwd + memory_bound_s(sw.loss_bytes_bwd * logits + 6 * s.An, acc) +
               (s.gaf ? 0.0 : memory_bound_s(2 * s.gb * s.h * vocab_shard, acc)) + 6 * s.launch;
  if (l.tp > 1) {
    const double stats = 2 * all_reduce_s(s.b * s.t * 4.0, l.tp, tp_link);
    O.fwd_tp = (l.sp() ? all_gather_s(s.act_full, l.tp, tp_link) : 0) + stats;
    O.bwd_tp = l.sp() ? reduce_scatter_s(s.act_full, l.tp, tp_link) : all_reduce_s(s.act_full, l.tp, tp_link);
  }
  O.model_flops = 6.0 * s.h * vocab_shard * (s.b * s.t);
  O.hardware_flops = O.model_flops;
  return O;
}

// Embedding (vocab-parallel): a gather of rows, then a reduce-scatter (SP) or all-reduce over TP; the
// backward scatter-adds into the fp32 gradient rows.
PieceCost embedding_cost(const model::ModelParams& mp, const topology::Accelerator& acc, const Layout& l,
                         const Shapes& s, const topology::GroupLink& tp_link) {
  PieceCost E;
  E.fwd_math = memory_bound_s(2 * s.act_full, acc) + s.launch;
  E.bwd_math = memory_bound_s(s.b * s.t * s.h * (s.e + 8.0), acc) + s.launch;
  if (l.tp > 1) {
    E.fwd_tp = l.sp() ? reduce_scatter_s(s.act_full, l.tp, tp_link) : all_reduce_s(s.act_full, l.tp, tp_link);
    E.bwd_tp = l.sp() ? all_gather_s(s.act_full, l.tp, tp_link) : 0;
  }
  E.model_flops = 6.0 * static_cast<double>(mp.embedding) * (s.b * s.t);  // 6N counts the embedding too
  E.hardware_flops = 0;
  return E;
}

// The activations each piece keeps for the backward, and the one crossing a pipeline boundary (the
// residual stream, sharded over TP under SP).
void activation_bytes(const model::LlamaConfig& cfg, const TrainingSpec& train, const Layout& l, const Shapes& s,
                      StepCosts& c) {
  c.boundary_bytes = s.b * s.tn * s.h * s.e;
  model::ActivationShape shape;
  shape.seq_len = train.seq_len;
  shape.micro_batch = l.microbatch;
  shape.tp = l.tp;
  shape.cp = l.cp;
  shape.sequence_parallel = l.sp();
  // Materialized attention's selective recompute rebuilds only the core: the norms' outputs are kept.
  shape.recompute =
      s.materialized && l.recompute == model::Recompute::kSelective ? model::Recompute::kNone : l.recompute;
  shape.dtype = s.fp32 ? DType::kF32 : DType::kBF16;
  c.layer_activation_bytes = static_cast<double>(model::layer_activation_bytes(cfg, shape));
  // Materialized attention keeps its core for the backward unless it is recomputed: the softmax
  // output (2 bytes per score), the dropout mask (1) and the dropout output (2): 5 bytes per score,
  // Korthikanti et al.'s 5 a s^2 b per layer.
  if (s.materialized && l.recompute == model::Recompute::kNone) c.layer_activation_bytes += 5.0 * s.scores;
  c.embedding_activation_bytes = static_cast<double>(model::embedding_activation_bytes(cfg, shape));
  c.output_activation_bytes = static_cast<double>(model::output_activation_bytes(cfg, shape));
}

}  // namespace

Result<StepCosts> step_costs(const model::LlamaConfig& cfg, const topology::Cluster& host, const TrainingSpec& train,
                             const Layout& l) {
  // A host calibrated in both precisions gives a bf16 run its bf16 efficiencies (topology::at_precision).
  topology::Cluster at_precision = host, shared;
  at_precision.accelerator = topology::at_precision(host.accelerator, train.precision != Precision::kFP32);
  const topology::Cluster& cluster = topology::host_share(at_precision, l.gpus(), &shared);
  const topology::Accelerator& acc = cluster.accelerator;
  StepCosts c;
  HERD_ASSIGN_OR_RETURN(c.tp_link, topology::link_for_group(cluster, 1, l.tp));
  HERD_ASSIGN_OR_RETURN(c.cp_link, topology::link_for_group(cluster, l.tp, l.cp));
  HERD_ASSIGN_OR_RETURN(c.pp_link, topology::link_for_group(cluster, l.tp * l.cp, l.pp));
  HERD_ASSIGN_OR_RETURN(c.dp_link, topology::link_for_group(cluster, l.tp * l.cp * l.pp, l.dp));

  const SoftwareProfile sw = software_profile(train.system.software, at_precision.accelerator);
  const Shapes s = shapes_of(cfg, acc, train, l);
  c.matmul_peak_flops = s.fp8 ? acc.peak_tflops_fp8 * 1e12 : s.bf16_peak;

  PieceCost& L = c.layer;
  HERD_ASSIGN_OR_RETURN(const LayerKernels k, layer_math(cfg, acc, train, l, sw, s, c.matmul_peak_flops, L));
  double down_tp = 0;
  const double hidden_f = layer_tp(train, l, sw, s, c.tp_link, k, L, down_tp);
  // Context parallel (Llama 3): all-gather K and V after RoPE, exposed; the backward re-gathers them
  // (only the local shards are kept) and reduce-scatters dK and dV to their owners.
  if (l.cp > 1) {
    const double kv_bytes = 2.0 * s.b * s.seq * s.kv * s.hd * s.e;
    L.fwd_cp = all_gather_s(kv_bytes, l.cp, c.cp_link);
    L.bwd_cp = L.fwd_cp + reduce_scatter_s(kv_bytes, l.cp, c.cp_link);
  }
  layer_recompute(acc, l, sw, s, k, hidden_f, down_tp, L);
  const model::LayerParams lp = model::layer_params_tp_shard(cfg, l.tp);
  L.model_flops = 6.0 * static_cast<double>(lp.attention() + lp.mlp()) * (s.b * s.t) + 3.0 * k.attn_fwd_flops;
  const double attn_hw = s.materialized ? 3.0 * 4.0 * s.scores * s.hd : 3.5 * k.attn_fwd_flops;
  L.hardware_flops = L.model_flops - 3.0 * k.attn_fwd_flops + attn_hw +
                     (l.recompute == model::Recompute::kFull ? L.model_flops / 3.0 : 0.0);

  const model::ModelParams mp = model::model_params_tp_shard(cfg, l.tp);
  c.output = output_cost(mp, acc, l, sw, s, c.tp_link);
  c.embedding = embedding_cost(mp, acc, l, s, c.tp_link);
  activation_bytes(cfg, train, l, s, c);
  return c;
}

}  // namespace herd::planner

// The planner's inputs: a training shape (sequence length, global batch, precision) and a layout
// (the four degrees and every knob that changes memory or time), with the checks that make a layout
// runnable. Every refusal names the constraint and its numbers ("num_key_value_heads (8) is not
// divisible by tp (16)").
#pragma once

#include <cstdint>
#include <string>

#include "herd/core/error.h"
#include "herd/core/precision.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/schedule/schedule.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

// The run's precision (core/precision.h). kFP32: everything in fp32 (weights, gradients, optimizer,
// activations, matmuls), as herd's CPU runtime trains; no separate master copy. The planner plans bf16,
// fp16, fp8 and fp32 (--precision); fp64 runs are herd's reference and are not planned.
using herd::Precision;
using herd::precision_name;
// Bytes per weight / activation element: 4 under kFP32 (8 under kFP64), else 2 (bf16 working copies).
double element_bytes(Precision p);
// --precision: bf16, fp16, fp8 or fp32.
Result<Precision> parse_precision(const std::string& s);

// The software a run uses (docs/planner.md section 3, "Software profiles"). kFused: Megatron-LM /
// NeMo / Transformer Engine (fused norms, RoPE, SwiGLU and softmax kernels, fused q/k/v and gate/up
// GEMMs, FlashAttention-3 class kernels on Hopper). kEager: PyTorch eager with FSDP (torchtitan and
// the like without compile): every elementwise op its own kernel, norms and RoPE upcast to fp32,
// separate q, k, v, gate and up GEMMs, PyTorch's FlashAttention-2 kernels, and `selective` recompute
// as op-level selective checkpointing (every second matmul of the forward recomputed). kCompiled:
// the same PyTorch model under torch.compile (Inductor): the elementwise chains fused as kFused's,
// while the GEMMs, the attention kernel (scaled_dot_product_attention) and the checkpointing policy
// stay kEager's. kHerd: herd's own runtime (src/herd/train): fused-style kernels as kFused's, with the
// departures of SoftwareProfile's herd fields (gradients accumulated in place, recompute that keeps
// the down projection, tiled logits, flat units' full gradient buffers and, on a CPU host,
// collectives on the compute threads). The default of `herd estimate` and `plan` on a CPU host, and
// what herd's runtime plans its own runs with.
enum class Software { kFused, kEager, kCompiled, kHerd };
// kFlash: attention never materialises the s x s scores (FlashAttention). kMaterialized: scores and
// probabilities written to memory (pre-FlashAttention Megatron): full s x s batched GEMMs, s^2 traffic
// for softmax, mask and dropout, the scores kept for the backward; `selective` recompute then
// recomputes exactly that core (Korthikanti et al. 2022).
enum class Attention { kFlash, kMaterialized };
const char* software_name(Software s);
const char* attention_name(Attention a);
Result<Software> parse_software(const std::string& s);
Result<Attention> parse_attention(const std::string& s);

// Planner-only knobs of the system a run uses: they change its costs, not the runtime's layout (herd's
// own runtime is fused-style, flash attention, asynchronous sends, overlapped gradient reduction).
struct SystemSpec {
  Software software = Software::kFused;
  Attention attention = Attention::kFlash;
  bool async_sends = true;  // --pipeline-sends async|sync: a sender waits for its send to complete when sync
  // --dp-overlap on|off: gradient reduction overlapped with the backward and, under ZeRO-1/2, the
  // parameter all-gather after the optimizer step overlapped with the next forward (Megatron-Core's
  // overlap_grad_reduce + overlap_param_gather); off: both after the backward, exposed.
  bool dp_overlap = true;
  // --grad-acc-fusion on|off: the weight-gradient GEMM accumulates straight into the fp32 gradient
  // buffer (Megatron's gradient_accumulation_fusion, TE's fuse_wgrad_accumulation) instead of writing a
  // bf16 gradient that a separate pass adds into the buffer.
  bool grad_acc_fusion = false;
  // --tp-overlap on|off: the sequence-parallel all-gathers and reduce-scatters are split into chunks
  // pipelined with the GEMMs they feed or follow (Transformer Engine userbuffers, PyTorch async TP).
  bool tp_overlap = false;
  // --grad-dtype fp32|bf16: the precision gradients are accumulated across micro-batches and reduced
  // over DP in (fp32, Llama 3's policy; bf16 for NeMo's grad_sync_dtype=bf16, Megatron-Core's
  // grad_reduce_in_fp32=False, or Megatron-LM's fp16 gradients of 2021). fp32 runs always use fp32.
  bool bf16_grads = false;
  // Bytes per gradient element under `precision`: 2 with bf16 gradients (not in fp32 runs), else 4.
  double grad_bytes(Precision precision) const { return bf16_grads && precision != Precision::kFP32 ? 2.0 : 4.0; }
};

struct TrainingSpec {
  // Not an aggregate, so that `TrainingSpec{seq, batch, precision}` leaves the system knobs at their
  // defaults without a missing-initializer warning.
  TrainingSpec() = default;
  TrainingSpec(std::int64_t seq, std::int64_t batch, Precision p = Precision::kBF16, SystemSpec s = {})
      : seq_len(seq), global_batch(batch), precision(p), system(s) {}
  std::int64_t seq_len = 8192;
  std::int64_t global_batch = 0;           // sequences per optimizer step
  Precision precision = Precision::kBF16;  // matmul precision; parameters bf16, master/grad/optimizer fp32
  SystemSpec system;
  std::int64_t tokens() const { return seq_len * global_batch; }
};

// How the transformer layers are placed on the PP x V virtual stages (schedule::assign_layers).
// kEven: as evenly as possible. kLightEnds: the first and last virtual stage one layer lighter (the
// embedding and the output head take a layer's place; Llama 3, Megatron's
// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split). kAuto: per
// layout, the split whose busiest pipeline rank is less loaded once the embedding and output head
// costs are counted (planner::resolve_layer_split).
enum class LayerSplit { kAuto, kEven, kLightEnds };
const char* layer_split_name(LayerSplit s);
Result<LayerSplit> parse_layer_split(const std::string& s);

struct Layout {
  std::int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  int v = 1;                    // virtual stages (model chunks) per pipeline rank
  std::int64_t microbatch = 1;  // sequences per micro-batch
  int n = 0;                    // contiguous micro-batches per chunk; 0 = min(PP, M) (depth-first)
  model::Recompute recompute = model::Recompute::kNone;
  bool sequence_parallel = true;  // only meaningful with tp > 1
  int zero = 3;                   // 0 plain DP (all-reduce), 1, 2, 3 (FSDP, the paper's choice)
  bool reshard_after_forward = false;
  // Layer placement over the virtual stages. Kept in the layout because it is the runtime's layer
  // assignment (parallel/pp/plan.h); herd's runtime itself always uses light ends today.
  LayerSplit layer_split = LayerSplit::kAuto;
  // The pipeline schedule the run uses and the planner simulates (`parallel.schedule`, `--schedule`).
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kFlexible;

  std::int64_t gpus() const { return tp * cp * pp * dp; }
  std::int64_t microbatches(const TrainingSpec& t) const { return t.global_batch / (dp * microbatch); }
  int n_resolved(const TrainingSpec& t) const;
  bool sp() const { return sequence_parallel && tp > 1; }
  std::string to_string() const;  // "tp8 cp1 pp16 dp64 v8 mb1 N16 none"
  // The same layout as the flags `herd estimate` and `herd train` take, every knob explicit:
  // "--tp 8 --cp 1 --pp 16 --dp 64 --v 8 --microbatch-size 1 --n 16 --recompute none --sequence-parallel true"
  // (n 0 is left out: its default, min(PP, M), is the same everywhere; --zero only when not 3).
  std::string to_flags() const;
};

// Everything a layout must satisfy before it is costed: degrees >= 1 multiplying to the GPU count
// (topology::ParallelDims), which fits the cluster; the shard rules (model::check_shardable through
// model::validate_activation_shape: tp divides heads, kv heads and the MLP width, the vocabulary is
// padded; 2*cp divides the sequence, tp the local sequence under sequence parallelism); the layers
// fill pp*v virtual stages under the layer split (auto: under either split); dp*microbatch divides the global batch; N
// is in [1, M]; zero in 0..3.
Status validate_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                       const Layout& layout, std::int64_t gpus);

}  // namespace herd::planner

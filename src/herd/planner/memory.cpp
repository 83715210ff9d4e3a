#include "herd/planner/memory.h"

#include <algorithm>
#include <cmath>

#include "herd/model/params.h"
#include "herd/planner/software.h"

namespace herd::planner {

double MemoryBreakdown::part(const std::string& name) const {
  for (const MemoryPart& p : parts) {
    if (p.name == name) return p.bytes;
  }
  return 0;
}

model::ActivationShape activation_shape(const TrainingSpec& train, const Layout& l) {
  model::ActivationShape s;
  s.seq_len = train.seq_len;
  s.micro_batch = l.microbatch;
  s.dtype = train.precision == Precision::kFP32 ? DType::kF32 : DType::kBF16;
  s.tp = l.tp;
  s.sequence_parallel = l.sp();
  s.cp = l.cp;
  s.recompute = l.recompute;
  return s;
}

namespace {

struct StateBytes {
  double weights = 0, grads = 0, optimizer = 0;
};

// Weights, gradients and optimizer state of `p` local (TP-shard) parameters under the ZeRO stage,
// sharded over `shard` ranks (DP x CP: both hold replicas of the same TP/PP shard).
// In fp32 the working weights are the master copy when nothing is sharded (ZeRO-0); a sharded
// optimizer keeps its fp32 shard apart from the gathered working copy (FSDP flat units).
// `g` is the bytes per gradient element (--grad-dtype: 4, or 2 for bf16 gradients).
// flat_units: herd's FSDP flat units (SoftwareProfile::flat_unit_gradients), whatever the precision.
StateBytes state_bytes(double p, const Layout& l, double shard, std::int64_t microbatches, double e, double g,
                       bool flat_units) {
  StateBytes s;
  const bool keep_gathered = !(l.zero == 3 && l.reshard_after_forward);
  s.weights = keep_gathered ? e * p : 0.0;  // working copy (stage 3 keeps it after forward)
  // Gradients stay sharded when each backward reduce-scatters at once: ZeRO-2, FSDP that reshards,
  // and any stage-3 step with a single micro-batch (nothing to accumulate).
  // herd's flat units (and fp32 runs) keep every full gradient buffer until the end of the backward.
  const bool sharded_grads =
      l.zero == 2 || (l.zero == 3 && (l.reshard_after_forward || microbatches == 1) && e != 4.0 && !flat_units);
  if (sharded_grads) {
    s.grads = g * p / shard;  // reduce-scattered after every micro-batch into a gradient shard
  } else {
    s.grads = g * p + (l.zero >= 1 ? g * p / shard : 0.0);  // accumulation buffer, then its shard
  }
  s.optimizer = 12.0 * p / (l.zero >= 1 ? shard : 1.0);  // fp32 master + Adam m and v
  if (e == 4.0 && l.zero == 0) s.optimizer = 8.0 * p;    // fp32 weights are the master: m and v only
  if ((e == 4.0 || flat_units) && l.zero >= 1 && shard == 1.0) {
    // An FSDP group of one uses its shards in place (parallel/fsdp/flat_unit.h): the gradients
    // accumulate in the gradient shard, and the working weights are the master in fp32 or one bf16
    // copy of it.
    s.weights = e == 4.0 ? 0.0 : e * p;
    s.grads = 4.0 * p;
  }
  return s;
}

// The local (TP-shard) parameters of one pipeline rank: its transformer layers, and the embedding
// and output head where it holds them.
struct RankParams {
  double layers = 0, embedding_output = 0;
};
RankParams rank_params(const model::LlamaConfig& cfg, const Layout& l, const RankMemoryInput& in) {
  const model::LayerParams lp = model::layer_params_tp_shard(cfg, l.tp);
  const model::ModelParams mp = model::model_params_tp_shard(cfg, l.tp);
  RankParams r;
  r.layers = static_cast<double>(in.layers) * static_cast<double>(lp.total());
  if (in.embedding) r.embedding_output += static_cast<double>(mp.embedding + mp.position_embedding);
  if (in.output) {
    r.embedding_output +=
        static_cast<double>(mp.final_norm + (cfg.tie_embeddings && !in.embedding ? mp.embedding : mp.output));
  }
  return r;
}

}  // namespace

MemoryBreakdown rank_memory(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                            const Layout& l, const RankMemoryInput& in) {
  const model::LayerParams lp = model::layer_params_tp_shard(cfg, l.tp);
  const model::ModelParams mp = model::model_params_tp_shard(cfg, l.tp);
  const double shard = static_cast<double>(l.dp * l.cp);
  const RankParams rp = rank_params(cfg, l, in);
  const double p_layers = rp.layers;
  const double p_eo = rp.embedding_output;
  const std::int64_t mbs = l.microbatches(train);
  const double e = element_bytes(train.precision);
  const double g = train.system.grad_bytes(train.precision);
  const SoftwareProfile sw = software_profile(train.system.software, cluster.accelerator);
  const StateBytes sl = state_bytes(p_layers, l, shard, mbs, e, g, sw.flat_unit_gradients);
  const StateBytes se = state_bytes(p_eo, l, shard, mbs, e, g, sw.flat_unit_gradients);

  const model::ActivationShape shape = activation_shape(train, l);
  const double b = static_cast<double>(l.microbatch);
  const double t = static_cast<double>(train.seq_len / l.cp);
  const double h = static_cast<double>(cfg.hidden);
  const double act_full = b * t * h * e;
  const double unit = static_cast<double>(lp.total());  // one FSDP unit: one transformer layer

  MemoryBreakdown m;
  m.rank = in.rank;
  m.capacity_bytes = cluster.memory_bytes();
  const std::string wt = e == 4.0 ? "fp32" : "bf16";
  // fp8 (Transformer Engine): each layer's weights also live as an fp8 copy and its fp8 transpose,
  // cast once per step and cached across micro-batches (1 + 1 bytes per local layer parameter); the
  // embedding and output head stay bf16. Saved activations are counted in bf16 (an upper bound: TE
  // keeps some linear inputs as their fp8 casts).
  const double fp8_copy = train.precision == Precision::kFP8 ? 2.0 * p_layers : 0.0;
  m.parts.push_back(
      {"parameters", sl.weights + fp8_copy,
       std::to_string(in.layers) + " layers' " + wt + " weights (TP shard" +
           (l.zero == 3 && !l.reshard_after_forward ? ", gathered once and kept: no reshard after forward)" : ")") +
           (fp8_copy > 0 ? " + fp8 copy and transpose" : "")});
  m.parts.push_back(
      {"gradients", sl.grads,
       sl.grads < g * p_layers
           ? std::string(g == 2.0 ? "bf16" : "fp32") + " gradient shard (reduce-scattered after each backward)"
           : std::string(g == 2.0 ? "bf16" : "fp32") + " accumulation across micro-batches" +
                 std::string(l.zero >= 1 ? " + its reduce-scattered shard" : "")});
  m.parts.push_back(
      {"optimizer_state", sl.optimizer,
       std::string(e == 4.0 && l.zero == 0 ? "AdamW m and v (the fp32 weights are the master)"
                                           : "fp32 master weights + AdamW m and v") +
           std::string(l.zero >= 1 ? ", sharded over dp x cp = " + std::to_string(l.dp * l.cp) : ", replicated")});
  m.parts.push_back({"embedding_output", se.weights + se.grads + se.optimizer,
                     std::string(in.embedding ? "vocab-parallel embedding" : "") +
                         (in.embedding && in.output ? " and " : "") + (in.output ? "output head + final norm" : "") +
                         (p_eo > 0 ? ": weights, gradients, optimizer" : "none on this rank")});
  m.parts.push_back({"activations", in.peak_activation_bytes,
                     "saved tensors of the micro-batches in flight at the schedule's peak (model/activations.h)"});
  const double gathered = (l.zero == 3 && l.reshard_after_forward) ? 2.0 * e * unit : 0.0;
  m.parts.push_back({"fsdp_gathered", gathered,
                     gathered > 0 ? "two gathered bf16 layers (current + prefetch)" : "none (weights kept gathered)"});
  double buffers = 0;
  if (l.tp > 1) buffers += act_full;  // sequence-parallel all-gather output
  if (l.cp > 1) {
    buffers += 2.0 * b * static_cast<double>(train.seq_len) * static_cast<double>(cfg.n_kv_heads / l.tp) *
               static_cast<double>(cfg.head_dim) * e;  // gathered K and V
  }
  if (l.pp > 1) buffers += 4.0 * b * (l.sp() ? t / static_cast<double>(l.tp) : t) * h * e;  // 2 sends + 2 receives
  // One gradient reduce-scatter and one all-gather unit; herd's flat units gather into and reduce-scatter
  // from their own full buffers, which the state counts.
  if (l.dp * l.cp > 1 && !sw.flat_unit_gradients) buffers += g * unit + e * unit;
  m.parts.push_back({"comm_buffers", buffers, "TP all-gather output, CP K/V, PP send/receive, FSDP unit buffers"});
  const double ffn_local = b * t * static_cast<double>(cfg.ffn_hidden / l.tp) * e;
  // The backward's largest temporaries (three MLP-width gradients); under full recompute they sit beside
  // the layer's re-materialised activations, most of which are still alive when the backward starts at
  // the MLP.
  double transient = static_cast<double>(model::recompute_working_bytes(cfg, shape)) + 3.0 * ffn_local;
  if (train.system.attention == Attention::kMaterialized) {
    // One layer's scores in flight: scores and probabilities forward, dP and dS backward (2 + 2 bytes
    // per score of the local heads' t x T matrix).
    transient += 4.0 * b * static_cast<double>(cfg.n_heads / l.tp) * t * static_cast<double>(train.seq_len);
  }
  if (in.output) {
    // The logits: on a GPU one fp32 tile of all rows x up to 16,384 ids and its gradient. herd's CPU
    // kernels (kernels/cross_entropy.h, CrossEntropyTiles) tile 256 rows x 8,192 ids in one fp32 buffer
    // that the backward turns into its gradient in place; with bf16 inputs the gradient is rounded into a
    // bf16 tile of the same shape beside it (kernels/cpu/cross_entropy.cpp). That buffer is the rank
    // thread's kernel scratch, which `herd train` measures with the arena (kernels/scratch.h).
    const double vocab_shard = static_cast<double>(mp.embedding) / h;
    if (sw.tiled_logits) {
      const double bytes_per_logit = e == 4.0 ? 4.0 : 4.0 + 2.0;  // fp32 tile (+ the bf16 gradient tile)
      transient += std::min(b * t, 256.0) * std::min(vocab_shard, 8192.0) * bytes_per_logit;
    } else {
      transient += b * t * std::min(vocab_shard, 16384.0) * 2.0 * 4.0;  // fp32 logits and their gradient
    }
  }
  m.parts.push_back({"transient", transient,
                     l.recompute == model::Recompute::kFull
                         ? "one layer re-materialised for its backward, its MLP gradients, logits tile"
                         : "largest backward temporaries (MLP gradients, logits tile)"});
  const double dynamic = in.peak_activation_bytes + gathered + buffers + transient;
  m.parts.push_back({"fragmentation", kFragmentationFraction * dynamic,
                     "allowance: 5% of dynamically allocated bytes (caching allocator)"});
  for (const MemoryPart& p : m.parts) m.total_bytes += p.bytes;
  return m;
}

CheckpointBytes rank_checkpoint_bytes(const model::LlamaConfig& cfg, const TrainingSpec& train, const Layout& l,
                                      const RankMemoryInput& in) {
  const RankParams rp = rank_params(cfg, l, in);
  const double p = (rp.layers + rp.embedding_output) / static_cast<double>(l.dp * l.cp);
  const double e = element_bytes(train.precision);
  CheckpointBytes c;
  // state_bytes' optimizer_state: 12 bytes per parameter = fp32 master (4) + AdamW m and v (8).
  c.weights = e == 4.0 ? 0.0 : e * p;
  c.master = 4.0 * p;
  c.moments = 8.0 * p;
  return c;
}

JobMemory job_memory(const model::LlamaConfig& cfg, double batch_tokens, int k, double accelerator_bytes) {
  const double p = static_cast<double>(model::model_params(cfg).total());
  JobMemory j;
  j.params_bytes = 2.0 * p;
  j.optimizer_bytes = 8.0 * p;
  j.checkpoint_bytes = 2.0 * static_cast<double>(cfg.hidden) * batch_tokens * k * static_cast<double>(cfg.n_layers);
  j.total_bytes = j.params_bytes + j.optimizer_bytes + j.checkpoint_bytes;
  j.min_accelerators = static_cast<std::int64_t>(std::ceil(j.total_bytes / accelerator_bytes));
  return j;
}

}  // namespace herd::planner

// Memory per accelerator, part by part, for one pipeline rank.
//
// Parameter, gradient and optimizer bytes come from model::layer_params_tp_shard and
// model::model_params_tp_shard, activations from model::layer_activation_bytes (and its embedding and
// output siblings): the functions nn/ and parallel/ use to allocate, so the estimate and the runtime
// cannot drift apart. The schedule decides how many micro-batches' activations a rank holds at once;
// the caller passes that peak in bytes. Precision policy (Llama 3): bf16 weights and activations,
// fp32 master weights, AdamW moments and gradient accumulation. Derivations: docs/planner.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/model/activations.h"
#include "herd/model/config.h"
#include "herd/planner/layout.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

// Fraction of the dynamically allocated bytes (activations, buffers, temporaries) added for caching-
// allocator fragmentation; static state (weights, gradients, optimizer) is allocated once.
inline constexpr double kFragmentationFraction = 0.05;

struct MemoryPart {
  std::string name;  // JSON key: "parameters", "gradients", ...
  double bytes = 0;
  std::string note;  // one line: what it holds and why
};

struct MemoryBreakdown {
  int rank = 0;  // pipeline rank this breakdown is for
  std::vector<MemoryPart> parts;
  double total_bytes = 0;
  double capacity_bytes = 0;
  bool fits() const { return total_bytes <= capacity_bytes; }
  double part(const std::string& name) const;
};

struct RankMemoryInput {
  int rank = 0;
  std::int64_t layers = 0;           // transformer layers over all of this rank's chunks
  bool embedding = false;            // holds virtual stage 0
  bool output = false;               // holds the last virtual stage
  double peak_activation_bytes = 0;  // activations of in-flight micro-batches at the schedule's peak
};

// The activation shape of one micro-batch under the layout (local to one accelerator).
model::ActivationShape activation_shape(const TrainingSpec& train, const Layout& layout);

MemoryBreakdown rank_memory(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                            const Layout& layout, const RankMemoryInput& in);

// What one accelerator of a pipeline rank writes to a checkpoint: the training state rank_memory
// counts (the same parameters, the same precision policy), each byte stored once. The dp x cp
// replicas of a TP/PP shard hold the same state, so each writes 1/(dp x cp) of it, as FSDP shards it.
// Weights replicated across TP (the RMSNorm vectors) are counted on every TP rank, as the memory model
// holds them. Gradients and activations are not saved: a step restarts from its first micro-batch.
struct CheckpointBytes {
  double weights = 0;  // working weights (bf16); 0 in fp32, where the master copy is the weights
  double master = 0;   // fp32 master weights
  double moments = 0;  // AdamW first and second moments, fp32
  double total() const { return weights + master + moments; }
};
CheckpointBytes rank_checkpoint_bytes(const model::LlamaConfig& cfg, const TrainingSpec& train, const Layout& layout,
                                      const RankMemoryInput& in);

// The scaling book's whole-job view (Part 6): bf16 parameters, fp32 Adam moments (8 bytes per
// parameter, no separate master copy), and `checkpoints_per_layer` bf16 tensors of (tokens, hidden)
// per layer for the whole batch; and the fewest accelerators whose memory holds it.
struct JobMemory {
  double params_bytes = 0, optimizer_bytes = 0, checkpoint_bytes = 0, total_bytes = 0;
  std::int64_t min_accelerators = 0;
};
JobMemory job_memory(const model::LlamaConfig& cfg, double batch_tokens, int checkpoints_per_layer,
                     double accelerator_bytes);

}  // namespace herd::planner

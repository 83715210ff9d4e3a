// Activation memory: the tensors one transformer layer keeps from its forward for its backward.
//
// This list is the contract between the planner and the runtime: nn/ allocates exactly these tensors
// (same names, same local shapes) in its arena, and a test holds the two together. Shapes are local to
// one rank: T is cut by CP (and by TP in the sequence-parallel norm regions), heads and the MLP width
// by TP. Derivation and the comparison with Korthikanti et al. (Megatron): docs/activations.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/dtype.h"
#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"

namespace herd::model {

struct ActivationShape {
  std::int64_t seq_len = 8192;   // T, the full sequence (before CP)
  std::int64_t micro_batch = 1;  // B, sequences per micro-batch
  DType dtype = DType::kBF16;    // activations; norm statistics are FP32 (FP64 when dtype is FP64)
  std::int64_t tp = 1;
  bool sequence_parallel = true;  // norm regions sharded over TP along T (Korthikanti et al.)
  std::int64_t cp = 1;
  Recompute recompute = Recompute::kNone;
};

// seq_len and micro_batch positive, then model::check_shardable (shard.h) for tp, cp and sequence
// parallelism; the degrees must be >= 1 (topology::ParallelDims checks them).
Status validate_activation_shape(const LlamaConfig& cfg, const ActivationShape& s);

struct SavedTensor {
  std::string name;                 // e.g. "attn_norm.input"
  std::vector<std::int64_t> shape;  // local shape, e.g. (B, T/cp/tp, hidden)
  DType dtype;
  std::string why;  // which backward needs it
  std::int64_t elements() const;
  std::int64_t bytes() const;
};

// What one layer keeps for its backward under the shape's recompute policy:
//  none      every input a backward needs (norm inputs and outputs, q/k/v after RoPE, the attention
//            output and its log-sum-exp, gate/up and the SwiGLU product);
//  selective matmul outputs and norm inputs only; norm outputs and the SwiGLU product are recomputed
//            (elementwise work, no matmul), as torchtitan's op-level selective checkpointing;
//  full      the layer input only; the whole layer is recomputed in its backward.
std::vector<SavedTensor> layer_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s);
std::int64_t layer_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s);

// Under full recompute, the backward of one layer re-materialises that layer's no-recompute set:
// transient memory on top of the saved inputs of all layers. Zero for the other policies.
std::int64_t recompute_working_bytes(const LlamaConfig& cfg, const ActivationShape& s);

// The last stage keeps the final norm's input and output and the loss's per-token log-sum-exp and
// targets; logits are computed one vocabulary tile at a time and never held whole.
std::vector<SavedTensor> output_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s);
std::int64_t output_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s);

// The first stage keeps the token ids for the embedding's scatter-add gradient.
std::vector<SavedTensor> embedding_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s);
std::int64_t embedding_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s);

}  // namespace herd::model

// The weight table of a Llama model: every weight's name, FSDP unit, full shape, tensor-parallel split
// and initialisation, in the order of the flat parameter buffer. The reference model
// (nn::LlamaModel: names, offsets, init), the distributed stage (parallel::DistributedStage: its units,
// TP slices, load_full / gather_full) and the checkpoint pieces (the TP block of each weight) all derive
// from this one list, so adding a weight is one edit here.
//
// Layout: units in order "embedding", "layers.0" .. "layers.{L-1}", "head"; inside a unit the weights
// are contiguous in table order (nn::LayerLayout reads a layer's the same way). Matrices are (out, in)
// row-major, as PyTorch's nn.Linear; norms are (n, 1).
//
// TP split (Megatron): q, k, v, gate, up and the vocab-parallel embedding and head are cut by rows
// (output features), o and down by columns (input features), norms are replicated. A TP rank's local
// buffer of a unit holds its block of each weight, in the same order; the caller has checked
// model::check_shardable (shard.h), so every cut is exact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/model/config.h"

namespace herd::model {

enum class TpSplit { kReplicated, kRows, kCols };

enum class WeightInit {
  kOnes,       // norms
  kEmbedding,  // N(0, 1)
  kLinear,     // N(0, 0.02)
  kResidual,   // N(0, 0.02 / sqrt(2 L)): the projections that write into the residual stream (o, down)
  kOutput,     // N(0, 1 / sqrt(hidden))
};
// The standard deviation of a normal init (0 for kOnes).
double init_std(WeightInit init, const LlamaConfig& cfg);

struct Weight {
  std::string name;  // "tok_embedding", "layers.3.wq", "final_norm", "output"
  std::string unit;  // "embedding", "layers.3", "head"
  int unit_index = 0;
  std::int64_t rows = 0, cols = 1;  // the full shape
  TpSplit split = TpSplit::kReplicated;
  WeightInit init = WeightInit::kLinear;
  std::int64_t offset = 0;  // in the full flat buffer (every weight of the model, table order)
  // For the table's tp: the local (TP-sharded) shape and the offset in the unit's TP-local buffer.
  std::int64_t local_rows = 0, local_cols = 0, local_offset = 0;

  std::int64_t count() const { return rows * cols; }
  std::int64_t local_count() const { return local_rows * local_cols; }
  bool is_norm() const { return cols == 1; }
};

struct WeightUnit {
  std::string name;
  std::int64_t offset = 0;       // in the full flat buffer
  std::int64_t count = 0;        // full elements
  std::int64_t local_count = 0;  // elements of one TP rank's buffer
};

// Every weight of the model (Llama 3 runtime: SwiGLU, RMSNorm, RoPE, no biases; the head is its own
// weight) with its local shape
// and offsets for tensor-parallel degree tp (1: the whole model). HERD_CHECKs model::check_shardable.
std::vector<Weight> llama_weights(const LlamaConfig& cfg, std::int64_t tp = 1);
std::vector<WeightUnit> llama_weight_units(const std::vector<Weight>& weights);

// A block of a full (rows, cols) weight: rows [r0, r1) x columns [c0, c1).
struct TpBlock {
  std::int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  std::int64_t rows() const { return r1 - r0; }
  std::int64_t cols() const { return c1 - c0; }
  std::int64_t count() const { return rows() * cols(); }
};
// The part of w that TP rank `rank` of `tp` holds (replicated: the whole weight). Its shape is the
// local shape, (rows / tp, cols), (rows, cols / tp) or (rows, cols), which llama_weights stores.
TpBlock tp_block(const Weight& w, std::int64_t tp, std::int64_t rank);

// The tensor group of a weight name, for messages about where something went wrong (the NaN guard):
// "embedding", "attention" (wq, wk, wv, wo), "mlp" (w_gate, w_up, w_down), "norm" (every RMSNorm
// weight) or "output" (the head); "other" for a name the table does not make.
const char* weight_group(const std::string& name);
inline constexpr const char* kWeightGroups[] = {"embedding", "attention", "mlp", "norm", "output", "other"};

}  // namespace herd::model

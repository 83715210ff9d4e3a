// FLOPs per token, forward and training, under the field's two conventions.
//
// A multiply-add is 2 FLOPs. Per token, a linear of P parameters costs 2P forward and 4P backward
// (input and weight gradients). Attention's two batched matmuls (Q K^T and P V) cost 4 x n_heads x
// head_dim FLOPs per (query, key) pair the mask allows, per layer, forward; backward twice that.
//
// - Model FLOPs, "6N-style" (kSixN): 6 x every parameter (embedding included, as the scaling book
//   counts) plus the attention term 12 x L x n_heads x head_dim x pairs / T. This is what MFU uses
//   unless stated otherwise; for Llama 3 405B at 8K it gives the 6N + 6*L*h*s of the validation file.
// - Model FLOPs, exact matmuls (kExact): 3 x (forward matmuls + forward attention). Counts the output
//   head (even when tied) and no work for the embedding lookup.
// - Hardware FLOPs: exact model FLOPs plus what the implementation recomputes: the attention scores
//   again in a flash-style backward, and the forward of a layer under full recompute.
// Derivations: docs/model.md.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/core/error.h"
#include "herd/model/config.h"

namespace herd::model {

enum class MaskKind { kCausal, kFull, kDocument };

struct AttentionMask {
  MaskKind kind = MaskKind::kCausal;
  std::vector<std::int64_t> doc_lengths;  // kDocument: lengths of the packed documents, summing to T

  static AttentionMask causal() { return {}; }
  static AttentionMask full() { return {MaskKind::kFull, {}}; }
  static AttentionMask documents(std::vector<std::int64_t> lengths) {
    return {MaskKind::kDocument, std::move(lengths)};
  }
};

enum class Recompute { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);
Result<Recompute> parse_recompute(const std::string& s);

enum class FlopConvention { kSixN, kExact };

// (query, key) pairs a sequence of length T computes under the mask: causal T(T+1)/2, full T^2,
// documents sum l_i(l_i+1)/2 (causal within each document). Error when document lengths do not sum to T.
Result<double> attention_pairs(std::int64_t seq_len, const AttentionMask& mask);

// Forward FLOPs per token, by component.
struct ForwardFlops {
  double attention_linear = 0;  // q, k, v, o projections, all layers
  double mlp = 0;               // gate, up, down, all layers
  double output_head = 0;       // hidden x vocab logits
  double attention_core = 0;    // Q K^T and P V, all layers, under the mask
  double matmul() const { return attention_linear + mlp + output_head; }
  double total() const { return matmul() + attention_core; }
};

Result<ForwardFlops> forward_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask);

// Training model FLOPs per token (forward + backward) under the convention.
Result<double> train_model_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask,
                                           FlopConvention convention = FlopConvention::kSixN);

// Training hardware FLOPs per token: exact model FLOPs + flash-attention score recompute (2 x h x
// pairs per layer) + the recompute policy (full: one more forward of every layer; selective and none:
// only elementwise work, not counted).
Result<double> train_hardware_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask,
                                              Recompute recompute);

}  // namespace herd::model

#include "herd/model/activations.h"

#include <algorithm>

#include "herd/model/shard.h"

namespace herd::model {

std::int64_t SavedTensor::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::int64_t SavedTensor::bytes() const { return elements() * static_cast<std::int64_t>(dtype_bytes(dtype)); }

Status validate_activation_shape(const LlamaConfig& cfg, const ActivationShape& s) {
  if (s.seq_len <= 0) return make_error("seq_len (", s.seq_len, ") must be positive");
  if (s.micro_batch <= 0) return make_error("micro_batch (", s.micro_batch, ") must be positive");
  // Byte counts are int64: a shape whose layers' activations could pass 2^62 bytes (4 EiB) is refused
  // before any integer product (micro-batch 2^31 x seq_len 2^31 once gave negative bytes). The bound is
  // computed in floating point and is generous: every saved tensor of a layer at full width, 8 bytes each.
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const double tokens = d(s.micro_batch) * d(s.seq_len);
  const double width = 8 * d(cfg.hidden) + 4 * d(cfg.ffn_hidden) + 4 * d(cfg.q_dim()) + 4 * d(cfg.kv_dim()) + 8;
  if (tokens * width * 8 * std::max(d(cfg.n_layers), 1.0) > 4611686018427387904.0) {
    return make_error("micro_batch x seq_len (", s.micro_batch, " x ", s.seq_len, " = ", tokens,
                      " tokens) is too large: the activations would pass 2^62 bytes; use a smaller micro-batch or "
                      "sequence length");
  }
  // Activations never hold a whole vocabulary row per rank, so the vocabulary may be padded.
  return check_shardable(cfg, ShardSpec{s.tp, s.cp, s.seq_len, s.sequence_parallel, /*vocab_padded=*/true});
}

namespace {

struct Local {
  std::int64_t b, t, t_norm, d, heads, kv_heads, head_dim, ffn;
  DType act, stat;
};

Local local_sizes(const LlamaConfig& cfg, const ActivationShape& s) {
  HERD_CHECK(validate_activation_shape(cfg, s).ok(), validate_activation_shape(cfg, s).error().message());
  Local l;
  l.b = s.micro_batch;
  l.t = s.seq_len / s.cp;
  l.t_norm = (s.sequence_parallel && s.tp > 1) ? l.t / s.tp : l.t;
  l.d = cfg.hidden;
  l.heads = cfg.n_heads / s.tp;
  l.kv_heads = cfg.n_kv_heads / s.tp;
  l.head_dim = cfg.head_dim;
  l.ffn = cfg.ffn_hidden / s.tp;
  l.act = s.dtype;
  l.stat = s.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  return l;
}

std::int64_t sum_bytes(const std::vector<SavedTensor>& ts) {
  std::int64_t n = 0;
  for (const SavedTensor& t : ts) n += t.bytes();
  return n;
}

// Per-token statistics a norm keeps: RMSNorm 1/rms; LayerNorm mean and 1/std.
void add_norm_stats(std::vector<SavedTensor>& out, const LlamaConfig& cfg, const Local& l, const std::string& norm) {
  out.push_back({norm + ".rstd", {l.b, l.t_norm}, l.stat, "norm backward"});
  if (cfg.norm == NormKind::kLayerNorm) out.push_back({norm + ".mean", {l.b, l.t_norm}, l.stat, "norm backward"});
}

}  // namespace

std::vector<SavedTensor> layer_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s) {
  const Local l = local_sizes(cfg, s);
  std::vector<SavedTensor> out;
  const bool none = s.recompute == Recompute::kNone;
  out.push_back({"attn_norm.input", {l.b, l.t_norm, l.d}, l.act, "norm backward; the residual"});
  if (s.recompute == Recompute::kFull) return out;

  add_norm_stats(out, cfg, l, "attn_norm");
  if (none) out.push_back({"attn_norm.output", {l.b, l.t_norm, l.d}, l.act, "q/k/v weight gradients"});
  out.push_back({"attn.q", {l.b, l.t, l.heads, l.head_dim}, l.act, "attention backward (after RoPE)"});
  out.push_back({"attn.k", {l.b, l.t, l.kv_heads, l.head_dim}, l.act, "attention backward (after RoPE)"});
  out.push_back({"attn.v", {l.b, l.t, l.kv_heads, l.head_dim}, l.act, "attention backward"});
  out.push_back({"attn.out", {l.b, l.t, l.heads * l.head_dim}, l.act, "attention backward; o weight gradient"});
  out.push_back({"attn.lse", {l.b, l.heads, l.t}, l.stat, "flash-style attention backward"});
  out.push_back({"mlp_norm.input", {l.b, l.t_norm, l.d}, l.act, "norm backward"});
  add_norm_stats(out, cfg, l, "mlp_norm");
  if (none) out.push_back({"mlp_norm.output", {l.b, l.t_norm, l.d}, l.act, "gate/up weight gradients"});
  if (cfg.mlp == MlpKind::kSwiGLU) {
    out.push_back({"mlp.gate", {l.b, l.t, l.ffn}, l.act, "SwiGLU backward"});
    out.push_back({"mlp.up", {l.b, l.t, l.ffn}, l.act, "SwiGLU backward"});
    if (none) out.push_back({"mlp.act", {l.b, l.t, l.ffn}, l.act, "down weight gradient"});
  } else {
    out.push_back({"mlp.up", {l.b, l.t, l.ffn}, l.act, "GeLU backward"});
    if (none) out.push_back({"mlp.act", {l.b, l.t, l.ffn}, l.act, "down weight gradient"});
  }
  return out;
}

std::int64_t layer_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s) {
  return sum_bytes(layer_saved_tensors(cfg, s));
}

std::int64_t recompute_working_bytes(const LlamaConfig& cfg, const ActivationShape& s) {
  if (s.recompute != Recompute::kFull) return 0;
  ActivationShape none = s;
  none.recompute = Recompute::kNone;
  return layer_activation_bytes(cfg, none);
}

std::vector<SavedTensor> output_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s) {
  const Local l = local_sizes(cfg, s);
  std::vector<SavedTensor> out;
  out.push_back({"final_norm.input", {l.b, l.t_norm, l.d}, l.act, "norm backward"});
  add_norm_stats(out, cfg, l, "final_norm");
  out.push_back({"final_norm.output", {l.b, l.t_norm, l.d}, l.act, "output head weight and input gradients"});
  out.push_back({"loss.lse", {l.b, l.t}, l.stat, "cross-entropy backward (softmax from the log-sum-exp)"});
  out.push_back({"loss.targets", {l.b, l.t}, DType::kF32, "cross-entropy backward (int32 ids)"});
  return out;
}

std::int64_t output_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s) {
  return sum_bytes(output_saved_tensors(cfg, s));
}

std::vector<SavedTensor> embedding_saved_tensors(const LlamaConfig& cfg, const ActivationShape& s) {
  const Local l = local_sizes(cfg, s);
  return {{"embedding.ids", {l.b, l.t}, DType::kF32, "embedding scatter-add gradient (int32 ids)"}};
}

std::int64_t embedding_activation_bytes(const LlamaConfig& cfg, const ActivationShape& s) {
  return sum_bytes(embedding_saved_tensors(cfg, s));
}

}  // namespace herd::model

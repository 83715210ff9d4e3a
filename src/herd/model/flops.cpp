#include "herd/model/flops.h"

#include "herd/model/params.h"

namespace herd::model {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Result<Recompute> parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return make_error("recompute: expected none, selective or full, got '", s, "'");
}

Result<double> attention_pairs(std::int64_t seq_len, const AttentionMask& mask) {
  if (seq_len <= 0) return make_error("seq_len: must be positive, got ", seq_len);
  const double t = static_cast<double>(seq_len);
  switch (mask.kind) {
    case MaskKind::kCausal: return t * (t + 1) / 2;
    case MaskKind::kFull: return t * t;
    case MaskKind::kDocument: {
      double pairs = 0;
      std::int64_t sum = 0;
      for (std::int64_t l : mask.doc_lengths) {
        if (l <= 0) return make_error("document lengths: each must be positive, got ", l);
        pairs += static_cast<double>(l) * static_cast<double>(l + 1) / 2;
        sum += l;
      }
      if (sum != seq_len) {
        return make_error("document lengths sum to ", sum, " but the sequence has ", seq_len,
                          " tokens; pack documents to fill the sequence exactly");
      }
      return pairs;
    }
  }
  return make_error("unknown mask kind");
}

Result<ForwardFlops> forward_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask) {
  HERD_ASSIGN_OR_RETURN(const double pairs, attention_pairs(seq_len, mask));
  const ModelParams p = model_params(cfg);
  const double layers = static_cast<double>(cfg.n_layers);
  ForwardFlops f;
  f.attention_linear = 2.0 * static_cast<double>(p.layer.attention()) * layers;
  f.mlp = 2.0 * static_cast<double>(p.layer.mlp()) * layers;
  f.output_head = 2.0 * static_cast<double>(cfg.hidden) * static_cast<double>(cfg.vocab);
  f.attention_core = 4.0 * static_cast<double>(cfg.q_dim()) * layers * pairs / static_cast<double>(seq_len);
  return f;
}

Result<double> train_model_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask,
                                           FlopConvention convention) {
  HERD_ASSIGN_OR_RETURN(const ForwardFlops f, forward_flops_per_token(cfg, seq_len, mask));
  if (convention == FlopConvention::kExact) return 3.0 * f.total();
  return 6.0 * static_cast<double>(model_params(cfg).total()) + 3.0 * f.attention_core;
}

Result<double> train_hardware_flops_per_token(const LlamaConfig& cfg, std::int64_t seq_len, const AttentionMask& mask,
                                              Recompute recompute) {
  HERD_ASSIGN_OR_RETURN(const ForwardFlops f, forward_flops_per_token(cfg, seq_len, mask));
  double flops = 3.0 * f.total();
  flops += 0.5 * f.attention_core;  // flash backward recomputes Q K^T: 2 of the forward's 4 per pair
  if (recompute == Recompute::kFull) flops += f.attention_linear + f.mlp + f.attention_core;
  return flops;
}

}  // namespace herd::model

#include "herd/model/config.h"

#include <filesystem>

namespace herd::model {

const char* mlp_name(MlpKind k) { return k == MlpKind::kSwiGLU ? "swiglu" : "gelu"; }
const char* norm_name(NormKind k) { return k == NormKind::kRMSNorm ? "rmsnorm" : "layernorm"; }
const char* position_name(PositionKind k) { return k == PositionKind::kRoPE ? "rope" : "learned"; }

namespace {

// The ceilings of validate() (config.h).
constexpr std::int64_t kMaxModelWidth = std::int64_t{1} << 24;      // hidden, ffn, head_dim, vocab
constexpr std::int64_t kMaxModelCount = std::int64_t{1} << 16;      // layers, heads, kv heads
constexpr std::int64_t kMaxModelPositions = std::int64_t{1} << 30;  // max_position_embeddings
constexpr double kMaxModelParams = 1125899906842624.0;              // 2^50 parameters

}  // namespace

Status validate(const LlamaConfig& c) {
  const std::pair<const char*, std::int64_t> positive[] = {{"hidden_size", c.hidden},
                                                           {"intermediate_size", c.ffn_hidden},
                                                           {"num_hidden_layers", c.n_layers},
                                                           {"num_attention_heads", c.n_heads},
                                                           {"num_key_value_heads", c.n_kv_heads},
                                                           {"head_dim", c.head_dim},
                                                           {"vocab_size", c.vocab},
                                                           {"max_position_embeddings", c.max_seq_len}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) return make_error(field, ": must be a positive integer, got ", value);
  }
  // Parameter and FLOP counts are 64-bit integers: sizes far beyond any real model would overflow them
  // (hidden_size 2^31 gave negative counts), so each size has a ceiling and so has the total, which is
  // computed in floating point before any integer product.
  const std::pair<const char*, std::int64_t> sized[] = {{"hidden_size", c.hidden},
                                                        {"intermediate_size", c.ffn_hidden},
                                                        {"head_dim", c.head_dim},
                                                        {"vocab_size", c.vocab}};
  for (const auto& [field, value] : sized) {
    if (value > kMaxModelWidth) {
      return make_error(field, ": ", value, " is beyond herd's limit of ", kMaxModelWidth,
                        " (2^24); check the config for a typo");
    }
  }
  const std::pair<const char*, std::int64_t> counted[] = {
      {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_kv_heads}};
  for (const auto& [field, value] : counted) {
    if (value > kMaxModelCount) {
      return make_error(field, ": ", value, " is beyond herd's limit of ", kMaxModelCount,
                        " (2^16); check the config for a typo");
    }
  }
  if (c.max_seq_len > kMaxModelPositions) {
    return make_error("max_position_embeddings: ", c.max_seq_len, " is beyond herd's limit of ", kMaxModelPositions,
                      " (2^30); check the config for a typo");
  }
  {
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double q = d(c.n_heads) * d(c.head_dim), kv = d(c.n_kv_heads) * d(c.head_dim);
    const double per_layer = d(c.hidden) * (2 * q + 2 * kv + 3 * d(c.ffn_hidden) + 4) + 2 * q + 3 * d(c.ffn_hidden);
    const double total = d(c.n_layers) * per_layer + 2 * d(c.vocab) * d(c.hidden) + d(c.max_seq_len) * d(c.hidden);
    if (total > kMaxModelParams) {
      return make_error("the configuration has about ", total, " parameters, beyond herd's limit of ", kMaxModelParams,
                        " (2^50, 64-bit byte counts must hold 8 bytes per parameter and more); check the sizes");
    }
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error("num_key_value_heads (", c.n_kv_heads, ") must divide num_attention_heads (", c.n_heads,
                      "); choose a divisor of ", c.n_heads);
  }
  if (c.position == PositionKind::kRoPE && c.head_dim % 2 != 0) {
    return make_error("head_dim (", c.head_dim, ") must be even for rotary position embeddings");
  }
  if (!(c.rope_theta > 0)) return make_error("rope_theta: must be positive, got ", c.rope_theta);
  if (!(c.norm_eps > 0)) return make_error("rms_norm_eps: must be positive, got ", c.norm_eps);
  if (c.rope_scaling.enabled()) {
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor) {
      return make_error("rope_scaling.high_freq_factor (", c.rope_scaling.high_freq_factor,
                        ") must exceed rope_scaling.low_freq_factor (", c.rope_scaling.low_freq_factor, ")");
    }
    if (c.rope_scaling.original_max_position_embeddings <= 0) {
      return make_error("rope_scaling.original_max_position_embeddings: must be positive, got ",
                        c.rope_scaling.original_max_position_embeddings);
    }
  }
  return Status::Ok();
}

namespace {

LlamaConfig llama3(const std::string& name, std::int64_t hidden, std::int64_t ffn, std::int64_t layers,
                   std::int64_t heads) {
  LlamaConfig c;
  c.name = name;
  c.hidden = hidden;
  c.ffn_hidden = ffn;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = 8;
  c.head_dim = hidden / heads;
  c.vocab = 128256;
  c.max_seq_len = 131072;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 8192};
  c.norm_eps = 1e-5;
  return c;
}

// Small models for CPU training. They use a BPE vocabulary of 8192 trained on the corpus (a small
// model should not pay for 128K embedding rows) and keep Llama 3's shape: GQA, SwiGLU, RoPE.
LlamaConfig small_model(const std::string& name, std::int64_t hidden, std::int64_t ffn, std::int64_t layers,
                        std::int64_t heads, std::int64_t kv_heads) {
  LlamaConfig c;
  c.name = name;
  c.hidden = hidden;
  c.ffn_hidden = ffn;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.vocab = 8192;
  c.max_seq_len = 1024;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  return c;
}

}  // namespace

std::vector<std::string> preset_names() { return {"llama3-8b", "llama3-70b", "llama3-405b", "tiny", "small"}; }

Result<LlamaConfig> preset(const std::string& name) {
  if (name == "llama3-8b") return llama3(name, 4096, 14336, 32, 32);
  if (name == "llama3-70b") return llama3(name, 8192, 28672, 80, 64);
  if (name == "llama3-405b") return llama3(name, 16384, 53248, 126, 128);
  if (name == "tiny") return small_model(name, 256, 768, 8, 8, 4);
  if (name == "small") return small_model(name, 512, 1536, 8, 8, 2);
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  return make_error("unknown model preset '", name, "'; use one of ", names, " or a path to a config.json");
}

namespace {

Result<MlpKind> parse_mlp(const std::string& s) {
  if (s == "swiglu" || s == "silu") return MlpKind::kSwiGLU;
  if (s == "gelu") return MlpKind::kGeLU;
  return make_error("mlp: expected \"swiglu\" or \"gelu\", got \"", s, "\"");
}

Result<NormKind> parse_norm(const std::string& s) {
  if (s == "rmsnorm") return NormKind::kRMSNorm;
  if (s == "layernorm") return NormKind::kLayerNorm;
  return make_error("norm: expected \"rmsnorm\" or \"layernorm\", got \"", s, "\"");
}

Result<PositionKind> parse_position(const std::string& s) {
  if (s == "rope") return PositionKind::kRoPE;
  if (s == "learned") return PositionKind::kLearned;
  return make_error("position: expected \"rope\" or \"learned\", got \"", s, "\"");
}

}  // namespace

Result<LlamaConfig> config_from_hf_json(const Json& j, const std::string& name) {
  if (!j.is_object()) return make_error("config: expected a JSON object, got ", json_preview(j));
  LlamaConfig c;
  c.name = name;
  HERD_ASSIGN_OR_RETURN(c.hidden, json_int(j, "", "hidden_size"));
  HERD_ASSIGN_OR_RETURN(c.ffn_hidden, json_int(j, "", "intermediate_size"));
  HERD_ASSIGN_OR_RETURN(c.n_layers, json_int(j, "", "num_hidden_layers"));
  HERD_ASSIGN_OR_RETURN(c.n_heads, json_int(j, "", "num_attention_heads"));
  HERD_ASSIGN_OR_RETURN(c.vocab, json_int(j, "", "vocab_size"));
  HERD_ASSIGN_OR_RETURN(c.max_seq_len, json_int(j, "", "max_position_embeddings"));
  // Optional with Hugging Face's defaults: kv heads default to the query heads (multi-head attention).
  HERD_ASSIGN_OR_RETURN(c.n_kv_heads, json_int_or(j, "", "num_key_value_heads", c.n_heads));
  HERD_ASSIGN_OR_RETURN(c.rope_theta, json_number_or(j, "", "rope_theta", 10000.0));
  HERD_ASSIGN_OR_RETURN(c.norm_eps, json_number_or(j, "", "rms_norm_eps", 1e-6));
  HERD_ASSIGN_OR_RETURN(c.tie_embeddings, json_bool_or(j, "", "tie_word_embeddings", false));
  HERD_ASSIGN_OR_RETURN(c.attention_bias, json_bool_or(j, "", "attention_bias", false));
  HERD_ASSIGN_OR_RETURN(c.mlp_bias, json_bool_or(j, "", "mlp_bias", false));
  if (c.hidden > 0 && c.n_heads > 0 && !j.contains("head_dim") && c.hidden % c.n_heads != 0) {
    return make_error("num_attention_heads (", c.n_heads, ") must divide hidden_size (", c.hidden,
                      "), or give head_dim explicitly");
  }
  const std::int64_t default_head_dim = c.n_heads > 0 ? c.hidden / c.n_heads : 0;
  HERD_ASSIGN_OR_RETURN(c.head_dim, json_int_or(j, "", "head_dim", default_head_dim));

  std::string mlp, norm, position;
  HERD_ASSIGN_OR_RETURN(mlp, json_string_or(j, "", "mlp", "swiglu"));
  HERD_ASSIGN_OR_RETURN(norm, json_string_or(j, "", "norm", "rmsnorm"));
  HERD_ASSIGN_OR_RETURN(position, json_string_or(j, "", "position", "rope"));
  HERD_ASSIGN_OR_RETURN(c.mlp, parse_mlp(mlp));
  HERD_ASSIGN_OR_RETURN(c.norm, parse_norm(norm));
  HERD_ASSIGN_OR_RETURN(c.position, parse_position(position));
  if (c.norm == NormKind::kLayerNorm && !j.contains("rms_norm_eps")) {
    HERD_ASSIGN_OR_RETURN(c.norm_eps, json_number_or(j, "", "layer_norm_eps", 1e-5));
  }

  // Newer Hugging Face configs put theta and the scaling together in rope_parameters (rope_type "default":
  // none); older ones have rope_theta and rope_scaling.
  const bool params = j.contains("rope_parameters") && !j["rope_parameters"].is_null();
  if (params) {
    const Json& rp = j["rope_parameters"];
    if (!rp.is_object()) return make_error("rope_parameters: expected an object or null, got ", json_preview(rp));
    HERD_ASSIGN_OR_RETURN(c.rope_theta, json_number_or(rp, "rope_parameters", "rope_theta", c.rope_theta));
  }
  const char* rs_key = params ? "rope_parameters" : "rope_scaling";
  std::string rs_type;
  if (params) {
    HERD_ASSIGN_OR_RETURN(rs_type, json_string_or(j["rope_parameters"], rs_key, "rope_type", "default"));
  }
  if (j.contains(rs_key) && !j[rs_key].is_null() && !(params && rs_type == "default")) {
    const Json& rs = j[rs_key];
    if (!rs.is_object()) return make_error(rs_key, ": expected an object or null, got ", json_preview(rs));
    std::string type;
    HERD_ASSIGN_OR_RETURN(type, json_string_or(rs, rs_key, "rope_type", ""));
    if (type.empty()) {
      HERD_ASSIGN_OR_RETURN(type, json_string_or(rs, rs_key, "type", ""));
    }
    if (type != "llama3") {
      return make_error(rs_key, ".rope_type: only \"llama3\" frequency scaling is supported, got \"", type,
                        "\"; remove rope_scaling or use rope_type \"llama3\"");
    }
    HERD_ASSIGN_OR_RETURN(c.rope_scaling.factor, json_number(rs, rs_key, "factor"));
    HERD_ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, json_number(rs, rs_key, "low_freq_factor"));
    HERD_ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor, json_number(rs, rs_key, "high_freq_factor"));
    HERD_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                          json_int(rs, rs_key, "original_max_position_embeddings"));
    if (!(c.rope_scaling.factor > 0)) {
      return make_error(rs_key, ".factor: must be positive, got ", c.rope_scaling.factor);
    }
  }
  HERD_RETURN_IF_ERROR(validate(c));
  return c;
}

Result<LlamaConfig> load_hf_config(const std::string& path) {
  Result<Json> j = read_json_file(path);
  if (!j.ok()) return j.error();
  std::string name = std::filesystem::path(path).parent_path().filename().string();
  if (name.empty() || name == ".") name = std::filesystem::path(path).stem().string();
  Result<LlamaConfig> c = config_from_hf_json(*j, name);
  if (!c.ok()) return c.error().with_context(path);
  return c;
}

Result<LlamaConfig> resolve_model(const std::string& name_or_path) {
  Result<LlamaConfig> p = preset(name_or_path);
  if (p.ok()) return p;
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec)) {
    return load_hf_config((std::filesystem::path(name_or_path) / "config.json").string());
  }
  if (std::filesystem::exists(name_or_path, ec)) return load_hf_config(name_or_path);
  return p.error();
}

Json config_to_hf_json(const LlamaConfig& c) {
  Json j = {{"hidden_size", c.hidden},
            {"intermediate_size", c.ffn_hidden},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab},
            {"max_position_embeddings", c.max_seq_len},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.norm_eps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"attention_bias", c.attention_bias},
            {"mlp_bias", c.mlp_bias},
            {"mlp", mlp_name(c.mlp)},
            {"norm", norm_name(c.norm)},
            {"position", position_name(c.position)}};
  if (c.rope_scaling.enabled()) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

}  // namespace herd::model

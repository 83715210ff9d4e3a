// Hugging Face Llama directories: reading their weights into any rank's checkpoint pieces, and writing a
// herd checkpoint out as one.
//
// A Hugging Face directory holds config.json and either model.safetensors or the shards
// model-0000N-of-0000M.safetensors listed by model.safetensors.index.json ("weight_map": tensor ->
// file). HfModelDir::open reads the configuration (model::config_from_hf_json; what herd's runtime does
// not run is refused: biases, other activations or norms, rope types other than Llama 3.1's), maps every
// shard (core/safetensors.h) and checks, before anything is read, that every weight herd needs is there
// with its shape, so a converter refuses a bad directory before it writes anything.
//
// Names: model.embed_tokens.weight <-> tok_embedding, model.layers.L.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}.weight <-> layers.L.
// {attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down}, model.norm.weight <-> final_norm,
// lm_head.weight <-> output. Shapes are the same (out, in) matrices. RoPE needs no permutation: herd's
// kernels rotate the pairs (i, i + D/2) (kernels/rope.h kHalf), Hugging Face's rotate_half layout, so
// the q and k rows are taken as they are (Meta's original checkpoints pair (2i, 2i + 1) and are
// permuted by Hugging Face's own converter into this layout before they get here). Tied embeddings
// (tie_word_embeddings, no lm_head.weight) give herd's separate head a copy of the embedding; herd
// writes its head as lm_head.weight with tie_word_embeddings false. GQA: the k and v projections have
// num_key_value_heads x head_dim rows, query head h reads KV head h / (heads / kv heads) in both.
//
// load_into fills each piece's parameters from the mapped tensors, reading only the piece's rows and
// columns (a TP x FSDP shard touches its own byte ranges), and zeroes its AdamW moments: a fresh
// optimizer. bf16, fp16 and fp32 (and fp64) tensors are converted to the training type.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/dtype.h"
#include "herd/core/error.h"
#include "herd/core/safetensors.h"
#include "herd/model/config.h"
#include "herd/parallel/rank_model.h"

namespace herd::train {

// The Hugging Face name of a herd weight ("layers.3.wq" -> "model.layers.3.self_attn.q_proj.weight").
std::string hf_tensor_name(const std::string& herd_name);

// Whether dir looks like a Hugging Face model directory (config.json and model.safetensors or
// model.safetensors.index.json).
bool is_hf_dir(const std::string& dir);

class HfModelDir {
 public:
  static Result<std::unique_ptr<HfModelDir>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const model::LlamaConfig& config() const { return cfg_; }

  // Fills every piece's parameters from the directory and zeroes its moments. A piece naming a weight
  // the model does not have is an error.
  template <typename T>
  Status load_into(std::vector<parallel::ShardPiece<T>>& pieces) const;

 private:
  std::string dir_;
  model::LlamaConfig cfg_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  struct Ref {
    const SafetensorsFile* file = nullptr;
    const SafetensorsEntry* entry = nullptr;
  };
  std::map<std::string, Ref> refs_;  // by herd name
};

// Refuses a configuration herd's runtime cannot run as Hugging Face's LlamaForCausalLM does; `where`
// names the file.
Status check_hf_runnable(const model::LlamaConfig& cfg, const Json& raw, const std::string& where);

// Writes the checkpoint at `checkpoint` (a step directory or a run's checkpoint directory: its newest
// step) as a Hugging Face directory out_dir: config.json (LlamaForCausalLM) and model.safetensors with
// tensors of `dtype` (F32, BF16, F16). Written into out_dir.tmp-hf and renamed at the end, so a failure
// leaves nothing. An existing out_dir must be a Hugging Face directory or empty; in it only config.json
// and the weights change (model.safetensors, which replaces any model-*-of-*.safetensors shards and their
// index), and every other file (README.md, tokenizer files, generation_config.json) stays as it was.
Status export_hf(const std::string& checkpoint, const std::string& out_dir, DType dtype = DType::kF32);

}  // namespace herd::train

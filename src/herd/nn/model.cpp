// LlamaModel: parameter layout, initialisation, and the step's forward/backward over the blocks.
#include "herd/nn/model.h"

#include <cmath>

#include "herd/kernels/ops.h"
#include "herd/model/activations.h"
#include "herd/model/weights.h"
#include "herd/nn/init.h"

namespace herd::nn {

kernels::RopeConfig rope_config(const model::LlamaConfig& cfg) {
  kernels::RopeConfig rc;
  rc.head_dim = cfg.head_dim;
  rc.theta = cfg.rope_theta;
  rc.scaling_factor = cfg.rope_scaling.factor;
  rc.low_freq_factor = cfg.rope_scaling.low_freq_factor;
  rc.high_freq_factor = cfg.rope_scaling.high_freq_factor;
  rc.original_max_pos = cfg.rope_scaling.original_max_position_embeddings;
  rc.layout = kernels::RopeLayout::kHalf;
  return rc;
}

std::int64_t model_arena_bytes(const model::LlamaConfig& cfg, std::int64_t micro_batch, std::int64_t seq_len,
                               model::Recompute recompute, std::int64_t element_bytes) {
  model::ActivationShape s;
  s.seq_len = seq_len + (seq_len % 2);  // the planner's shape wants an even length; round up to size
  s.micro_batch = micro_batch;
  s.dtype = element_bytes == 8 ? DType::kF64 : DType::kF32;
  s.sequence_parallel = false;
  s.recompute = recompute;
  const std::int64_t n = micro_batch * s.seq_len;
  const std::int64_t saved = model::embedding_activation_bytes(cfg, s) +
                             cfg.n_layers * model::layer_activation_bytes(cfg, s) +
                             model::output_activation_bytes(cfg, s) + model::recompute_working_bytes(cfg, s);
  // Residual stream and its gradient; one layer's backward scratch (d_act, d_gate|up, d_norm, d_attn,
  // dq, dk, dv, and the selective re-materialisation); the head's dh.
  const std::int64_t streams = 2 * n * cfg.hidden;
  const std::int64_t scratch = n * (4 * cfg.hidden + 4 * cfg.ffn_hidden + 2 * cfg.q_dim() + 2 * cfg.kv_dim() + 2);
  const std::int64_t rounding = 64 * (40 * cfg.n_layers + 64);
  return saved + (streams + scratch) * element_bytes + rounding;
}

template <typename T>
LlamaModel<T>::LlamaModel(const model::LlamaConfig& cfg, model::Recompute recompute, std::int64_t micro_batch,
                          std::int64_t seq_len)
    : cfg_(cfg), recompute_(recompute), max_rows_(micro_batch * seq_len), max_seq_(seq_len) {
  Result<LayerSizes> sizes = layer_sizes(cfg, 1);
  HERD_CHECK(sizes.ok(), sizes.error().message());
  HERD_CHECK(seq_len > 0 && seq_len <= cfg.max_seq_len, "seq_len ", seq_len, " vs max ", cfg.max_seq_len);
  // Names, offsets and units come from the weight table (model/weights.h); the blocks read their
  // weights through nn::LayerLayout, which lists a layer's weights in the same order.
  const std::vector<model::Weight> table = model::llama_weights(cfg, 1);
  for (const model::Weight& w : table) named_.push_back({w.name, w.offset, w.rows, w.cols});
  units_ = model::llama_weight_units(table);
  for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
    blocks_.emplace_back(*sizes, recompute, "layers." + std::to_string(l) + ".", /*bf16_mode=*/false, ops_);
    HERD_CHECK(blocks_.back().layout().total == units_[static_cast<std::size_t>(l) + 1].count,
               "nn::LayerLayout and the weight table disagree on layer ", l);
  }
  emb_ = param("tok_embedding").offset;
  final_norm_ = param("final_norm").offset;
  output_ = param("output").offset;
  n_params_ = units_.back().offset + units_.back().count;

  params_ = aligned_array<T>(static_cast<std::size_t>(n_params_));
  grads_ = aligned_array<T>(static_cast<std::size_t>(n_params_));
  ops_.zero(params_.get(), sizeof(T) * static_cast<std::size_t>(n_params_));
  zero_grads();
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    blocks_[l].bind(params_.get() + units_[l + 1].offset, grads_.get() + units_[l + 1].offset);
  }

  const kernels::RopeConfig rc = rope_config(cfg);
  rope_ = std::make_unique<kernels::RopeTable<T>>(rc, cfg.max_seq_len);
  arena_ = std::make_unique<tensor::Arena>(
      static_cast<std::size_t>(model_arena_bytes(cfg, micro_batch, seq_len, recompute, sizeof(T))));
}

template <typename T>
const NamedParam& LlamaModel<T>::param(const std::string& name) const {
  for (const NamedParam& p : named_) {
    if (p.name == name) return p;
  }
  HERD_CHECK(false, "no parameter named ", name);
  return named_.front();
}

template <typename T>
void LlamaModel<T>::init_weights(std::uint64_t seed) {
  const std::vector<model::Weight> table = model::llama_weights(cfg_, 1);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const model::Weight& w = table[i];
    T* p = params_.get() + w.offset;
    if (w.init == model::WeightInit::kOnes) {
      for (std::int64_t j = 0; j < w.count(); ++j) p[j] = T(1);
    } else {
      fill_normal(p, w.count(), seed, i, model::init_std(w.init, cfg_));
    }
  }
}

template <typename T>
void LlamaModel<T>::zero_grads() {
  ops_.zero(grads_.get(), sizeof(T) * static_cast<std::size_t>(n_params_));
}

template <typename T>
void LlamaModel<T>::check_batch(const MicroBatch& mb) const {
  HERD_CHECK(mb.rows() <= max_rows_ && mb.seq_len <= max_seq_, "micro-batch (", mb.batch, ", ", mb.seq_len,
             ") exceeds the model's sizing (", max_rows_, " rows, ", max_seq_, " tokens)");
}

template <typename T>
void LlamaModel<T>::forward_blocks(const MicroBatch& mb, T* x, std::vector<BlockState<T>>* states) {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  ops_.embedding_forward(mb.tokens, n, params_.get() + emb_, 0, cfg_.vocab, d, x);
  for (TransformerBlock<T>& b : blocks_) {
    BlockState<T> st = b.forward(*arena_, mb, *rope_, x);
    if (states) {
      states->push_back(st);
    } else {
      arena_->reset(st.mark);
    }
  }
}

template <typename T>
kernels::CrossEntropyLoss LlamaModel<T>::forward_backward(const MicroBatch& mb, T loss_scale) {
  check_batch(mb);
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  auto* ids = a.allocate_array<std::int32_t>(n, "embedding.ids");
  ops_.copy_from_host(mb.tokens, ids, sizeof(std::int32_t) * static_cast<std::size_t>(n));
  T* x = a.allocate_array<T>(n * d, "residual");
  T* dx = a.allocate_array<T>(n * d, "residual.grad");
  std::vector<BlockState<T>> states;
  states.reserve(blocks_.size());
  forward_blocks(mb, x, &states);

  // Output: final norm, then the fused, vocab-tiled cross-entropy forward and backward.
  const tensor::Arena::Mark head = a.mark();
  T* fin_in = a.allocate_array<T>(n * d, "final_norm.input");
  T* rstd = a.allocate_array<T>(n, "final_norm.rstd");
  T* fin_out = a.allocate_array<T>(n * d, "final_norm.output");
  T* lse = a.allocate_array<T>(n, "loss.lse");
  auto* targets = a.allocate_array<std::int32_t>(n, "loss.targets");
  ops_.copy(x, fin_in, sizeof(T) * static_cast<std::size_t>(n * d));
  ops_.copy_from_host(mb.targets, targets, sizeof(std::int32_t) * static_cast<std::size_t>(n));
  T* w_fn = params_.get() + final_norm_;
  ops_.rmsnorm_forward(fin_in, d, w_fn, n, d, cfg_.norm_eps, fin_out, d, rstd);
  T* dh = a.allocate_array<T>(n * d, "scratch");
  ops_.zero(dh, sizeof(T) * static_cast<std::size_t>(n * d));
  const kernels::CrossEntropyLoss loss = ops_.cross_entropy_forward_backward(
      fin_out, n, d, params_.get() + output_, cfg_.vocab, targets, loss_scale, lse, dh, grads_.get() + output_);
  ops_.rmsnorm_backward(dh, d, fin_in, d, w_fn, rstd, n, d, dx, d, kernels::Accumulate::kOverwrite,
                        grads_.get() + final_norm_);
  a.reset(head);

  for (std::size_t l = blocks_.size(); l-- > 0;) blocks_[l].backward(a, mb, *rope_, states[l], dx);
  ops_.embedding_backward(ids, n, dx, 0, cfg_.vocab, d, grads_.get() + emb_);
  a.reset(start);
  return loss;
}

template <typename T>
const T* LlamaModel<T>::forward_final_hidden(const MicroBatch& mb) {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  tensor::Arena& a = *arena_;
  T* x = a.allocate_array<T>(n * d, "residual");
  forward_blocks(mb, x, nullptr);
  T* rstd = a.allocate_array<T>(n, "final_norm.rstd");
  T* h = a.allocate_array<T>(n * d, "final_norm.output");
  ops_.rmsnorm_forward(x, d, params_.get() + final_norm_, n, d, cfg_.norm_eps, h, d, rstd);
  return h;
}

template <typename T>
kernels::CrossEntropyLoss LlamaModel<T>::evaluate(const MicroBatch& mb) {
  check_batch(mb);
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  const T* h = forward_final_hidden(mb);
  T* lse = a.allocate_array<T>(n, "loss.lse");
  const kernels::CrossEntropyLoss loss =
      ops_.cross_entropy_forward(h, n, d, params_.get() + output_, cfg_.vocab, mb.targets, lse);
  a.reset(start);
  return loss;
}

template <typename T>
void LlamaModel<T>::logits(const MicroBatch& mb, T* out) {
  check_batch(mb);
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  const T* h = forward_final_hidden(mb);
  ops_.gemm(kernels::Trans::kNo, kernels::Trans::kYes, n, cfg_.vocab, d, T(1), h, d, params_.get() + output_, d, T(0),
            out, cfg_.vocab);
  a.reset(start);
}

template class LlamaModel<float>;
template class LlamaModel<double>;

}  // namespace herd::nn

// StageModule: a virtual stage's slice of the Llama model (stage.h), built from nn's blocks and the
// kernels the single-rank model uses, in the same order, so a pipeline reproduces its numbers.
#include "herd/parallel/pp/stage.h"

#include <cstring>

#include "herd/core/check.h"
#include "herd/kernels/embedding.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/nn/layer_sizes.h"
#include "herd/nn/model.h"

namespace herd::parallel::pp {

template <typename T>
StageModule<T>::StageModule(const model::LlamaConfig& cfg, model::Recompute recompute, std::vector<int> layers,
                            bool first, bool last, std::shared_ptr<const kernels::RopeTable<T>> rope)
    : cfg_(cfg), recompute_(recompute), layers_(std::move(layers)), first_(first), last_(last), rope_(std::move(rope)) {
  Result<nn::LayerSizes> sizes = nn::layer_sizes(cfg, 1);
  HERD_CHECK(sizes.ok(), sizes.error().message());
  const std::int64_t d = cfg.hidden, V = cfg.vocab;
  const std::int64_t layer_count = nn::LayerLayout(*sizes).total;
  // nn::LlamaModel's layout: embedding (V*d) | L layers | head (d + V*d).
  auto add = [&](const std::string& name, std::int64_t global, std::int64_t count) {
    units_.push_back({name, n_params_, global, count});
    n_params_ += count;
  };
  if (first_) {
    emb_ = n_params_;
    add("embedding", 0, V * d);
  }
  for (int l : layers_) {
    HERD_CHECK(l >= 0 && l < cfg.n_layers, "layer ", l, " of ", cfg.n_layers);
    add("layers." + std::to_string(l), V * d + l * layer_count, layer_count);
    blocks_.emplace_back(*sizes, recompute, "layers." + std::to_string(l) + ".");
  }
  if (last_) {
    head_ = n_params_;
    add("head", V * d + cfg.n_layers * layer_count, d + V * d);
  }
  params_ = aligned_array<T>(static_cast<std::size_t>(n_params_));
  grads_ = aligned_array<T>(static_cast<std::size_t>(n_params_));
  std::memset(params_.get(), 0, sizeof(T) * static_cast<std::size_t>(n_params_));
  zero_grads();
  const std::size_t b0 = first_ ? 1 : 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].bind(params_.get() + units_[b0 + i].local, grads_.get() + units_[b0 + i].local);
  }
}

template <typename T>
void StageModule<T>::zero_grads() {
  std::memset(grads_.get(), 0, sizeof(T) * static_cast<std::size_t>(n_params_));
}

template <typename T>
void StageModule<T>::load_params(const T* full) {
  for (const StageUnit& u : units_) {
    std::memcpy(params_.get() + u.local, full + u.global, sizeof(T) * static_cast<std::size_t>(u.count));
  }
}

template <typename T>
void StageModule<T>::store(const T* local, T* full) const {
  for (const StageUnit& u : units_) {
    std::memcpy(full + u.global, local + u.local, sizeof(T) * static_cast<std::size_t>(u.count));
  }
}

template <typename T>
StageState<T> StageModule<T>::forward(tensor::Arena& slot, const nn::MicroBatch& mb, T* x) const {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  StageState<T> st;
  if (first_) {
    st.ids = slot.allocate_array<std::int32_t>(n, "embedding.ids");
    std::memcpy(st.ids, mb.tokens, sizeof(std::int32_t) * static_cast<std::size_t>(n));
    kernels::embedding_forward<T>(mb.tokens, n, params_.get() + emb_, 0, cfg_.vocab, d, x);
  }
  st.blocks.reserve(blocks_.size());
  for (const nn::TransformerBlock<T>& b : blocks_) st.blocks.push_back(b.forward(slot, mb, *rope_, x));
  if (last_) {
    // The head keeps output_saved_tensors(): the norm's input and output, the rstd, lse and targets.
    st.head_mark = slot.mark();
    st.fin_in = slot.allocate_array<T>(n * d, "final_norm.input");
    st.fin_rstd = slot.allocate_array<T>(n, "final_norm.rstd");
    st.fin_out = slot.allocate_array<T>(n * d, "final_norm.output");
    st.lse = slot.allocate_array<T>(n, "loss.lse");
    st.targets = slot.allocate_array<std::int32_t>(n, "loss.targets");
    std::memcpy(st.fin_in, x, sizeof(T) * static_cast<std::size_t>(n * d));
    std::memcpy(st.targets, mb.targets, sizeof(std::int32_t) * static_cast<std::size_t>(n));
    kernels::rmsnorm_forward<T>(st.fin_in, d, params_.get() + head_, n, d, cfg_.norm_eps, st.fin_out, d, st.fin_rstd);
    st.loss =
        kernels::cross_entropy_forward<T>(st.fin_out, n, d, params_.get() + head_ + d, cfg_.vocab, st.targets, st.lse);
  }
  return st;
}

template <typename T>
void StageModule<T>::backward(tensor::Arena& slot, const nn::MicroBatch& mb, StageState<T>& st, T loss_scale,
                              T* dx) const {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  if (last_) {
    T* dh = slot.allocate_array<T>(n * d, "scratch");
    std::memset(dh, 0, sizeof(T) * static_cast<std::size_t>(n * d));
    const T* w_fn = params_.get() + head_;
    kernels::ce_shard_backward<T>(st.fin_out, n, d, w_fn + d, 0, cfg_.vocab, st.targets, st.lse, loss_scale, dh,
                                  grads_.get() + head_ + d);
    kernels::rmsnorm_backward<T>(dh, d, st.fin_in, d, w_fn, st.fin_rstd, n, d, dx, d, kernels::Accumulate::kOverwrite,
                                 grads_.get() + head_);
    slot.reset(st.head_mark);
  }
  for (std::size_t l = blocks_.size(); l-- > 0;) blocks_[l].backward(slot, mb, *rope_, st.blocks[l], dx);
  if (first_) kernels::embedding_backward<T>(st.ids, n, dx, 0, cfg_.vocab, d, grads_.get() + emb_);
  slot.reset();
  st = StageState<T>{};
}

template <typename T>
std::int64_t StageModule<T>::slot_bytes(std::int64_t micro_batch, std::int64_t seq_len) const {
  // The single-rank model's sizing for a model of this stage's depth covers the embedding ids, the
  // layers' saved tensors, the head and one layer's backward scratch (and more: its two residual
  // streams, which a slot does not use, leave headroom).
  model::LlamaConfig c = cfg_;
  c.n_layers = static_cast<std::int64_t>(layers_.size());
  return nn::model_arena_bytes(c, micro_batch, seq_len, recompute_, sizeof(T));
}

template class StageModule<float>;
template class StageModule<double>;

}  // namespace herd::parallel::pp

// DistributedStage (dist_stage.h): the TP-local units of a model slice, full <-> sharded weights, the
// forward and backward of one micro-batch with FSDP gathers and TP/CP collectives, and the optimizer
// step of the shards.
#include "herd/parallel/dist_stage.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "herd/nn/init.h"

namespace herd::parallel {

namespace {

std::size_t bytes_of(std::int64_t n, std::size_t elem) { return static_cast<std::size_t>(n) * elem; }

// Copies this TP rank's block of a full (rows, cols) weight to `local` (row-major, the block's shape),
// both host buffers (a checkpoint's tensors being loaded).
template <typename T>
void tp_slice(const model::Weight& w, const model::TpBlock& b, const T* full, T* local) {
  for (std::int64_t i = b.r0; i < b.r1; ++i) {
    const T* row = full + i * w.cols + b.c0;
    std::memcpy(local + (i - b.r0) * b.cols(), row, bytes_of(b.cols(), sizeof(T)));  // host
  }
}

// Inverse over all ranks: `gathered` holds the tp local blocks back to back (replicated: rank 0's copy);
// host buffers (a checkpoint's tensors being assembled).
template <typename T>
void tp_unslice(const model::Weight& w, int tp, const T* gathered, T* full) {
  const int ranks = w.split == model::TpSplit::kReplicated ? 1 : tp;
  for (int r = 0; r < ranks; ++r) {
    const model::TpBlock b = model::tp_block(w, tp, r);
    const T* src = gathered + r * w.local_count();
    for (std::int64_t i = b.r0; i < b.r1; ++i) {
      const T* row = src + (i - b.r0) * b.cols();
      std::memcpy(full + i * w.cols + b.c0, row, bytes_of(b.cols(), sizeof(T)));  // host
    }
  }
}

}  // namespace

template <typename T>
DistributedStage<T>::DistributedStage(const model::LlamaConfig& cfg, const ParallelContext& ctx,
                                      model::Recompute recompute, std::vector<int> layers, bool first, bool last,
                                      tp::TpCollectives<T>* tpc, cp::CpAttentionHooks<T>* cph,
                                      std::shared_ptr<const kernels::RopeTable<T>> rope, bool release_after_backward)
    : cfg_(cfg),
      ctx_(ctx),
      ops_(&ctx.ops()),
      recompute_(recompute),
      layers_(std::move(layers)),
      first_(first),
      last_(last),
      release_after_backward_(release_after_backward),
      tpc_(tpc),
      cph_(cph),
      rope_(std::move(rope)) {
  HERD_CHECK(tpc_ != nullptr && ctx.fsdp() != nullptr, "a distributed stage needs its TP and FSDP groups");
  HERD_CHECK(ctx.cp_size() == 1 || cph_ != nullptr, "cp > 1 needs the CP attention hooks");
  HERD_CHECK(!ctx.bf16() || (std::is_same_v<T, float>), "bf16 compute keeps fp32 master weights: a float model");
  const int tp = ctx.tp_size();
  Result<nn::LayerSizes> local = nn::layer_sizes(cfg, tp);
  HERD_CHECK(local.ok(), local.error().message());
  local_ = *local;
  vocab_ = tp::vocab_shard(cfg.vocab, tp, ctx.tp_rank());

  // The weight table at this TP degree gives every weight's local shape and place in its unit; this
  // stage keeps the units of its embedding, layers and head.
  const std::vector<model::Weight> table = model::llama_weights(cfg, tp);
  const std::vector<model::WeightUnit> table_units = model::llama_weight_units(table);
  std::vector<int> stage_unit(table_units.size(), -1);  // table unit -> index among this stage's units
  for (std::size_t t = 0; t < table_units.size(); ++t) {
    const std::string& name = table_units[t].name;
    const bool layer = t > 0 && t + 1 < table_units.size();
    const int l = static_cast<int>(t) - 1;
    const bool mine = layer ? std::find(layers_.begin(), layers_.end(), l) != layers_.end() : (t == 0 ? first_ : last_);
    if (!mine) continue;
    if (layer) {
      HERD_CHECK(static_cast<int>(units_.size()) - layer0_ == static_cast<int>(blocks_.size()),
                 "stage layers must be consecutive and increasing");
      blocks_.emplace_back(local_, recompute, name + ".", ctx.bf16(), *ops_);
      HERD_CHECK(blocks_.back().layout().total == table_units[t].local_count,
                 "nn::LayerLayout and the weight table disagree on ", name);
    } else if (t == 0) {
      emb_ = static_cast<int>(units_.size());
      layer0_ = emb_ + 1;
    } else {
      head_ = static_cast<int>(units_.size());
    }
    stage_unit[t] = static_cast<int>(units_.size());
    units_.push_back(std::make_unique<fsdp::FlatUnit<T>>(name, table_units[t].local_count, *ctx.fsdp(), ctx.bf16(),
                                                         /*keep_buffers=*/!ctx.reshard_after_forward, *ops_));
    norm_ranges_.emplace_back();
  }
  HERD_CHECK(blocks_.size() == layers_.size(), "stage layers out of range or not increasing");
  for (std::size_t i = 0; i < table.size(); ++i) {
    const model::Weight& w = table[i];
    const int u = stage_unit[static_cast<std::size_t>(w.unit_index)];
    if (u < 0) continue;
    params_.push_back({w, u, static_cast<int>(i)});
    // Replicated weights (the norms) see only this rank's rows under SP: their gradients are TP-summed.
    if (w.split == model::TpSplit::kReplicated) {
      norm_ranges_[static_cast<std::size_t>(u)].emplace_back(w.local_offset, w.local_offset + w.local_count());
    }
  }
  for (nn::TransformerBlock<T>& b : blocks_) {
    // A TP group of one runs the blocks' single-rank code: no gathers, reduces or their copies.
    b.set_tensor_parallel(ctx.tp_size() > 1 ? tpc_ : nullptr);
    b.set_attention(cph_);
  }
  for (auto& u : units_) {
    m_.push_back(kernels::zeroed_array<T>(*ops_, u->shard_size()));
    v_.push_back(kernels::zeroed_array<T>(*ops_, u->shard_size()));
  }
}

template <typename T>
DistributedStage<T>::~DistributedStage() = default;

template <typename T>
void DistributedStage<T>::init_weights(std::uint64_t seed) {
  const int tp = ctx_.tp_size(), r = ctx_.tp_rank();
  // Drawn on the host in pieces of at most kPiece elements, each copied to the shard's device.
  constexpr std::int64_t kPiece = std::int64_t{1} << 16;
  std::vector<T> host;
  for (const ShardedParam& p : params_) {
    fsdp::FlatUnit<T>& unit = *units_[static_cast<std::size_t>(p.unit)];
    // This rank's unit elements [s0, s1) that belong to the weight: [a, b).
    const std::int64_t s0 = unit.shard_begin(), s1 = std::min(s0 + unit.shard_size(), unit.count());
    const std::int64_t a = std::max(s0, p.w.local_offset), b = std::min(s1, p.w.local_offset + p.w.local_count());
    if (a >= b) continue;
    const model::TpBlock blk = model::tp_block(p.w, tp, r);
    const std::uint64_t stream = nn::normal_stream(seed, static_cast<std::uint64_t>(p.index));
    const double sd = model::init_std(p.w.init, cfg_);
    for (std::int64_t piece = a; piece < b; piece += kPiece) {
      const std::int64_t end = std::min(b, piece + kPiece);
      host.resize(static_cast<std::size_t>(end - piece));
      for (std::int64_t j = piece; j < end; ++j) {
        const std::int64_t e = j - p.w.local_offset;  // row-major inside the TP block
        const std::int64_t g = (blk.r0 + e / blk.cols()) * p.w.cols + blk.c0 + e % blk.cols();
        host[static_cast<std::size_t>(j - piece)] =
            p.w.init == model::WeightInit::kOnes
                ? T(1)
                : static_cast<T>(nn::normal_at(stream, static_cast<std::uint64_t>(g), sd));
      }
      ops_->copy_from_host(host.data(), unit.shard_params() + (piece - s0), bytes_of(end - piece, sizeof(T)));
    }
  }
  params_updated();
}

template <typename T>
void DistributedStage<T>::params_updated() {
  for (auto& u : units_) u->params_updated();
}

template <typename T>
void DistributedStage<T>::bind(std::size_t l, fsdp::FlatUnit<T>& unit) {
  if (ctx_.bf16()) {
    blocks_[l].bind_bf16(unit.full_params_bf16(), unit.full_grads());
  } else {
    blocks_[l].bind(unit.full_params(), unit.full_grads());
  }
}

template <typename T>
void DistributedStage<T>::load_full(const T* full) {
  const int tp = ctx_.tp_size(), r = ctx_.tp_rank();
  std::vector<std::vector<T>> local(units_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) local[u].assign(static_cast<std::size_t>(units_[u]->count()), T(0));
  for (const ShardedParam& p : params_) {
    tp_slice<T>(p.w, model::tp_block(p.w, tp, r), full + p.w.offset,
                local[static_cast<std::size_t>(p.unit)].data() + p.w.local_offset);
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    // The shard's elements of the unit, then zeros for the padding past its end.
    const std::int64_t valid = std::clamp(unit.count() - unit.shard_begin(), std::int64_t{0}, unit.shard_size());
    if (valid > 0) {
      ops_->copy_from_host(local[u].data() + unit.shard_begin(), unit.shard_params(), bytes_of(valid, sizeof(T)));
    }
    ops_->zero(unit.shard_params() + valid, bytes_of(unit.shard_size() - valid, sizeof(T)));
  }
  params_updated();
}

template <typename T>
Status DistributedStage<T>::gather_full(bool grads, T* full) {
  const int tp = ctx_.tp_size();
  const DType et = dtype_of<T>();
  std::vector<std::vector<T>> local(units_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    local[u].resize(static_cast<std::size_t>(unit.padded()));
    const T* src = grads ? unit.shard_grads() : unit.shard_params();
    std::vector<T> host;  // the gather is host memory: a device shard goes through a host copy
    if (ctx_.device != kernels::Device::kCpu) {
      host.resize(static_cast<std::size_t>(unit.shard_size()));
      ops_->copy_to_host(src, host.data(), bytes_of(unit.shard_size(), sizeof(T)));
      src = host.data();
    }
    HERD_RETURN_IF_ERROR(
        ctx_.fsdp()->all_gather(src, local[u].data(), static_cast<std::size_t>(unit.shard_size()), et));
  }
  std::vector<T> all;
  for (const ShardedParam& p : params_) {
    all.resize(static_cast<std::size_t>(p.w.local_count() * tp));
    const T* mine = local[static_cast<std::size_t>(p.unit)].data() + p.w.local_offset;
    HERD_RETURN_IF_ERROR(ctx_.tp->all_gather(mine, all.data(), static_cast<std::size_t>(p.w.local_count()), et));
    tp_unslice<T>(p.w, tp, all.data(), full + p.w.offset);
  }
  return Status::Ok();
}

template <typename T>
void DistributedStage<T>::zero_grads() {
  for (auto& u : units_) u->zero_grads();
}

template <typename T>
Status DistributedStage<T>::prepare_micro_batches(const std::vector<nn::MicroBatch>& mbs) {
  return cph_ ? cph_->set_micro_batches(mbs) : Status::Ok();
}

template <typename T>
void DistributedStage<T>::select_micro_batch(int m) {
  if (cph_) cph_->select(static_cast<std::size_t>(m));
}

template <typename T>
Status DistributedStage<T>::finish_unit(std::size_t u) {
  fsdp::FlatUnit<T>& unit = *units_[u];
  if (ctx_.sequence_parallel && ctx_.tp_size() > 1) {
    // Each TP rank saw only its rows in the norms: their weight gradients are partial sums over TP.
    for (const auto& [b, e] : norm_ranges_[u]) tpc_->all_reduce(unit.full_grads() + b, e - b);
    HERD_RETURN_IF_ERROR(tpc_->status());
  }
  unit.begin_reduce_scatter_grads();
  return Status::Ok();
}

template <typename T>
Status DistributedStage<T>::after_backward(std::size_t u, bool last_of_step) {
  if (last_of_step) HERD_RETURN_IF_ERROR(finish_unit(u));
  if (release_after_backward_ || last_of_step) units_[u]->release();
  return Status::Ok();
}

template <typename T>
Result<DistStageState<T>> DistributedStage<T>::forward(tensor::Arena& a, const nn::MicroBatch& mb, T* x, T loss_scale,
                                                       bool fuse_head) {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  const std::int64_t nl = tpc_->local_rows(n);
  HERD_CHECK(nl * tpc_->size() == n || !ctx_.sequence_parallel, "rows ", n, " not divisible by tp");
  const bool reshard = ctx_.reshard_after_forward;
  const std::size_t n_units = units_.size();
  auto prefetch = [&](std::size_t u) {
    if (u < n_units) units_[u]->begin_gather();
  };
  State st;
  st.start = a.mark();
  std::size_t u = 0;
  if (first_) {
    st.ids = a.allocate_array<std::int32_t>(n, "embedding.ids");
    ops_->copy_from_host(mb.tokens, st.ids, bytes_of(n, sizeof(std::int32_t)));
    HERD_RETURN_IF_ERROR(units_[0]->wait_gather());
    prefetch(1);
    const tensor::Arena::Mark m = a.mark();
    T* full = a.allocate_array<T>(n * d, "scratch");
    if constexpr (std::is_same_v<T, float>) {
      if (ctx_.bf16()) {
        tp::vocab_embedding_forward(*tpc_, st.ids, n, units_[0]->full_params_bf16(), vocab_, d, full, x);
      } else {
        tp::vocab_embedding_forward<T>(*tpc_, st.ids, n, units_[0]->full_params(), vocab_, d, full, x);
      }
    } else {
      tp::vocab_embedding_forward<T>(*tpc_, st.ids, n, units_[0]->full_params(), vocab_, d, full, x);
    }
    a.reset(m);
    if (reshard) units_[0]->release();
    u = 1;
  }
  st.blocks.reserve(blocks_.size());
  for (std::size_t l = 0; l < blocks_.size(); ++l, ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    HERD_RETURN_IF_ERROR(unit.wait_gather());
    prefetch(u + 1);
    bind(l, unit);
    st.blocks.push_back(blocks_[l].forward(a, mb, *rope_, x));
    if (reshard) unit.release();
  }
  HERD_RETURN_IF_ERROR(tpc_->status());
  if (cph_) HERD_RETURN_IF_ERROR(cph_->status());
  if (!last_) return st;

  // Head: final norm on this rank's rows, vocab-parallel loss over all rows.
  fsdp::FlatUnit<T>& hu = *units_[static_cast<std::size_t>(head_)];
  HERD_RETURN_IF_ERROR(hu.wait_gather());
  if (reshard && fuse_head && head_ > 0) units_[static_cast<std::size_t>(head_ - 1)]->begin_gather();
  st.head_mark = a.mark();
  head_forward(a, n, st, x);
  ops_->copy_from_host(mb.targets, st.targets, bytes_of(n, sizeof(std::int32_t)));
  if (fuse_head) {
    HERD_RETURN_IF_ERROR(head_backward(a, n, st, loss_scale, x));  // x becomes dLoss/dx
    st.head_done = true;
    return st;
  }
  // The loss now (every pipeline rank reports it after the step); the gradients in backward().
  HERD_RETURN_IF_ERROR(head_backward(a, n, st, T(0), nullptr));
  return st;
}

namespace {

// The final norm's saved tensors in the storage S of the stage: T, or bf16 in a bf16 stage (T = float).
template <typename S, typename T>
S*& norm_input(DistStageState<T>& st) {
  if constexpr (std::is_same_v<S, T>) {
    return st.fin_in;
  } else {
    return st.fin_in_h;
  }
}
template <typename S, typename T>
S*& norm_output(DistStageState<T>& st) {
  if constexpr (std::is_same_v<S, T>) {
    return st.fin_out;
  } else {
    return st.fin_out_h;
  }
}
// The head unit's gathered weights (final norm, then the vocabulary rows) in storage S.
template <typename S, typename T>
const S* head_weights(fsdp::FlatUnit<T>& hu) {
  if constexpr (std::is_same_v<S, T>) {
    return hu.full_params();
  } else {
    return hu.full_params_bf16();
  }
}
// n values of storage S as T: the buffer itself when S is T, else widened into arena scratch.
template <typename T, typename S>
const T* widened(const kernels::Ops& ops, tensor::Arena& a, const S* x, std::int64_t n) {
  if constexpr (std::is_same_v<S, T>) {
    (void)ops, (void)a, (void)n;
    return x;
  } else {
    T* out = a.allocate_array<T>(n, "scratch");
    ops.to_float(x, n, out);
    return out;
  }
}

}  // namespace

template <typename T>
void DistributedStage<T>::head_forward(tensor::Arena& a, std::int64_t n, State& st, const T* x) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx_.bf16()) return head_forward_in<bf16>(a, n, st, x);
  }
  head_forward_in<T>(a, n, st, x);
}

template <typename T>
Status DistributedStage<T>::head_backward(tensor::Arena& a, std::int64_t n, State& st, T loss_scale, T* dx) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx_.bf16()) return head_backward_in<bf16>(a, n, st, loss_scale, dx);
  }
  return head_backward_in<T>(a, n, st, loss_scale, dx);
}

// The final norm over this rank's rows; its saved input and output are kept in S (a bf16 stage rounds
// them, and normalises the widened rounded input with the widened bf16 weight).
template <typename T>
template <typename S>
void DistributedStage<T>::head_forward_in(tensor::Arena& a, std::int64_t n, State& st, const T* x) {
  const std::int64_t d = cfg_.hidden, nl = tpc_->local_rows(n);
  fsdp::FlatUnit<T>& hu = *units_[static_cast<std::size_t>(head_)];
  S*& in = norm_input<S>(st);
  S*& out = norm_output<S>(st);
  in = a.allocate_array<S>(nl * d, "final_norm.input");
  st.fin_rstd = a.allocate_array<T>(nl, "final_norm.rstd");
  out = a.allocate_array<S>(nl * d, "final_norm.output");
  st.lse = a.allocate_array<T>(n, "loss.lse");
  st.targets = a.allocate_array<std::int32_t>(n, "loss.targets");
  if constexpr (std::is_same_v<S, T>) {
    ops_->copy(x, in, bytes_of(nl * d, sizeof(T)));
  } else {
    ops_->to_bf16(x, nl * d, in);
  }
  const tensor::Arena::Mark m = a.mark();
  const T* xin = widened<T>(*ops_, a, in, nl * d);  // the norm's input as its backward sees it
  const T* w = widened<T>(*ops_, a, head_weights<S>(hu), d);
  T* normed = nullptr;
  if constexpr (std::is_same_v<S, T>) {
    normed = out;
  } else {
    normed = a.allocate_array<T>(nl * d, "scratch");
  }
  ops_->rmsnorm_forward(xin, d, w, nl, d, cfg_.norm_eps, normed, d, st.fin_rstd);
  if constexpr (!std::is_same_v<S, T>) ops_->to_bf16(normed, nl * d, out);
  a.reset(m);
}

// The vocab-parallel loss over all rows (gathered over TP) and, with dx, its backward through the final
// norm: dx is dLoss/d(final residual). dx null: the loss only (evaluation): no gradient GEMMs.
template <typename T>
template <typename S>
Status DistributedStage<T>::head_backward_in(tensor::Arena& a, std::int64_t n, State& st, T loss_scale, T* dx) {
  const std::int64_t d = cfg_.hidden, nl = tpc_->local_rows(n);
  fsdp::FlatUnit<T>& hu = *units_[static_cast<std::size_t>(head_)];
  const S* w = head_weights<S>(hu);
  T* g_fn = hu.full_grads();
  const tensor::Arena::Mark m = a.mark();
  S* h = a.allocate_array<S>(n * d, "scratch");  // (N, d) all rows
  tpc_->gather(norm_output<S>(st), h, n, d);
  T* dh = nullptr;  // (N, d) partial over TP; none for the loss only
  if (dx) {
    dh = a.allocate_array<T>(n * d, "scratch");
    ops_->zero(dh, bytes_of(n * d, sizeof(T)));
  }
  T* stats = a.allocate_array<T>(3 * n * (2 * tpc_->size() + 1), "scratch");
  st.loss = tp::vocab_cross_entropy(*tpc_, h, n, d, w + d, vocab_, st.targets, loss_scale, st.lse, dh,
                                    dx ? g_fn + d : nullptr, stats);
  if (dx) {
    T* dh_local = a.allocate_array<T>(nl * d, "scratch");
    tpc_->reduce(dh, dh_local, n, d);
    const T* xin = widened<T>(*ops_, a, norm_input<S>(st), nl * d);
    const T* wn = widened<T>(*ops_, a, w, d);
    ops_->rmsnorm_backward(dh_local, d, xin, d, wn, st.fin_rstd, nl, d, dx, d, kernels::Accumulate::kOverwrite, g_fn);
  }
  a.reset(m);
  return tpc_->status();
}

template <typename T>
Status DistributedStage<T>::backward(tensor::Arena& a, const nn::MicroBatch& mb, State& st, T loss_scale, T* dx,
                                     bool last_of_step) {
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  const bool reshard = ctx_.reshard_after_forward;
  if (last_) {
    if (!st.head_done) {
      const kernels::CrossEntropyLoss keep = st.loss;
      HERD_RETURN_IF_ERROR(head_backward(a, n, st, loss_scale, dx));
      st.loss = keep;
    }
    a.reset(st.head_mark);
    HERD_RETURN_IF_ERROR(after_backward(static_cast<std::size_t>(head_), last_of_step));
  }
  // Backward: unit u gathered again when resharded (prefetching u - 1).
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const std::size_t u = static_cast<std::size_t>(layer0_) + l;
    fsdp::FlatUnit<T>& unit = *units_[u];
    HERD_RETURN_IF_ERROR(unit.wait_gather());
    if (reshard && u > 0) units_[u - 1]->begin_gather();
    bind(l, unit);
    blocks_[l].backward(a, mb, *rope_, st.blocks[l], dx);
    HERD_RETURN_IF_ERROR(tpc_->status());
    if (cph_) HERD_RETURN_IF_ERROR(cph_->status());
    HERD_RETURN_IF_ERROR(after_backward(u, last_of_step));
  }
  if (first_) {
    HERD_RETURN_IF_ERROR(units_[0]->wait_gather());
    const tensor::Arena::Mark m = a.mark();
    T* full = a.allocate_array<T>(n * d, "scratch");
    tp::vocab_embedding_backward<T>(*tpc_, st.ids, n, dx, vocab_, d, full, units_[0]->full_grads());
    a.reset(m);
    HERD_RETURN_IF_ERROR(tpc_->status());
    HERD_RETURN_IF_ERROR(after_backward(0, last_of_step));
  }
  a.reset(st.start);
  st = State{};
  return Status::Ok();
}

template <typename T>
void DistributedStage<T>::head_logits(tensor::Arena& a, std::int64_t n, const State& st, T* out) {
  HERD_CHECK(last_, "head_logits on a stage without the head");
  const std::int64_t d = cfg_.hidden;
  fsdp::FlatUnit<T>& hu = *units_[static_cast<std::size_t>(head_)];
  const tensor::Arena::Mark m = a.mark();
  if constexpr (std::is_same_v<T, float>) {
    if (ctx_.bf16()) {
      bf16* h = a.allocate_array<bf16>(n * d, "scratch");
      tpc_->gather(st.fin_out_h, h, n, d);
      ops_->gemm_bf16(kernels::Trans::kNo, kernels::Trans::kYes, n, vocab_.rows, d, 1.0f, h, d,
                      hu.full_params_bf16() + d, d, 0.0f, out, vocab_.rows);
      a.reset(m);
      return;
    }
  }
  T* h = a.allocate_array<T>(n * d, "scratch");
  tpc_->gather(st.fin_out, h, n, d);
  ops_->gemm(kernels::Trans::kNo, kernels::Trans::kYes, n, vocab_.rows, d, T(1), h, d, hu.full_params() + d, d, T(0),
             out, vocab_.rows);
  a.reset(m);
}

template <typename T>
Status DistributedStage<T>::wait_grads() {
  for (auto& u : units_) HERD_RETURN_IF_ERROR(u->wait_grads());
  return Status::Ok();
}

template <typename T>
double DistributedStage<T>::counted_sum_squares() const {
  double s = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const fsdp::FlatUnit<T>& unit = *units_[u];
    const T* g = unit.shard_grads();
    const std::int64_t b = unit.shard_begin(), e = b + unit.shard_size();
    if (ctx_.tp_rank() == 0) {
      s += ops_->sum_squares(g, unit.shard_size());
      continue;
    }
    // Replicated norm weights are counted on TP rank 0 only.
    std::int64_t pos = b;
    for (const auto& [nb, ne] : norm_ranges_[u]) {
      const std::int64_t cut_b = std::clamp(nb, b, e), cut_e = std::clamp(ne, b, e);
      if (cut_b > pos) s += ops_->sum_squares(g + (pos - b), cut_b - pos);
      pos = std::max(pos, cut_e);
    }
    if (e > pos) s += ops_->sum_squares(g + (pos - b), e - pos);
  }
  return s;
}

template <typename T>
void DistributedStage<T>::adamw(const kernels::AdamWConfig& cfg, double clip, std::int64_t step) {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    // The clip applied as the gradients are read, and in bf16 mode the compute copy rounded as the
    // weights are written (kernels/optim.h: the same bits as a scaling pass before and a rounding pass
    // at the next gather).
    bf16* rounded = unit.shard_params_bf16();
    T* m = m_[u].template as<T>();
    T* v = v_[u].template as<T>();
    if constexpr (std::is_same_v<T, float>) {
      ops_->adamw_step(unit.shard_params(), unit.shard_grads(), m, v, unit.shard_size(), cfg, step,
                       static_cast<T>(clip), rounded);
    } else {
      HERD_CHECK(rounded == nullptr, "bf16 weight copies are of fp32 master weights");
      ops_->adamw_step(unit.shard_params(), unit.shard_grads(), m, v, unit.shard_size(), cfg, step,
                       static_cast<T>(clip));
    }
    if (rounded != nullptr) {
      unit.params_updated_rounded();
    } else {
      unit.params_updated();
    }
  }
}

template <typename T>
std::int64_t DistributedStage<T>::slot_bytes(std::int64_t micro_batch, std::int64_t local_seq) const {
  // The single-rank sizing of a model of this stage's depth bounds every local saved set and one
  // layer's scratch; the TP collectives add full-row (N, d) gather/partial buffers and the
  // vocab-parallel loss statistics.
  model::LlamaConfig c = cfg_;
  c.n_layers = static_cast<std::int64_t>(layers_.size());
  const std::int64_t n = micro_batch * local_seq, d = cfg_.hidden, tp = ctx_.tp_size();
  std::int64_t extra = 6 * n * d + 3 * n * (2 * tp + 1) + n * (2 * cfg_.ffn_hidden);
  // bf16 blocks widen their saved attention tensors back to fp32 for the attention backward
  // (nn/block_backward.cpp): a margin over the fp32 block's scratch.
  if (ctx_.bf16()) extra += n * (cfg_.ffn_hidden + 2 * d);
  return nn::model_arena_bytes(c, micro_batch, local_seq, recompute_, sizeof(T)) +
         extra * static_cast<std::int64_t>(sizeof(T)) + 64 * 64;
}

template class DistributedStage<float>;
template class DistributedStage<double>;

}  // namespace herd::parallel

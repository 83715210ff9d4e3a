// DistributedLlama: layout of the TP-local units, full <-> sharded weights, the step's forward and
// backward with FSDP gathers and TP collectives, and the sharded optimizer step (see model.h).
#include "herd/parallel/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "herd/kernels/rmsnorm.h"
#include "herd/model/activations.h"

namespace herd::parallel {

Status validate_layout(const model::LlamaConfig& cfg, const topology::ParallelDims& dims, std::int64_t world_size,
                       std::int64_t global_batch, std::int64_t seq_len, bool sequence_parallel) {
  const std::int64_t tp = dims.tp(), dp = dims.dp();
  if (dims.world() != world_size) {
    return make_error("layout ", dims.to_string(), " needs ", dims.world(), " ranks but the job has ", world_size,
                      "; choose --tp x --dp equal to the number of ranks");
  }
  auto need = [&](std::int64_t value, const char* what, std::int64_t by, const char* axis) -> Status {
    if (value % by == 0) return Status::Ok();
    return make_error(what, " (", value, ") is not divisible by ", axis, " (", by, "); choose a ", axis,
                      " that divides it");
  };
  HERD_RETURN_IF_ERROR(need(cfg.n_heads, "num_attention_heads", tp, "tp"));
  HERD_RETURN_IF_ERROR(need(cfg.n_kv_heads, "num_key_value_heads", tp, "tp"));
  HERD_RETURN_IF_ERROR(need(cfg.ffn_hidden, "intermediate_size", tp, "tp"));
  HERD_RETURN_IF_ERROR(need(cfg.vocab, "vocab_size", tp, "tp"));
  HERD_RETURN_IF_ERROR(need(global_batch, "global batch (sequences per step)", dp, "dp"));
  if (sequence_parallel) HERD_RETURN_IF_ERROR(need(seq_len, "seq_len (with sequence parallelism)", tp, "tp"));
  return Status::Ok();
}

Result<std::int64_t> global_real_tokens(const ParallelContext& ctx, std::int64_t local_count) {
  std::int64_t n = local_count;
  if (ctx.cp && ctx.cp_size() > 1) HERD_RETURN_IF_ERROR(ctx.cp->all_reduce<std::int64_t>(&n, 1, comm::ReduceOp::kSum));
  if (ctx.dp) HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<std::int64_t>(&n, 1, comm::ReduceOp::kSum));
  return n;
}

namespace {

std::size_t bytes_of(std::int64_t n, std::size_t elem) { return static_cast<std::size_t>(n) * elem; }

// Copies this TP rank's slice of a full (rows, cols) weight to `local`, or (to_full) back.
template <typename T>
void tp_slice(const ShardedParam& p, int tp, int r, const T* full, T* local) {
  const std::int64_t R = p.full.rows, C = p.full.cols;
  switch (p.split) {
    case TpSplit::kReplicated: std::memcpy(local, full, bytes_of(R * C, sizeof(T))); break;
    case TpSplit::kRows: std::memcpy(local, full + r * (R / tp) * C, bytes_of((R / tp) * C, sizeof(T))); break;
    case TpSplit::kCols:
      for (std::int64_t i = 0; i < R; ++i) {
        std::memcpy(local + i * (C / tp), full + i * C + r * (C / tp), bytes_of(C / tp, sizeof(T)));
      }
      break;
  }
}

// Inverse over all ranks: `gathered` holds the tp local slices back to back.
template <typename T>
void tp_unslice(const ShardedParam& p, int tp, const T* gathered, T* full) {
  const std::int64_t R = p.full.rows, C = p.full.cols;
  if (p.split == TpSplit::kReplicated) {
    std::memcpy(full, gathered, bytes_of(R * C, sizeof(T)));  // rank 0's copy
    return;
  }
  for (int r = 0; r < tp; ++r) {
    const T* src = gathered + r * p.local_count;
    if (p.split == TpSplit::kRows) {
      std::memcpy(full + r * (R / tp) * C, src, bytes_of(p.local_count, sizeof(T)));
    } else {
      for (std::int64_t i = 0; i < R; ++i) {
        std::memcpy(full + i * C + r * (C / tp), src + i * (C / tp), bytes_of(C / tp, sizeof(T)));
      }
    }
  }
}

}  // namespace

template <typename T>
DistributedLlama<T>::DistributedLlama(const model::LlamaConfig& cfg, const ParallelContext& ctx,
                                      model::Recompute recompute, std::int64_t micro_batch, std::int64_t seq_len)
    : cfg_(cfg), ctx_(ctx), recompute_(recompute), max_rows_(micro_batch * seq_len), max_seq_(seq_len) {
  HERD_CHECK(ctx.tp && ctx.dp, "DistributedLlama needs the tp and dp communicators");
  HERD_CHECK(ctx.cp_size() == 1 && ctx.pp_size() == 1, "DistributedLlama covers tp x dp; got ", ctx.dims.to_string());
  const Status valid = validate_layout(cfg, ctx.dims, ctx.dims.world(), ctx.dp_size(), seq_len, ctx.sequence_parallel);
  HERD_CHECK(valid.ok(), valid.error().message());
  const int tp = ctx.tp_size();
  Result<nn::LayerSizes> local = nn::layer_sizes(cfg, tp);
  Result<nn::LayerSizes> full = nn::layer_sizes(cfg, 1);
  HERD_CHECK(local.ok(), local.error().message());
  local_ = *local;
  vocab_ = tp::vocab_shard(cfg.vocab, tp, ctx.tp_rank());
  tpc_ = std::make_unique<tp::TpCollectives<T>>(*ctx.tp, ctx.sequence_parallel);
  const std::int64_t d = cfg.hidden, V = cfg.vocab;

  // The full layout is nn::LlamaModel's; each weight also gets its place in this rank's unit.
  std::int64_t off = 0;
  auto add = [&](const std::string& name, std::int64_t rows, std::int64_t cols, int unit, std::int64_t local_off,
                 TpSplit split) {
    const std::int64_t local_count = split == TpSplit::kReplicated ? rows * cols : rows * cols / tp;
    params_.push_back({{name, off, rows, cols}, unit, local_off, split, local_count});
    off += rows * cols;
  };
  auto add_unit = [&](const std::string& name, std::int64_t count) {
    units_.push_back(std::make_unique<fsdp::FlatUnit<T>>(name, count, *ctx.dp));
    norm_ranges_.emplace_back();
  };
  add("tok_embedding", V, d, 0, 0, TpSplit::kRows);
  add_unit("embedding", vocab_.rows * d);
  const nn::LayerLayout L(local_);
  for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const int u = static_cast<int>(l) + 1;
    const nn::LayerSizes& s = *full;
    add(p + "attn_norm", d, 1, u, L.attn_norm, TpSplit::kReplicated);
    add(p + "wq", s.q_dim(), d, u, L.wq, TpSplit::kRows);
    add(p + "wk", s.kv_dim(), d, u, L.wk, TpSplit::kRows);
    add(p + "wv", s.kv_dim(), d, u, L.wv, TpSplit::kRows);
    add(p + "wo", d, s.q_dim(), u, L.wo, TpSplit::kCols);
    add(p + "mlp_norm", d, 1, u, L.mlp_norm, TpSplit::kReplicated);
    add(p + "w_gate", s.ffn, d, u, L.w_gate, TpSplit::kRows);
    add(p + "w_up", s.ffn, d, u, L.w_up, TpSplit::kRows);
    add(p + "w_down", d, s.ffn, u, L.w_down, TpSplit::kCols);
    add_unit("layers." + std::to_string(l), L.total);
    norm_ranges_.back() = {{L.attn_norm, L.attn_norm + d}, {L.mlp_norm, L.mlp_norm + d}};
    blocks_.emplace_back(local_, recompute, p);
  }
  const int head = static_cast<int>(cfg.n_layers) + 1;
  add("final_norm", d, 1, head, 0, TpSplit::kReplicated);
  add("output", V, d, head, d, TpSplit::kRows);
  add_unit("head", d + vocab_.rows * d);
  norm_ranges_.back() = {{0, d}};
  full_count_ = off;
  for (nn::TransformerBlock<T>& b : blocks_) b.set_tensor_parallel(tpc_.get());
  for (auto& u : units_) {
    m_.push_back(aligned_array<T>(static_cast<std::size_t>(u->shard_size())));
    v_.push_back(aligned_array<T>(static_cast<std::size_t>(u->shard_size())));
    std::memset(m_.back().get(), 0, bytes_of(u->shard_size(), sizeof(T)));
    std::memset(v_.back().get(), 0, bytes_of(u->shard_size(), sizeof(T)));
  }

  const kernels::RopeConfig rc = nn::rope_config(cfg);
  rope_ = std::make_unique<kernels::RopeTable<T>>(rc, cfg.max_seq_len);
  // The single-rank arena bounds every local saved set; the TP collectives add full-row (N, d)
  // gather/partial buffers and the vocab-parallel loss statistics.
  const std::int64_t n = max_rows_;
  const std::int64_t extra = 6 * n * d + 3 * n * (2 * tp + 1) + n * (2 * cfg.ffn_hidden);
  arena_ = std::make_unique<tensor::Arena>(static_cast<std::size_t>(
      nn::model_arena_bytes(cfg, micro_batch, seq_len, recompute, sizeof(T)) + extra * sizeof(T) + 64 * 64));
}

template <typename T>
DistributedLlama<T>::~DistributedLlama() = default;

template <typename T>
void DistributedLlama<T>::init_weights(std::uint64_t seed) {
  // Built full once (only the parameter buffer; micro-batch 1 of 1 token keeps the arena tiny), so the
  // gathered weights equal the single-rank model's bit for bit.
  nn::LlamaModel<T> full(cfg_, model::Recompute::kFull, 1, 1);
  full.init_weights(seed);
  load_full(full.params());
}

template <typename T>
void DistributedLlama<T>::load_full(const T* full) {
  const int tp = ctx_.tp_size(), r = ctx_.tp_rank();
  std::vector<std::vector<T>> local(units_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) local[u].assign(static_cast<std::size_t>(units_[u]->count()), T(0));
  for (const ShardedParam& p : params_) {
    tp_slice<T>(p, tp, r, full + p.full.offset, local[static_cast<std::size_t>(p.unit)].data() + p.local_offset);
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    T* shard = unit.shard_params();
    for (std::int64_t i = 0; i < unit.shard_size(); ++i) {
      const std::int64_t j = unit.shard_begin() + i;
      shard[i] = j < unit.count() ? local[u][static_cast<std::size_t>(j)] : T(0);  // padding stays zero
    }
  }
}

template <typename T>
Result<std::vector<T>> DistributedLlama<T>::gather_full(bool grads) {
  const int tp = ctx_.tp_size();
  const comm::ElemType et = comm::elem_type_of<T>();
  std::vector<std::vector<T>> local(units_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    local[u].resize(static_cast<std::size_t>(unit.padded()));
    const T* src = grads ? unit.shard_grads() : unit.shard_params();
    HERD_RETURN_IF_ERROR(ctx_.dp->all_gather(src, local[u].data(), static_cast<std::size_t>(unit.shard_size()), et));
  }
  std::vector<T> full(static_cast<std::size_t>(full_count_));
  std::vector<T> all;
  for (const ShardedParam& p : params_) {
    all.resize(static_cast<std::size_t>(p.local_count * tp));
    const T* mine = local[static_cast<std::size_t>(p.unit)].data() + p.local_offset;
    HERD_RETURN_IF_ERROR(ctx_.tp->all_gather(mine, all.data(), static_cast<std::size_t>(p.local_count), et));
    tp_unslice<T>(p, tp, all.data(), full.data() + p.full.offset);
  }
  return full;
}

template <typename T>
void DistributedLlama<T>::zero_grads() {
  for (auto& u : units_) u->zero_grads();
}

template <typename T>
Status DistributedLlama<T>::finish_unit(std::size_t u) {
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
Result<kernels::CrossEntropyLoss> DistributedLlama<T>::forward_backward(const nn::MicroBatch& mb, T loss_scale,
                                                                        bool last_micro_batch) {
  HERD_CHECK(mb.rows() <= max_rows_ && mb.seq_len <= max_seq_, "micro-batch (", mb.batch, ", ", mb.seq_len,
             ") exceeds the model's sizing");
  const std::int64_t n = mb.rows(), d = cfg_.hidden;
  const std::int64_t nl = tpc_->local_rows(n);
  HERD_CHECK(nl * tpc_->size() == n || !ctx_.sequence_parallel, "rows ", n, " not divisible by tp");
  const bool reshard = ctx_.reshard_after_forward;
  const std::size_t head = units_.size() - 1;
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  auto* ids = a.allocate_array<std::int32_t>(n, "embedding.ids");
  std::memcpy(ids, mb.tokens, bytes_of(n, sizeof(std::int32_t)));
  T* x = a.allocate_array<T>(nl * d, "residual");        // (n_loc, d)
  T* dx = a.allocate_array<T>(nl * d, "residual.grad");  // (n_loc, d)

  // Forward: gather unit u (prefetched during u - 1), post the gather of u + 1, compute u.
  HERD_RETURN_IF_ERROR(units_[0]->wait_gather());
  units_[1]->begin_gather();
  {
    const tensor::Arena::Mark m = a.mark();
    T* full = a.allocate_array<T>(n * d, "scratch");
    tp::vocab_embedding_forward<T>(*tpc_, mb.tokens, n, units_[0]->full_params(), vocab_, d, full, x);
    a.reset(m);
  }
  if (reshard) units_[0]->release();
  std::vector<nn::BlockState<T>> states;
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    fsdp::FlatUnit<T>& unit = *units_[l + 1];
    HERD_RETURN_IF_ERROR(unit.wait_gather());
    units_[l + 2]->begin_gather();
    blocks_[l].bind(unit.full_params(), unit.full_grads());
    states.push_back(blocks_[l].forward(a, mb, *rope_, x));
    if (reshard) unit.release();
  }

  // Head: final norm on this rank's rows, vocab-parallel loss over all rows, backward to dx.
  fsdp::FlatUnit<T>& hu = *units_[head];
  HERD_RETURN_IF_ERROR(hu.wait_gather());
  if (reshard) units_[head - 1]->begin_gather();  // the first unit of the backward
  kernels::CrossEntropyLoss loss;
  {
    const tensor::Arena::Mark m = a.mark();
    T* fin_in = a.allocate_array<T>(nl * d, "final_norm.input");
    T* rstd = a.allocate_array<T>(nl, "final_norm.rstd");
    T* fin_out = a.allocate_array<T>(nl * d, "final_norm.output");
    T* lse = a.allocate_array<T>(n, "loss.lse");
    auto* targets = a.allocate_array<std::int32_t>(n, "loss.targets");
    std::memcpy(fin_in, x, bytes_of(nl * d, sizeof(T)));
    std::memcpy(targets, mb.targets, bytes_of(n, sizeof(std::int32_t)));
    const T* w_fn = hu.full_params();
    T* g_fn = hu.full_grads();
    kernels::rmsnorm_forward<T>(fin_in, d, w_fn, nl, d, cfg_.norm_eps, fin_out, d, rstd);
    T* h = a.allocate_array<T>(n * d, "scratch");  // (N, d) all rows
    tpc_->gather(fin_out, h, n, d);
    T* dh = a.allocate_array<T>(n * d, "scratch");  // (N, d) partial over TP
    std::memset(dh, 0, bytes_of(n * d, sizeof(T)));
    T* stats = a.allocate_array<T>(3 * n * (2 * tpc_->size() + 1), "scratch");
    loss = tp::vocab_cross_entropy<T>(*tpc_, h, n, d, w_fn + d, vocab_, targets, loss_scale, lse, dh, g_fn + d, stats);
    T* dh_local = a.allocate_array<T>(nl * d, "scratch");
    tpc_->reduce(dh, dh_local, n, d);
    kernels::rmsnorm_backward<T>(dh_local, d, fin_in, d, w_fn, rstd, nl, d, dx, d, kernels::Accumulate::kOverwrite,
                                 g_fn);
    a.reset(m);
  }
  if (last_micro_batch) HERD_RETURN_IF_ERROR(finish_unit(head));
  hu.release();

  // Backward: unit u gathered again when resharded (prefetching u - 1), its gradient reduce-scattered
  // after the step's last micro-batch, its parameters released.
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    fsdp::FlatUnit<T>& unit = *units_[l + 1];
    HERD_RETURN_IF_ERROR(unit.wait_gather());
    if (reshard) units_[l]->begin_gather();
    blocks_[l].bind(unit.full_params(), unit.full_grads());
    blocks_[l].backward(a, mb, *rope_, states[l], dx);
    HERD_RETURN_IF_ERROR(tpc_->status());
    if (last_micro_batch) HERD_RETURN_IF_ERROR(finish_unit(l + 1));
    unit.release();
  }
  HERD_RETURN_IF_ERROR(units_[0]->wait_gather());
  {
    const tensor::Arena::Mark m = a.mark();
    T* full = a.allocate_array<T>(n * d, "scratch");
    tp::vocab_embedding_backward<T>(*tpc_, ids, n, dx, vocab_, d, full, units_[0]->full_grads());
    a.reset(m);
  }
  HERD_RETURN_IF_ERROR(tpc_->status());
  if (last_micro_batch) HERD_RETURN_IF_ERROR(finish_unit(0));
  units_[0]->release();
  a.reset(start);
  for (auto& u : units_) HERD_RETURN_IF_ERROR(u->wait_grads());
  return loss;
}

template <typename T>
double DistributedLlama<T>::counted_sum_squares(std::size_t u) const {
  const fsdp::FlatUnit<T>& unit = *units_[u];
  const T* g = unit.shard_grads();
  const std::int64_t b = unit.shard_begin(), e = b + unit.shard_size();
  if (ctx_.tp_rank() == 0) return kernels::sum_squares<T>(g, unit.shard_size());
  // Replicated norm weights are counted on TP rank 0 only.
  double s = 0;
  std::int64_t pos = b;
  for (const auto& [nb, ne] : norm_ranges_[u]) {
    const std::int64_t cut_b = std::clamp(nb, b, e), cut_e = std::clamp(ne, b, e);
    if (cut_b > pos) s += kernels::sum_squares<T>(g + (pos - b), cut_b - pos);
    pos = std::max(pos, cut_e);
  }
  if (e > pos) s += kernels::sum_squares<T>(g + (pos - b), e - pos);
  return s;
}

template <typename T>
Result<double> DistributedLlama<T>::step(const kernels::AdamWConfig& base, double lr, double max_norm) {
  double sq = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) sq += counted_sum_squares(u);
  HERD_RETURN_IF_ERROR(ctx_.tp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
  HERD_RETURN_IF_ERROR(ctx_.dp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
  const double norm = std::sqrt(sq);
  kernels::AdamWConfig cfg = base;
  cfg.lr = lr;
  ++step_;
  const double c = max_norm > 0 ? kernels::clip_coefficient(norm, max_norm) : 1.0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    fsdp::FlatUnit<T>& unit = *units_[u];
    if (c < 1.0) kernels::scale_buffer<T>(unit.shard_grads(), unit.shard_size(), static_cast<T>(c));
    kernels::adamw_step<T>(unit.shard_params(), unit.shard_grads(), m_[u].get(), v_[u].get(), unit.shard_size(), cfg,
                           step_);
  }
  return norm;
}

template class DistributedLlama<float>;
template class DistributedLlama<double>;

}  // namespace herd::parallel

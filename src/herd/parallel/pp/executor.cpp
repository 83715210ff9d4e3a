// PipelineExecutor (executor.h): the interpreter of one rank's schedule action list.
#include "herd/parallel/pp/executor.h"

#include <algorithm>
#include <cstring>

#include "herd/comm/types.h"
#include "herd/core/check.h"

namespace herd::parallel::pp {

namespace {

using schedule::Action;
using schedule::ActionType;

// Outside the range p2p_tag hands out to the step's traffic.
constexpr int kHandshakeTag = 32767;

bool is_compute(ActionType t) { return t == ActionType::kForward || t == ActionType::kBackward; }
bool is_recv(ActionType t) { return t == ActionType::kRecvActivation || t == ActionType::kRecvGrad; }

}  // namespace

template <typename T>
Result<std::unique_ptr<PipelineExecutor<T>>> PipelineExecutor<T>::make(comm::Communicator* pp,
                                                                       const model::LlamaConfig& cfg, PipelinePlan plan,
                                                                       std::vector<Stage> chunks,
                                                                       const ExecutorOptions& options) {
  const schedule::ScheduleSpec& spec = plan.schedule.spec;
  if (pp == nullptr || pp->size() != spec.pp) {
    return make_error("pp (", spec.pp, ") must equal the pipeline group's size (", pp ? pp->size() : 0, ")");
  }
  if (static_cast<int>(chunks.size()) != spec.v) {
    return make_error("a pipeline rank of v = ", spec.v, " holds ", spec.v, " chunks, not ", chunks.size());
  }
  if (options.seq_len < 1 || options.seq_len > cfg.max_seq_len || options.micro_batch < 1) {
    return make_error("micro-batch shape (", options.micro_batch, ", ", options.seq_len,
                      ") must be positive with seq_len at most max_seq_len (", cfg.max_seq_len, ")");
  }
  if (options.recv_lookahead < 0) return make_error("recv_lookahead (", options.recv_lookahead, ") must be >= 0");
  std::unique_ptr<PipelineExecutor> ex(new PipelineExecutor(pp, cfg, std::move(plan), std::move(chunks), options));
  if (spec.pp > 1) HERD_RETURN_IF_ERROR(ex->open_channels());
  return ex;
}

template <typename T>
PipelineExecutor<T>::PipelineExecutor(comm::Communicator* pp, const model::LlamaConfig& cfg, PipelinePlan plan,
                                      std::vector<Stage> chunks, const ExecutorOptions& options)
    : comm_(pp),
      cfg_(cfg),
      plan_(std::move(plan)),
      opt_(options),
      rank_(pp->rank()),
      pp_(plan_.schedule.spec.pp),
      v_(plan_.schedule.spec.v),
      chunks_(std::move(chunks)) {
  std::int64_t slot_bytes = 0;
  for (const Stage& c : chunks_) slot_bytes = std::max(slot_bytes, c.slot_bytes(opt_.micro_batch, opt_.seq_len));
  // The step's last backward of each chunk: where its FSDP units reduce-scatter.
  last_backward_.assign(static_cast<std::size_t>(v_), 0);
  const std::vector<Action>& acts = plan_.schedule.ranks[static_cast<std::size_t>(rank_)];
  for (std::size_t i = 0; i < acts.size(); ++i) {
    if (acts[i].type == ActionType::kBackward) last_backward_[static_cast<std::size_t>(acts[i].stage / pp_)] = i;
  }
  chunk_saved_.assign(static_cast<std::size_t>(v_), 0);
  // The checker's peak in-flight count is exactly how many slots this rank's list ever holds.
  const int n_slots = plan_.check.peak_inflight[static_cast<std::size_t>(rank_)];
  for (int i = 0; i < n_slots; ++i) {
    const std::size_t bytes = tensor::Arena::round_up(static_cast<std::size_t>(slot_bytes));
    slot_memory_.emplace_back(chunks_.front().ops(), bytes);
    slots_.push_back(std::make_unique<tensor::Arena>(slot_memory_.back().data(), bytes));
    free_slots_.push_back(n_slots - 1 - i);
  }
}

template <typename T>
Status PipelineExecutor<T>::open_channels() {
  // Ring neighbours (stage s on rank s % PP sends to s + 1 on the next rank, gradients go back).
  const int next = (rank_ + 1) % pp_, prev = (rank_ + pp_ - 1) % pp_;
  std::int32_t out[2] = {rank_, rank_}, in[2] = {-1, -1};
  std::vector<comm::Handle> h;
  h.push_back(comm_->irecv(&in[0], 1, DType::kI32, prev, kHandshakeTag));
  h.push_back(comm_->irecv(&in[1], 1, DType::kI32, next, kHandshakeTag));
  h.push_back(comm_->isend(&out[0], 1, DType::kI32, next, kHandshakeTag));
  h.push_back(comm_->isend(&out[1], 1, DType::kI32, prev, kHandshakeTag));
  HERD_RETURN_IF_ERROR(comm::wait_all(h));
  HERD_CHECK(in[0] == prev && in[1] == next, "pipeline handshake got ranks ", in[0], ", ", in[1]);
  return Status::Ok();
}

template <typename T>
void PipelineExecutor<T>::zero_grads() {
  for (Stage& c : chunks_) c.zero_grads();
}

template <typename T>
T* PipelineExecutor<T>::acquire_buffer() {
  if (free_buffers_.empty()) {
    buffers_.push_back(kernels::array_of<T>(chunks_.front().ops(), opt_.micro_batch * opt_.seq_len * cfg_.hidden));
    return buffers_.back().as<T>();
  }
  T* b = free_buffers_.back();
  free_buffers_.pop_back();
  return b;
}

template <typename T>
void PipelineExecutor<T>::release_buffer(T* b) {
  HERD_CHECK(b != nullptr, "releasing a null boundary buffer");
  free_buffers_.push_back(b);
}

template <typename T>
std::vector<nn::MicroBatch> PipelineExecutor<T>::on_device(const std::vector<nn::MicroBatch>& mbs) {
  const kernels::Ops& ops = chunks_.front().ops();
  if (ops.device() == kernels::Device::kCpu) return mbs;  // the host's arrays are the device's
  std::int64_t count = 0;
  for (const nn::MicroBatch& mb : mbs) count += mb.rows() * (mb.doc_ids != nullptr ? 2 : 1);
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(std::int32_t);
  if (batch_meta_.bytes() < bytes) batch_meta_ = kernels::Buffer(ops, bytes);
  std::int32_t* at = batch_meta_.as<std::int32_t>();
  std::vector<nn::MicroBatch> out = mbs;
  auto put = [&](const std::int32_t*& p, std::int64_t n) {
    if (p == nullptr) return;
    ops.copy_from_host(p, at, static_cast<std::size_t>(n) * sizeof(std::int32_t));
    p = at;
    at += n;
  };
  for (nn::MicroBatch& mb : out) {
    put(mb.positions, mb.rows());
    put(mb.doc_ids, mb.rows());
  }
  return out;
}

// One step's state: per (micro-batch, chunk) its arena slot, saved state and the boundary buffers in
// use, and what the step reports.
template <typename T>
struct PipelineExecutor<T>::StepRun {
  struct Flight {
    int slot = -1;
    typename Stage::State state;
    T* x = nullptr;   // input, then (in place) output activation
    T* dy = nullptr;  // output gradient, then (in place) input gradient
  };
  const std::vector<nn::MicroBatch>& mbs;
  T loss_scale;
  std::vector<Flight> flights;
  StepStats stats;
  std::int64_t held = 0;  // activation bytes saved for the backwards still to run
  double loss_sum = 0;
  Flight& flight(const Action& a, int pp, int v) {
    return flights[static_cast<std::size_t>(a.microbatch * v + a.stage / pp)];
  }
};

template <typename T>
Status PipelineExecutor<T>::forward_action(StepRun& run, const Action& a) {
  typename StepRun::Flight& f = run.flight(a, pp_, v_);
  Stage& chunk = chunks_[static_cast<std::size_t>(a.stage / pp_)];
  const nn::MicroBatch& mb = run.mbs[static_cast<std::size_t>(a.microbatch)];
  StepStats& stats = run.stats;
  if (chunk.first()) f.x = acquire_buffer();
  HERD_CHECK(f.x != nullptr && f.slot < 0, "forward of micro-batch ", a.microbatch, " stage ", a.stage,
             " without its input");
  HERD_CHECK(!free_slots_.empty(), "more micro-batches in flight than the checker's peak");
  f.slot = free_slots_.back();
  free_slots_.pop_back();
  tensor::Arena& slot = *slots_[static_cast<std::size_t>(f.slot)];
  slot.reset_peak();
  // The last chunk runs its head's backward in the forward (the loss scale is known): the
  // logits are computed once, and x comes back as dLoss/dx for the chunk's backward.
  HERD_ASSIGN_OR_RETURN(f.state, chunk.forward(slot, mb, f.x, run.loss_scale, /*fuse_head=*/true));
  stats.peak_working_bytes = std::max(stats.peak_working_bytes, run.held + static_cast<std::int64_t>(slot.peak()));
  const std::int64_t saved = static_cast<std::int64_t>(slot.used());
  chunk_saved_[static_cast<std::size_t>(a.stage / pp_)] = saved;
  run.held += saved;
  stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, run.held);
  stats.peak_slots = std::max(stats.peak_slots, static_cast<int>(slots_.size() - free_slots_.size()));
  if (chunk.last()) {
    run.loss_sum += f.state.loss.loss_sum;
    f.dy = f.x;  // dLoss/dx, the backward's input
    f.x = nullptr;
  }
  return Status::Ok();
}

template <typename T>
Status PipelineExecutor<T>::backward_action(StepRun& run, const Action& a, bool last_of_step) {
  typename StepRun::Flight& f = run.flight(a, pp_, v_);
  Stage& chunk = chunks_[static_cast<std::size_t>(a.stage / pp_)];
  const nn::MicroBatch& mb = run.mbs[static_cast<std::size_t>(a.microbatch)];
  StepStats& stats = run.stats;
  if (chunk.last() && f.dy == nullptr) f.dy = acquire_buffer();
  HERD_CHECK(f.dy != nullptr && f.slot >= 0, "backward of micro-batch ", a.microbatch, " stage ", a.stage,
             " without its forward or output gradient");
  tensor::Arena& slot = *slots_[static_cast<std::size_t>(f.slot)];
  run.held -= static_cast<std::int64_t>(slot.used());
  slot.reset_peak();
  HERD_RETURN_IF_ERROR(chunk.backward(slot, mb, f.state, run.loss_scale, f.dy, last_of_step));
  stats.peak_working_bytes = std::max(stats.peak_working_bytes, run.held + static_cast<std::int64_t>(slot.peak()));
  free_slots_.push_back(f.slot);
  f.slot = -1;
  if (chunk.first()) {
    release_buffer(f.dy);
    f.dy = nullptr;
  }
  return Status::Ok();
}

template <typename T>
Result<kernels::CrossEntropyLoss> PipelineExecutor<T>::forward_only(const nn::MicroBatch& mb, T* logits) {
  HERD_CHECK(pp_ == 1 && v_ == 1, "forward_only needs one chunk holding the whole model; this rank has pp = ", pp_,
             ", v = ", v_);
  if (mb.seq_len > opt_.seq_len || mb.rows() > opt_.micro_batch * opt_.seq_len) {
    return make_error("micro-batch (", mb.batch, ", ", mb.seq_len, ") exceeds the executor's sizing (",
                      opt_.micro_batch, ", ", opt_.seq_len, ")");
  }
  Stage& chunk = chunks_.front();
  HERD_RETURN_IF_ERROR(chunk.prepare_micro_batches({mb}));
  chunk.select_micro_batch(0);
  tensor::Arena& slot = *slots_.front();
  const tensor::Arena::Mark start = slot.mark();
  T* x = acquire_buffer();
  const nn::MicroBatch device_mb = on_device({mb}).front();
  // Without fusing the head, the forward computes the loss only (no gradient GEMMs).
  Result<typename Stage::State> st = chunk.forward(slot, device_mb, x, T(0), /*fuse_head=*/false);
  if (st.ok() && logits != nullptr) chunk.head_logits(slot, mb.rows(), *st, logits);
  slot.reset(start);
  release_buffer(x);
  // What a backward would have released: the units this forward gathered.
  for (std::int64_t u = 0; u < chunk.unit_count(); ++u) chunk.unit(u).release();
  if (!st.ok()) return st.error();
  return st->loss;
}

template <typename T>
Result<StepStats> PipelineExecutor<T>::step(const std::vector<nn::MicroBatch>& mbs, std::optional<T> external_scale) {
  const schedule::ScheduleSpec& spec = plan_.schedule.spec;
  const int n_st = pp_ * v_;
  if (static_cast<int>(mbs.size()) != spec.microbatches) {
    return make_error("step got ", mbs.size(), " micro-batches; the schedule has microbatches = ", spec.microbatches);
  }
  for (const nn::MicroBatch& mb : mbs) {
    if (mb.seq_len > opt_.seq_len || mb.rows() > opt_.micro_batch * opt_.seq_len) {
      return make_error("micro-batch (", mb.batch, ", ", mb.seq_len, ") exceeds the executor's sizing (",
                        opt_.micro_batch, ", ", opt_.seq_len, ")");
    }
  }
  std::int64_t tokens = 0;
  if (chunks_.back().last()) {
    for (const nn::MicroBatch& mb : mbs) {
      tokens += std::count_if(mb.targets, mb.targets + mb.rows(), [](std::int32_t t) { return t >= 0; });
    }
  }
  const T loss_scale = external_scale ? *external_scale : tokens > 0 ? T(1) / static_cast<T>(tokens) : T(0);
  HERD_RETURN_IF_ERROR(chunks_.front().prepare_micro_batches(mbs));  // CP masks, shared by the chunks
  const std::vector<nn::MicroBatch> device_mbs = on_device(mbs);

  StepRun run{device_mbs,
              loss_scale,
              std::vector<typename StepRun::Flight>(static_cast<std::size_t>(spec.microbatches * v_)),
              {}};
  auto flight = [&](const Action& a) -> typename StepRun::Flight& { return run.flight(a, pp_, v_); };
  auto tag = [&](int m, int stage, bool backward) { return comm::p2p_tag(m, stage, backward, n_st).value(); };
  // Elements crossing a boundary for micro-batch m: its local (n_loc, d) rows (buffers are sized for the largest).
  auto count = [&](int m) {
    return static_cast<std::size_t>(chunks_.front().boundary_rows(mbs[static_cast<std::size_t>(m)].rows()) *
                                    cfg_.hidden);
  };
  const DType et = dtype_of<T>();

  const std::vector<Action>& acts = plan_.schedule.ranks[static_cast<std::size_t>(rank_)];
  const std::size_t n_act = acts.size();
  // horizon[i]: receives before this index are posted before action i runs.
  std::vector<std::size_t> horizon(n_act);
  for (std::size_t i = 0; i < n_act; ++i) {
    std::size_t j = i;
    int computes = 0;
    while (j < n_act && !(is_compute(acts[j].type) && computes++ == opt_.recv_lookahead)) ++j;
    horizon[i] = j;
  }
  std::vector<comm::Handle> recvs(n_act);
  std::size_t next_post = 0;
  struct PendingSend {
    comm::Handle h;
    T* buffer;
  };
  std::vector<PendingSend> sends;
  auto reap = [&](bool wait) -> Status {
    for (std::size_t k = 0; k < sends.size();) {
      if (wait || sends[k].h.test()) {
        HERD_RETURN_IF_ERROR(sends[k].h.wait());
        release_buffer(sends[k].buffer);
        sends[k] = sends.back();
        sends.pop_back();
      } else {
        ++k;
      }
    }
    return Status::Ok();
  };
  StepStats& stats = run.stats;
  stats.tokens = tokens;
  auto note_buffers = [&]() {
    const int live_buffers = static_cast<int>(buffers_.size() - free_buffers_.size());
    stats.peak_boundary_buffers = std::max(stats.peak_boundary_buffers, live_buffers);
  };

  for (std::size_t i = 0; i < n_act; ++i) {
    for (; next_post < horizon[i]; ++next_post) {
      const Action& r = acts[next_post];
      if (!is_recv(r.type)) continue;
      typename StepRun::Flight& f = flight(r);
      const bool bwd = r.type == ActionType::kRecvGrad;
      T*& buf = bwd ? f.dy : f.x;
      HERD_CHECK(buf == nullptr, "receive into a busy buffer at action ", next_post);
      buf = acquire_buffer();
      recvs[next_post] = comm_->irecv(buf, count(r.microbatch), et, r.peer, tag(r.microbatch, r.stage, bwd));
    }
    note_buffers();
    const Action& a = acts[i];
    typename StepRun::Flight& f = flight(a);
    if (is_compute(a.type)) chunks_[static_cast<std::size_t>(a.stage / pp_)].select_micro_batch(a.microbatch);
    switch (a.type) {
      case ActionType::kRecvActivation:
      case ActionType::kRecvGrad:
        HERD_RETURN_IF_ERROR(recvs[i].wait());
        recvs[i] = comm::Handle();
        break;
      case ActionType::kForward: HERD_RETURN_IF_ERROR(forward_action(run, a)); break;
      case ActionType::kSendActivation:
        HERD_CHECK(f.x != nullptr, "send of an activation that was not computed");
        sends.push_back(
            {comm_->isend(f.x, count(a.microbatch), et, a.peer, tag(a.microbatch, a.stage + 1, false)), f.x});
        f.x = nullptr;
        break;
      case ActionType::kBackward:
        HERD_RETURN_IF_ERROR(backward_action(run, a, i == last_backward_[static_cast<std::size_t>(a.stage / pp_)]));
        break;
      case ActionType::kSendGrad:
        HERD_CHECK(f.dy != nullptr, "send of a gradient that was not computed");
        sends.push_back(
            {comm_->isend(f.dy, count(a.microbatch), et, a.peer, tag(a.microbatch, a.stage - 1, true)), f.dy});
        f.dy = nullptr;
        break;
    }
    note_buffers();
    HERD_RETURN_IF_ERROR(reap(false));
  }
  HERD_RETURN_IF_ERROR(reap(true));
  for (Stage& c : chunks_) HERD_RETURN_IF_ERROR(c.wait_grads());
  HERD_CHECK(free_slots_.size() == slots_.size() && free_buffers_.size() == buffers_.size() && run.held == 0,
             "pipeline step ended with state in flight");

  // Every pipeline rank reports the step's loss: broadcast from the rank holding the last stage.
  double totals[2] = {run.loss_sum, static_cast<double>(stats.tokens)};
  if (pp_ > 1) HERD_RETURN_IF_ERROR(comm_->broadcast(totals, 2, DType::kF64, (n_st - 1) % pp_));
  stats.loss_sum = totals[0];
  stats.tokens = static_cast<std::int64_t>(totals[1]);
  return stats;
}

template class PipelineExecutor<float>;
template class PipelineExecutor<double>;

}  // namespace herd::parallel::pp

// Shared pieces of the pipeline tests: a tiny model, the single-rank reference run (nn::LlamaModel in
// double, AdamW over its flat buffer) and the same steps through a PipelineExecutor of production
// stages (DistributedStage at TP = CP = DP = 1) whose ranks run as threads on the local backend. Both start from the
// same seeded weights and see the same packed micro-batches (two documents per row, some ignored targets).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "herd/kernels/optim.h"
#include "herd/nn/model.h"
#include "herd/parallel/pp/executor.h"
#include "herd/parallel/rank_model.h"
#include "parallel/model_test_util.h"

namespace herd::parallel::pp::testing {

inline model::LlamaConfig pp_model(std::int64_t layers) {
  model::LlamaConfig c = parallel::testing::small_gqa_model();
  c.name = "pp";
  c.n_layers = layers;
  return c;
}

struct RunOutput {
  std::vector<double> losses;             // per step
  std::vector<double> grads;              // first step's gradients, full model layout
  std::vector<double> weights;            // after the last step's AdamW update
  std::vector<StepStats> stats;           // pipeline: per rank, last step
  std::vector<std::int64_t> chunk_saved;  // pipeline: saved bytes per virtual stage (measured)
};

struct RunSpec {
  std::int64_t rows_per_mb = 2;
  std::int64_t seq_len = 8;
  int steps = 2;
  model::Recompute recompute = model::Recompute::kSelective;
  std::uint64_t seed = 7;
  int recv_lookahead = 1;
  bool ragged = false;  // odd micro-batches one row shorter than the executor's sizing
};

inline std::vector<nn::MicroBatch> micro_batches(const parallel::testing::Batch& b, int m, const RunSpec& rs) {
  std::vector<nn::MicroBatch> out;
  std::int64_t first = 0;
  for (int i = 0; i < m; ++i) {
    const std::int64_t rows = rs.ragged && i % 2 == 1 ? rs.rows_per_mb - 1 : rs.rows_per_mb;
    out.push_back(b.rows(first, rows));
    first += rows;
  }
  return out;
}

inline std::int64_t real_tokens(const std::vector<nn::MicroBatch>& mbs) {
  std::int64_t n = 0;
  for (const nn::MicroBatch& mb : mbs)
    n += std::count_if(mb.targets, mb.targets + mb.rows(), [](int t) { return t >= 0; });
  return n;
}

inline kernels::AdamWConfig test_adamw() {
  kernels::AdamWConfig a;
  a.lr = 1e-2;
  return a;
}

// The single-rank model: every micro-batch of a step accumulates into one gradient buffer with
// loss_scale = 1 / real tokens of the step.
template <typename T = double>
RunOutput run_reference(const model::LlamaConfig& cfg, int m, const RunSpec& rs) {
  nn::LlamaModel<T> ref(cfg, rs.recompute, rs.rows_per_mb, rs.seq_len);
  ref.init_weights(rs.seed);
  const std::size_t n = static_cast<std::size_t>(ref.param_count());
  std::vector<T> mom(n, T(0)), var(n, T(0));
  RunOutput out;
  for (int step = 0; step < rs.steps; ++step) {
    const parallel::testing::Batch b = parallel::testing::make_batch(m * rs.rows_per_mb, rs.seq_len, cfg.vocab,
                                                                     100u + static_cast<std::uint32_t>(step));
    ref.zero_grads();
    const std::vector<nn::MicroBatch> mbs = micro_batches(b, m, rs);
    const double scale = 1.0 / static_cast<double>(real_tokens(mbs));
    double sum = 0;
    for (const nn::MicroBatch& mb : mbs) sum += ref.forward_backward(mb, static_cast<T>(scale)).loss_sum;
    out.losses.push_back(sum * scale);
    if (step == 0) out.grads.assign(ref.grads(), ref.grads() + n);
    kernels::adamw_step<T>(ref.params(), ref.grads(), mom.data(), var.data(), ref.param_count(), test_adamw(),
                           step + 1);
  }
  out.weights.assign(ref.params(), ref.params() + n);
  return out;
}

// Copies a chunk's weights (or reduced gradients) into the full-layout doubles: only its own entries.
template <typename T>
Status to_double(DistributedStage<T>& ch, bool grads, std::size_t n, std::vector<double>& full) {
  std::vector<T> mine(n, T(0));
  HERD_RETURN_IF_ERROR(ch.gather_full(grads, mine.data()));
  for (const ShardedParam& p : ch.params()) {
    for (std::int64_t i = p.w.offset; i < p.w.offset + p.w.count(); ++i) {
      full[static_cast<std::size_t>(i)] = static_cast<double>(mine[static_cast<std::size_t>(i)]);
    }
  }
  return Status::Ok();
}

// The same steps through the pipeline of production stages (DistributedStage at TP = CP = DP = 1);
// each rank writes its own units into the full-layout outputs.
template <typename T = double>
RunOutput run_pipeline(const model::LlamaConfig& cfg, const schedule::ScheduleSpec& spec, const RunSpec& rs,
                       bool lighter_ends = true) {
  nn::LlamaModel<T> init(cfg, rs.recompute, rs.rows_per_mb, rs.seq_len);
  init.init_weights(rs.seed);
  const std::size_t n = static_cast<std::size_t>(init.param_count());
  RunOutput out;
  out.losses.assign(static_cast<std::size_t>(rs.steps), 0.0);
  out.grads.assign(n, 0.0);
  out.weights.assign(n, 0.0);
  out.stats.resize(static_cast<std::size_t>(spec.pp));
  out.chunk_saved.assign(static_cast<std::size_t>(spec.pp * spec.v), 0);
  const topology::ParallelDims dims = *topology::ParallelDims::make(1, 1, spec.pp, 1);
  comm::testing::run_ranks(static_cast<int>(dims.world()), [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    const ParallelContext ctx = groups->context();
    RankModelOptions opt;
    opt.micro_batch = rs.rows_per_mb;
    opt.seq_len = rs.seq_len;
    opt.recompute = rs.recompute;
    opt.schedule = spec;
    opt.lighter_ends = lighter_ends;
    opt.recv_lookahead = rs.recv_lookahead;
    HERD_ASSIGN_OR_RETURN(auto model, RankModel<T>::make(ctx, cfg, opt));
    PipelineExecutor<T>* ex = &model->executor();
    for (DistributedStage<T>& c : ex->chunks()) c.load_full(init.params());
    for (int step = 0; step < rs.steps; ++step) {
      const parallel::testing::Batch b = parallel::testing::make_batch(
          spec.microbatches * rs.rows_per_mb, rs.seq_len, cfg.vocab, 100u + static_cast<std::uint32_t>(step));
      ex->zero_grads();
      const std::vector<nn::MicroBatch> mbs = micro_batches(b, spec.microbatches, rs);
      HERD_ASSIGN_OR_RETURN(StepStats st, ex->step(mbs));
      COMM_EXPECT(st.tokens == real_tokens(mbs), "tokens ", st.tokens, " vs ", real_tokens(mbs));
      if (ex->pp_rank() == 0) out.losses[static_cast<std::size_t>(step)] = st.loss();
      out.stats[static_cast<std::size_t>(ex->pp_rank())] = st;
      for (DistributedStage<T>& ch : ex->chunks()) {
        if (step == 0) HERD_RETURN_IF_ERROR(to_double(ch, /*grads=*/true, n, out.grads));
        ch.adamw(test_adamw(), /*clip=*/1.0, step + 1);  // no clipping: AdamW over the (whole) shards
      }
    }
    for (std::size_t c = 0; c < ex->chunks().size(); ++c) {
      HERD_RETURN_IF_ERROR(to_double(ex->chunks()[c], /*grads=*/false, n, out.weights));
      out.chunk_saved[static_cast<std::size_t>(ex->pp_rank()) + c * static_cast<std::size_t>(spec.pp)] =
          ex->chunk_saved_bytes()[c];
    }
    return Status::Ok();
  });
  return out;
}

// Loss per step, every named gradient and every named weight within `tol` (relative to the
// parameter's largest entry).
inline void expect_parity(const model::LlamaConfig& cfg, const RunOutput& pipe, const RunOutput& ref, double tol,
                          const std::string& what) {
  nn::LlamaModel<double> layout(cfg, model::Recompute::kNone, 1, 2);
  ASSERT_EQ(pipe.losses.size(), ref.losses.size());
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_NEAR(pipe.losses[s], ref.losses[s], tol * std::abs(ref.losses[s])) << what << " step " << s;
  }
  for (const nn::NamedParam& p : layout.named_params()) {
    EXPECT_LT(parallel::testing::rel_diff(pipe.grads, ref.grads.data(), p), tol) << what << " grad " << p.name;
    EXPECT_LT(parallel::testing::rel_diff(pipe.weights, ref.weights.data(), p), tol) << what << " weight " << p.name;
  }
}

}  // namespace herd::parallel::pp::testing

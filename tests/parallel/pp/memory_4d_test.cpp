// Pipeline memory of the composed runtime: a TP2 x CP2 x PP2 pipeline of DistributedStages (8 ranks as
// threads). Each pipeline rank's measured peak of saved activations (the slot arenas' bytes after each
// forward) must be within 10% of schedule::simulate's prediction from model/activations.h with the
// shape's tp, sequence parallelism and cp: the slots hold exactly the listed TP/CP-local tensors. The
// step's loss is also checked against the single-rank model, so the measured run is a correct one.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "herd/model/activations.h"
#include "herd/nn/model.h"
#include "parallel/pp/pp_test_util.h"

namespace herd::parallel::pp::testing {
namespace {

using schedule::ScheduleKind;
using schedule::ScheduleSpec;

// This CP rank's rows of a batch: chunks r and 2 cp - 1 - r of every sequence (data::slice_batch's order).
parallel::testing::Batch cp_slice(const parallel::testing::Batch& g, int cp, int r) {
  parallel::testing::Batch s;
  s.seqs = g.seqs;
  s.t = g.t / cp;
  const std::int64_t c = g.t / (2 * cp);
  for (std::int64_t q = 0; q < g.seqs; ++q) {
    for (const std::int64_t chunk : {static_cast<std::int64_t>(r), static_cast<std::int64_t>(2 * cp - 1 - r)}) {
      const std::int64_t b = q * g.t + chunk * c;
      for (std::int64_t i = b; i < b + c; ++i) {
        const auto k = static_cast<std::size_t>(i);
        s.tokens.push_back(g.tokens[k]);
        s.targets.push_back(g.targets[k]);
        s.positions.push_back(g.positions[k]);
        s.doc_ids.push_back(g.doc_ids[k]);
      }
    }
  }
  return s;
}

struct Case {
  ScheduleSpec spec;
  model::Recompute recompute;
};

void run_case(const Case& c) {
  const model::LlamaConfig cfg = pp_model(8);
  constexpr int kTp = 2, kCp = 2;
  const std::int64_t rows = 2, seq = 16;
  const topology::ParallelDims dims = *topology::ParallelDims::make(kTp, kCp, c.spec.pp, 1);
  const Result<PipelinePlan> plan = plan_pipeline(cfg, c.spec);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  model::ActivationShape shape;
  shape.seq_len = seq;
  shape.micro_batch = rows;
  shape.dtype = DType::kF64;
  shape.tp = kTp;
  shape.sequence_parallel = true;
  shape.cp = kCp;
  shape.recompute = c.recompute;
  const std::vector<double> predicted = predicted_peak_activation_bytes(*plan, cfg, shape).value();
  const parallel::testing::Batch batch = parallel::testing::make_batch(c.spec.microbatches * rows, seq, cfg.vocab, 5);

  // The single-rank loss of the same step.
  nn::LlamaModel<double> ref(cfg, c.recompute, rows, seq);
  ref.init_weights(3);
  const double scale = 1.0 / static_cast<double>(batch.real_tokens());
  double ref_loss = 0;
  for (int m = 0; m < c.spec.microbatches; ++m)
    ref_loss += ref.forward_backward(batch.rows(m * rows, rows), scale).loss_sum;

  std::vector<std::int64_t> measured(static_cast<std::size_t>(c.spec.pp), 0);
  std::vector<double> loss(static_cast<std::size_t>(dims.world()), 0);
  comm::testing::run_ranks(static_cast<int>(dims.world()), [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    const ParallelContext ctx = groups->context(/*sequence_parallel=*/true);
    RankModelOptions opt;
    opt.micro_batch = rows;
    opt.seq_len = seq;  // the full length: each CP rank holds seq / cp of it
    opt.recompute = c.recompute;
    opt.schedule = c.spec;
    HERD_ASSIGN_OR_RETURN(auto model, RankModel<double>::make(ctx, cfg, opt));
    PipelineExecutor<double>* ex = &model->executor();
    for (DistributedStage<double>& ch : ex->chunks()) ch.load_full(ref.params());
    const parallel::testing::Batch local = cp_slice(batch, kCp, ctx.cp_rank());
    std::vector<nn::MicroBatch> mbs;
    for (int m = 0; m < c.spec.microbatches; ++m) mbs.push_back(local.rows(m * rows, rows));
    ex->zero_grads();
    HERD_ASSIGN_OR_RETURN(StepStats st, ex->step(mbs, scale));
    double sum = st.loss_sum;
    HERD_RETURN_IF_ERROR(ctx.cp->all_reduce(&sum, 1, comm::ReduceOp::kSum));
    loss[static_cast<std::size_t>(ctx.rank)] = sum;
    if (ctx.tp_rank() == 0 && ctx.cp_rank() == 0)
      measured[static_cast<std::size_t>(ctx.pp_rank())] = st.peak_activation_bytes;
    return Status::Ok();
  });
  for (double l : loss) EXPECT_NEAR(l, ref_loss, 1e-10 * ref_loss);
  for (int r = 0; r < c.spec.pp; ++r) {
    const double m = static_cast<double>(measured[static_cast<std::size_t>(r)]);
    const double p = predicted[static_cast<std::size_t>(r)];
    std::printf(
        "[ 4d memory ] tp2 cp2 pp=%d v=%d m=%d n=%d %s rank %d: measured %.0f bytes, simulated %.0f (%+.1f%%)\n",
        c.spec.pp, c.spec.v, c.spec.microbatches, c.spec.n, model::recompute_name(c.recompute), r, m, p,
        100.0 * (m - p) / p);
    EXPECT_NEAR(m, p, 0.1 * p) << "pipeline rank " << r;
  }
}

TEST(PipelineMemory4d, Tp2Cp2Pp2MeasuredPeakMatchesSimulator) {
  run_case({{2, 2, 4, 2, ScheduleKind::kFlexible}, model::Recompute::kSelective});
  run_case({{2, 1, 3, 2, ScheduleKind::kFlexible}, model::Recompute::kNone});
}

}  // namespace
}  // namespace herd::parallel::pp::testing

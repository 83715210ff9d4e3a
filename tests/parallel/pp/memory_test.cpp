// Pipeline memory and refusals.
//
// Memory: the executor's measured peak of saved activations per pipeline rank (its slot arenas' bytes
// after each forward; its working peak with the running pass's temporaries lies above it) against schedule::simulate's
// peak_activation_bytes given the per-stage bytes of model/activations.h; and the first-stage imbalance of the Llama 3
// paper (rank 0 holds the most micro-batches in flight) shown on an even layer split and reduced by the lighter first
// stage. Refusals: layouts the schedule checker or the layer split cannot run are errors of one line, with the numbers,
// before any rank starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "herd/model/activations.h"
#include "parallel/pp/pp_test_util.h"

namespace herd::parallel::pp::testing {
namespace {

using schedule::ScheduleKind;
using schedule::ScheduleSpec;

model::ActivationShape shape_of(const RunSpec& rs) {
  model::ActivationShape s;
  s.seq_len = rs.seq_len;
  s.micro_batch = rs.rows_per_mb;
  s.dtype = DType::kF64;
  s.tp = 1;
  s.sequence_parallel = false;
  s.cp = 1;
  s.recompute = rs.recompute;
  return s;
}

struct Measured {
  std::vector<double> predicted;
  std::vector<std::int64_t> measured;
};

Measured measure(const model::LlamaConfig& cfg, const ScheduleSpec& spec, bool lighter_ends, const RunSpec& rs) {
  Measured out;
  const Result<PipelinePlan> plan = plan_pipeline(cfg, spec, lighter_ends);
  EXPECT_TRUE(plan.ok());
  out.predicted = predicted_peak_activation_bytes(*plan, cfg, shape_of(rs)).value();
  const RunOutput run = run_pipeline(cfg, spec, rs, lighter_ends);
  const std::vector<double> stage = stage_activation_bytes(cfg, plan->layers, shape_of(rs));
  for (std::size_t s = 0; s < stage.size(); ++s) {
    // Per virtual stage, the slot holds exactly the listed tensors (plus 64-byte rounding).
    EXPECT_NEAR(static_cast<double>(run.chunk_saved[s]), stage[s], 0.1 * stage[s] + 1) << "stage " << s;
  }
  for (int r = 0; r < spec.pp; ++r) {
    const StepStats& st = run.stats[static_cast<std::size_t>(r)];
    out.measured.push_back(st.peak_activation_bytes);
    EXPECT_EQ(st.peak_slots, plan->check.peak_inflight[static_cast<std::size_t>(r)]) << "rank " << r;
    // Every pass allocates temporaries in its slot beyond what it saves: the working peak (other slots'
    // saved bytes + the running slot's peak) is above the saved peak.
    EXPECT_GT(st.peak_working_bytes, st.peak_activation_bytes) << "rank " << r;
    std::printf("[ pp memory ] %s pp=%d v=%d m=%d n=%d %s rank %d: measured %lld bytes, simulated %.0f\n",
                schedule::schedule_kind_name(spec.kind), spec.pp, spec.v, spec.microbatches, spec.n,
                lighter_ends ? "lighter-ends" : "even-split", r, static_cast<long long>(st.peak_activation_bytes),
                out.predicted[static_cast<std::size_t>(r)]);
  }
  return out;
}

void expect_within_10_percent(const Measured& m) {
  for (std::size_t r = 0; r < m.measured.size(); ++r) {
    EXPECT_NEAR(static_cast<double>(m.measured[r]), m.predicted[r], 0.1 * m.predicted[r]) << "rank " << r;
  }
}

TEST(PipelineMemory, MeasuredPeakMatchesSimulator) {
  const model::LlamaConfig cfg = pp_model(8);
  RunSpec rs;
  rs.steps = 1;
  for (const ScheduleSpec& spec :
       {ScheduleSpec{4, 1, 8, 1, ScheduleKind::k1F1B}, ScheduleSpec{4, 1, 8, 1, ScheduleKind::kGPipe},
        ScheduleSpec{4, 2, 8, 4, ScheduleKind::kFlexible}, ScheduleSpec{4, 2, 9, 9, ScheduleKind::kFlexible}}) {
    expect_within_10_percent(measure(cfg, spec, true, rs));
  }
  rs.recompute = model::Recompute::kNone;
  expect_within_10_percent(measure(cfg, {2, 2, 5, 2, ScheduleKind::kFlexible}, true, rs));
}

TEST(PipelineMemory, LighterFirstStageReducesRankZeroPeak) {
  // 1F1B holds PP micro-batches on rank 0, PP-1-r on rank r: with an even split (2 layers per stage)
  // rank 0 carries the most activations. Llama 3's split [1, 3, 3, 1] takes a layer off rank 0.
  const model::LlamaConfig cfg = pp_model(8);
  RunSpec rs;
  rs.steps = 1;
  const ScheduleSpec spec{4, 1, 8, 1, ScheduleKind::k1F1B};
  const Measured even = measure(cfg, spec, false, rs);
  const Measured light = measure(cfg, spec, true, rs);
  expect_within_10_percent(even);
  expect_within_10_percent(light);
  EXPECT_EQ(std::max_element(even.measured.begin(), even.measured.end()) - even.measured.begin(), 0);
  EXPECT_LT(light.measured[0], even.measured[0]);
}

TEST(PipelinePlan, RefusesLayoutsThatCannotRun) {
  const model::LlamaConfig cfg = pp_model(8);
  auto message = [&](const model::LlamaConfig& c, const ScheduleSpec& spec) {
    const Result<PipelinePlan> p = plan_pipeline(c, spec);
    EXPECT_FALSE(p.ok()) << "accepted " << spec.pp << " " << spec.v << " " << spec.microbatches << " " << spec.n;
    const std::string msg = p.ok() ? "" : p.error().message();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    std::printf("[ pp refused ] %s\n", msg.c_str());
    return msg;
  };
  EXPECT_NE(message(cfg, {4, 0, 4, 4, ScheduleKind::kFlexible}).find("v (0)"), std::string::npos);
  EXPECT_NE(message(cfg, {4, 2, 3, 4, ScheduleKind::kFlexible}).find("n (4)"), std::string::npos);
  EXPECT_NE(message(cfg, {4, 2, 6, 4, ScheduleKind::kInterleaved}).find("microbatches (6)"), std::string::npos);
  EXPECT_NE(message(cfg, {0, 1, 4, 1, ScheduleKind::k1F1B}).find("pp (0)"), std::string::npos);
  const std::string layers = message(pp_model(5), {4, 2, 8, 4, ScheduleKind::kFlexible});
  EXPECT_NE(layers.find("layers (5)"), std::string::npos) << layers;
  EXPECT_NE(layers.find("8"), std::string::npos) << layers;
  // Tags: M * stages * 2 must stay below 32768.
  EXPECT_NE(message(cfg, {4, 2, 4096, 4, ScheduleKind::kFlexible}).find("4096"), std::string::npos);
}

TEST(PipelinePlan, ExecutorRefusesAGroupOfTheWrongSize) {
  const model::LlamaConfig cfg = pp_model(8);
  const topology::ParallelDims dims = *topology::ParallelDims::make(1, 1, 2, 1);
  comm::testing::run_ranks(2, [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    RankModelOptions opt;
    opt.seq_len = 8;
    opt.schedule = {4, 1, 4, 1, ScheduleKind::k1F1B};
    const auto ex = RankModel<double>::make(groups->context(), cfg, opt);
    COMM_EXPECT(!ex.ok());
    COMM_EXPECT(ex.error().message().find("pp (4)") != std::string::npos, ex.error().message());
    return Status::Ok();
  });
}

}  // namespace
}  // namespace herd::parallel::pp::testing

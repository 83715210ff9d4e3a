// The projection of a `herd train` run against numbers worked out by hand: a cluster whose memory
// bandwidth is so large that only FLOPs and the collectives' bytes cost time, so the step is the
// GEMMs' 6 x rows x sum(n k) plus attention's 3.5 x 4 B H D pairs per layer over the peak, and the
// state is 16 bytes per parameter. Also: core sharing on a host, the median step time, and the errors
// of a malformed calibration file.
#include "herd/train/plan/projection.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "common/test_model.h"
#include "herd/model/params.h"

namespace herd::train {
namespace {

model::LlamaConfig small_cfg() { return herd::test_models::test_llama({.name = "hand", .vocab = 128}); }

// 1 GFLOP/s fp32, no latency, 1 GB/s between ranks, memory bandwidth 1e6 GB/s (free).
topology::Cluster hand_cluster() {
  topology::Cluster c;
  c.name = "hand";
  c.accelerator.name = "hand";
  c.accelerator.peak_tflops_fp32 = 1e-3;
  c.accelerator.peak_tflops_bf16 = 2e-3;
  c.accelerator.memory_gib = 1;
  c.accelerator.memory_bw_gb_per_s = 1e6;
  c.accelerator.matmul_efficiency = 1;
  c.accelerator.attention_fwd_efficiency = 1;
  c.accelerator.attention_bwd_efficiency = 1;
  c.accelerator.memory_bw_efficiency = 1;
  c.accelerator.speed_variation = 0;
  c.tiers = {{"shm", 8, 1.0, 0.0, 1.0, 1, {}}};
  return c;
}

// A run's layout as the trainer resolves it: micro_batch sequences per DP rank, M micro-batches.
ResolvedLayout run_layout(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp, std::int64_t micro_batch,
                          std::int64_t seq_len, std::int64_t microbatches = 1) {
  ResolvedLayout r;
  r.layout.tp = tp;
  r.layout.cp = cp;
  r.layout.pp = pp;
  r.layout.dp = dp;
  r.layout.microbatch = micro_batch;
  r.microbatches = microbatches;
  r.spec.seq_len = seq_len;
  r.spec.global_batch = dp * micro_batch * microbatches;
  r.spec.precision = planner::Precision::kFP32;
  r.layout.n = r.layout.n_resolved(r.spec);
  return r;
}

// Rank skew on a shared host (`herd calibrate` measures accelerator.speed_variation): a synchronous
// job of G ranks waits compute x sigma x sqrt(2 ln G) per step for its slowest rank; one rank never waits.
TEST(Projection, RankSkewCostsComputeTimesSigmaTimesTheGaussianExtreme) {
  const model::LlamaConfig m = small_cfg();
  topology::Cluster c = hand_cluster();
  c.accelerator.speed_variation = 0.1;
  Result<Projection> one = project(m, run_layout(1, 1, 1, 1, 2, 16), 0, c);
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->estimate.time.straggler_s, 0.0);
  for (std::int64_t dp : {2, 4}) {
    Result<Projection> p = project(m, run_layout(1, 1, 1, dp, 2, 16), 0, c);
    ASSERT_TRUE(p.ok()) << p.error().message();
    const planner::TimeBreakdown& T = p->estimate.time;
    EXPECT_NEAR(T.straggler_s, T.compute_s * 0.1 * std::sqrt(2.0 * std::log(static_cast<double>(dp))),
                1e-12 * T.compute_s)
        << dp;
    c.accelerator.speed_variation = 0;
    Result<Projection> flat = project(m, run_layout(1, 1, 1, dp, 2, 16), 0, c);
    c.accelerator.speed_variation = 0.1;
    ASSERT_TRUE(flat.ok());
    EXPECT_NEAR(p->step_s() - flat->step_s(), T.straggler_s, 1e-9 * p->step_s()) << dp;
  }
}

// A host running at half its calibrated speed (train/plan/host_speed.h) takes twice as long for every
// term: compute, elementwise, optimizer, collectives, bubble and rank skew all run on its cores. The
// plan at the calibrated speed is kept beside it, and the memory does not move.
TEST(Projection, AHostAtHalfItsCalibratedSpeedTakesTwiceAsLongInEveryLayout) {
  const model::LlamaConfig m = small_cfg();
  topology::Cluster c = hand_cluster();
  c.accelerator.memory_bw_gb_per_s = 10;  // elementwise and optimizer cost time too
  c.accelerator.kernel_overhead_us = 50;
  c.accelerator.speed_variation = 0.05;
  c.tiers[0].latency_us = 20;
  for (const ResolvedLayout& l : {run_layout(1, 1, 1, 1, 2, 16), run_layout(2, 1, 1, 2, 2, 16),
                                  run_layout(1, 2, 1, 1, 2, 16), run_layout(1, 1, 2, 1, 1, 16, 4)}) {
    Result<Projection> full = project(m, l, 0, c);
    Result<Projection> half = project(m, l, 0, c, 0.5);
    ASSERT_TRUE(full.ok() && half.ok()) << l.layout.to_string();
    EXPECT_NEAR(half->step_s(), 2 * full->step_s(), 1e-9 * full->step_s()) << l.layout.to_string();
    EXPECT_NEAR(half->estimate.time.exposed_comm_s(), 2 * full->estimate.time.exposed_comm_s(), 1e-9 * full->step_s())
        << l.layout.to_string();
    EXPECT_DOUBLE_EQ(half->step_s_calibrated_speed, full->step_s()) << l.layout.to_string();
    EXPECT_DOUBLE_EQ(half->step_s_idle, full->step_s()) << l.layout.to_string();
    EXPECT_DOUBLE_EQ(half->memory_bytes(), full->memory_bytes()) << l.layout.to_string();
    EXPECT_EQ(half->host_speed, 0.5);
  }
  // at_host_speed itself: rates times the speed, latency and overhead over it, efficiencies kept.
  const topology::Cluster h = at_host_speed(c, 0.8);
  EXPECT_DOUBLE_EQ(h.accelerator.peak_tflops_fp32, 0.8e-3);
  EXPECT_DOUBLE_EQ(h.accelerator.peak_tflops_bf16, 1.6e-3);
  EXPECT_DOUBLE_EQ(h.accelerator.memory_bw_gb_per_s, 8);
  EXPECT_DOUBLE_EQ(h.accelerator.kernel_overhead_us, 62.5);
  EXPECT_DOUBLE_EQ(h.tiers[0].bw_gb_per_s, 0.8);
  EXPECT_DOUBLE_EQ(h.tiers[0].latency_us, 25);
  EXPECT_EQ(h.accelerator.matmul_efficiency, c.accelerator.matmul_efficiency);
}

TEST(Projection, SingleRankStepAndStateMatchTheHandCount) {
  const model::LlamaConfig m = small_cfg();
  Result<Projection> p = project(m, run_layout(1, 1, 1, 1, 2, 16), 0, hand_cluster());
  ASSERT_TRUE(p.ok()) << p.error().message();
  const double rows = 2 * 16, h = 32, ffn = 64, q = 4 * 8, kv = 2 * 8;
  const double sum_nk = (q + 2 * kv) * h + h * q + 2 * ffn * h + h * ffn;
  const double pairs = 16.0 * 17.0 / 2.0;
  const double layer = 6 * rows * sum_nk + 3.5 * 4 * 2 * 4 * 8 * pairs;
  const double head = 6 * rows * 128 * h;
  const double expect = (2 * layer + head) / 1e9;
  EXPECT_NEAR(p->estimate.time.compute_s, expect, 1e-6 * expect);
  EXPECT_NEAR(p->step_s(), expect, 1e-5 * expect);  // + elementwise and optimizer at 1e15 B/s
  EXPECT_EQ(p->estimate.time.exposed_comm_s(), 0.0);
  // fp32 weights, gradients, AdamW m and v: 16 bytes per parameter, nothing else on one rank.
  EXPECT_DOUBLE_EQ(p->state_bytes, 16.0 * static_cast<double>(model::model_params(m).total()));
  // Activations at least the fp32 saved tensors of both layers and the head.
  model::ActivationShape s;
  s.seq_len = 16;
  s.micro_batch = 2;
  s.dtype = DType::kF32;
  const double saved =
      2.0 * static_cast<double>(model::layer_activation_bytes(m, s)) +
      static_cast<double>(model::output_activation_bytes(m, s) + model::embedding_activation_bytes(m, s));
  EXPECT_GE(p->activation_bytes, saved);
  EXPECT_LT(p->activation_bytes, 3 * saved);
}

// Full recompute replays each layer's forward in its backward. Megatron and torch.utils.checkpoint
// (the fused profile) replay all of it; herd's runtime (the herd profile, on any host) stops before
// the down projection, whose output is the next layer's input, already kept: 2 x rows x ffn x hidden
// FLOPs per layer fewer.
TEST(Projection, FullRecomputeReplaysTheForwardAndHerdSkipsTheDownProjection) {
  const model::LlamaConfig m = small_cfg();
  const double rows = 2 * 16, h = 32, ffn = 64, q = 4 * 8, kv = 2 * 8;
  const double pairs = 16.0 * 17.0 / 2.0;
  const double fwd = 2 * rows * ((q + 2 * kv) * h + h * q + 2 * ffn * h + h * ffn) + 4 * 2 * 4 * 8 * pairs;
  const double down = 2 * rows * h * ffn;
  // What full recompute adds to the step at TP degree tp under a software profile: (compute, TP
  // collectives), on the hand cluster's dedicated accelerators.
  auto extra = [&](planner::Software software, std::int64_t tp) {
    ResolvedLayout r = run_layout(tp, 1, 1, 1, 2, 16);
    r.spec.system.software = software;
    planner::Layout l = r.layout;
    l.zero = l.gpus() > 1 ? 3 : 0;
    const Result<planner::Estimate> none = planner::estimate(m, hand_cluster(), r.spec, l, l.gpus());
    l.recompute = model::Recompute::kFull;
    const Result<planner::Estimate> full = planner::estimate(m, hand_cluster(), r.spec, l, l.gpus());
    EXPECT_TRUE(none.ok() && full.ok());
    const planner::TimeBreakdown &a = none->time, &b = full->time;
    return std::pair{b.compute_s - a.compute_s, b.tp_s - a.tp_s};
  };
  const double gpu = 2 * fwd / 1e9, herd = 2 * (fwd - down) / 1e9;
  EXPECT_NEAR(extra(planner::Software::kFused, 1).first, gpu, 1e-6 * gpu);
  EXPECT_NEAR(extra(planner::Software::kHerd, 1).first, herd, 1e-6 * herd);

  // Under TP 2 with sequence parallelism the replayed forward's collectives are two all-gathers and two
  // reduce-scatters of equal cost (no latency here); herd's leaves out the one after the down projection.
  const double tp_fused = extra(planner::Software::kFused, 2).second;
  ASSERT_GT(tp_fused, 0.0);
  EXPECT_NEAR(extra(planner::Software::kHerd, 2).second, 0.75 * tp_fused, 1e-9 * tp_fused);
}

TEST(Projection, TensorParallelCommunicationMatchesTheHandCount) {
  const model::LlamaConfig m = small_cfg();
  Result<Projection> p = project(m, run_layout(2, 1, 1, 1, 2, 16), 0, hand_cluster());
  ASSERT_TRUE(p.ok()) << p.error().message();
  // Sequence parallel, ring of 2 at 1 GB/s: each all-gather or reduce-scatter of the (B T h) fp32
  // activation A moves A / 2; per layer (2 AG + 2 RS) forward and (4 AG + 2 RS) backward = 5 A; the
  // head gathers forward and reduce-scatters backward, the embedding the reverse (2 A together), and
  // the softmax statistics are two all-reduces of B T fp32 values (each moves them twice x 1/2).
  const double A = 2 * 16 * 32 * 4.0, stats = 2 * 16 * 4.0;
  const double expect = ((5 * 2 + 2) * A + 2 * stats) / 1e9;
  EXPECT_NEAR(p->estimate.time.tp_s, expect, 1e-9 * expect);
  // The TP shard (about half, the norms are replicated) in herd's flat units; at dp 1 a unit uses its
  // shard in place, so the shard's weights, gradients, m and v, 4 bytes each.
  const model::ModelParams full = model::model_params(m), shard = model::model_params_tp_shard(m, 2);
  EXPECT_LT(static_cast<double>(shard.total()), 0.6 * static_cast<double>(full.total()));
  EXPECT_DOUBLE_EQ(p->state_bytes, 16.0 * static_cast<double>(shard.total()));
}

TEST(Projection, DataParallelStateIsTheFsdpUnitsBytes) {
  // herd's flat units: gathered weights and full gradients (2 p) plus the shard's weights, gradients
  // and moments (4 p / dp) elements; the planner's ZeRO-3 without reshard says the same in bytes.
  const model::LlamaConfig m = small_cfg();
  Result<Projection> p = project(m, run_layout(1, 1, 1, 2, 2, 16), 0, hand_cluster());
  ASSERT_TRUE(p.ok()) << p.error().message();
  const double params = static_cast<double>(model::model_params(m).total());
  EXPECT_DOUBLE_EQ(p->state_bytes, 4.0 * (2 * params + 4 * params / 2));
  EXPECT_GT(p->estimate.time.dp_s, 0.0);
}

TEST(Projection, RanksShareTheHostCores) {
  topology::Accelerator a;
  a.host_cores = 2;
  a.thread_scaling = 0.8;
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 1), 1.8);  // two threads at 80%
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 2), 1.0);
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 4), 0.5);  // four threads time-slice two cores
  a.threads_per_rank = 1;                                  // train.threads = 1: one core, not 1.8
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 1), 1.0);
  a.threads_per_rank = 0;
  a.background_jobs = 1;                                   // another job: the two share the cores, one each
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 1), 0.9);  // two threads at half a core each, 80% scaling
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 2), 0.5);
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 4), 0.25);
  // Continuous in the load: a trace of background moves the share by a trace (no cliff at slice 1).
  a.background_jobs = 0.01;
  EXPECT_NEAR(topology::host_core_share(a, 1), 1.8 / 1.01, 1e-12);
  EXPECT_NEAR(topology::host_core_share(a, 2), 1.0 / 1.01, 1e-12);
  a.host_cores = 0;
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 4), 1.0);  // a dedicated accelerator

  // Four ranks on two cores: each rank's compute takes twice as long as on a core of its own.
  topology::Cluster c = hand_cluster();
  c.accelerator.host_cores = 2;
  c.accelerator.thread_scaling = 1.0;
  const double two = project(small_cfg(), run_layout(2, 1, 1, 1, 2, 16), 0, c)->estimate.time.compute_s;
  // micro_batch is per DP rank: the same rows per rank
  const double four = project(small_cfg(), run_layout(2, 1, 1, 2, 2, 16), 0, c)->estimate.time.compute_s;
  EXPECT_NEAR(four, 2 * two, 1e-6 * two);
}

// Four pipeline ranks on two cores: while one waits in the bubble the others get its core, so the
// step is the work on the cores (no bubble), not every part of the four-core step slowed down twice.
TEST(Projection, TimeSlicedRanksAbsorbThePipelineBubble) {
  topology::Cluster c = hand_cluster();
  c.accelerator.thread_scaling = 1.0;
  const ResolvedLayout l = run_layout(2, 1, 2, 1, 1, 16, 4);
  c.accelerator.host_cores = 4;  // a core per rank: the bubble stays
  const Result<Projection> own = project(small_cfg(), l, 0, c);
  ASSERT_TRUE(own.ok()) << own.error().message();
  const planner::TimeBreakdown& t4 = own->estimate.time;
  ASSERT_GT(t4.bubble_s, 0.0);
  c.accelerator.host_cores = 2;  // two ranks per core
  const Result<Projection> shared = project(small_cfg(), l, 0, c);
  ASSERT_TRUE(shared.ok()) << shared.error().message();
  const planner::TimeBreakdown& t2 = shared->estimate.time;
  // Each pipeline rank's work at half a core takes twice its time at a core of its own.
  const std::vector<double>& r4 = own->estimate.pipeline_rank_busy_s;
  const std::vector<double>& r2 = shared->estimate.pipeline_rank_busy_s;
  ASSERT_EQ(r4.size(), 2u);
  ASSERT_EQ(r2.size(), 2u);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(r2[r], 2 * r4[r], 1e-9 * r4[r]);
  // The critical path at a core per rank (the four-core step's busy + bubble) is shorter than the
  // work on two cores, so nothing of the bubble is left and the step is the work: the mean of the
  // two pipeline ranks' busy times (each of the four ranks holds half a core).
  const double busy2 = t2.compute_s + t2.tp_s + t2.cp_s, busy4 = t4.compute_s + t4.tp_s + t4.cp_s;
  const double work = (r2[0] + r2[1]) / 2;
  ASSERT_LT(busy4 + t4.bubble_s, work);
  EXPECT_EQ(t2.bubble_s, 0.0);
  EXPECT_NEAR(busy2, work, 1e-9 * work);
}

// Unequal stages time-slice too: the last pipeline stage holds the output head, and while the lighter
// first stage's ranks wait, their share of the cores goes to it. PP 2 x DP 2 on two cores (one thread
// per rank, half a core each): the step's compute is the mean of the two stages' work, which differs
// by the head's three GEMMs (6 x rows x hidden x vocab FLOPs per micro-batch), not the heavier stage's.
TEST(Projection, TimeSlicedUnequalStagesShareTheirCores) {
  topology::Cluster c = hand_cluster();
  c.accelerator.thread_scaling = 1.0;
  c.accelerator.host_cores = 2;
  const model::LlamaConfig cfg = herd::test_models::test_llama({.name = "head", .vocab = 4096});
  const std::int64_t mb = 2, seq = 16, M = 8;
  const Result<Projection> p = project(cfg, run_layout(1, 1, 2, 2, mb, seq, M), 0, c);
  ASSERT_TRUE(p.ok()) << p.error().message();
  const std::vector<double>& r = p->estimate.pipeline_rank_busy_s;
  ASSERT_EQ(r.size(), 2u);
  // Half a core of 1 GFLOP/s: the head's GEMMs of all M micro-batches on the last rank.
  const double head_s = static_cast<double>(M) * 6.0 * static_cast<double>(mb * seq * cfg.hidden * cfg.vocab) / 0.5e9;
  EXPECT_NEAR(r[1] - r[0], head_s, 1e-6 * head_s);
  const planner::TimeBreakdown& t = p->estimate.time;
  EXPECT_EQ(t.bubble_s, 0.0);
  EXPECT_NEAR(t.compute_s + t.tp_s + t.cp_s, (r[0] + r[1]) / 2, 1e-9 * r[1]);
  EXPECT_LT(t.compute_s, r[1]);
}

TEST(Projection, MedianStepLeavesOutTheFirstStep) {
  std::vector<StepRecord> h(5);
  const double secs[] = {9.0, 1.0, 3.0, 2.0, 100.0};
  std::int64_t tokens = 0;
  for (int i = 0; i < 5; ++i) {
    tokens += 1000;
    h[i].tokens = tokens;
    h[i].tokens_per_s = 1000 / secs[i];
  }
  EXPECT_NEAR(median_step_seconds(h), 2.5, 1e-12);  // median of 1, 3, 2, 100
  h.resize(1);
  EXPECT_NEAR(median_step_seconds(h), 9.0, 1e-12);
  EXPECT_EQ(median_step_seconds({}), 0.0);
}

TEST(Projection, MeasuredRunTakesTheMedianCommWaitOfTheSameSteps) {
  std::vector<StepRecord> h(4);
  const double wait[] = {5.0, 0.3, 0.1, 0.2};  // the first step (warm-up) is left out, as for the step
  for (int i = 0; i < 4; ++i) {
    h[i].tokens = 1000 * (i + 1);
    h[i].tokens_per_s = 1000;
    h[i].comm_wait_s = wait[i];
  }
  const MeasuredRun r = measured_run(h, {});
  EXPECT_NEAR(r.step_s, 1.0, 1e-12);
  EXPECT_NEAR(r.comm_s, 0.2, 1e-12);
  EXPECT_EQ(r.steps, 4);
  for (StepRecord& s : h) s.comm_wait_s = -1;  // a single-rank trainer has no communicator
  EXPECT_EQ(measured_run(h, {}).comm_s, -1.0);
}

// The parts of a step: each collective kind's time, the update and the rest (compute), medians of the
// same steps as the step; the checkpoints a mean per step. Hand-made records of a TP2 x PP2 rank.
TEST(Projection, MeasuredPartsAreTheMediansOfEachStepsSplit) {
  std::vector<StepRecord> h(4);
  for (int i = 0; i < 4; ++i) {
    StepRecord& r = h[static_cast<std::size_t>(i)];
    r.tokens = 1000 * (i + 1);
    r.tokens_per_s = 1000;
    r.step_s = 1.0 + 0.1 * i;                                            // 1.1, 1.2, 1.3 counted
    r.comm_by_kind_s = std::array<double, 5>{0.1 * i, 0, 0.2, 0, 0.01};  // tp, cp, pp, dp, other
    r.optimizer_s = 0.05;
    r.checkpoint_s = i == 3 ? 0.3 : -1;
  }
  const MeasuredRun m = measured_run(h, {});
  EXPECT_NEAR(m.comm_by_kind_s[0], 0.2, 1e-12);  // median of 0.1, 0.2, 0.3
  EXPECT_NEAR(m.comm_by_kind_s[2], 0.2, 1e-12);
  EXPECT_NEAR(m.optimizer_s, 0.05, 1e-12);
  EXPECT_NEAR(m.checkpoint_s, 0.1, 1e-12);  // 0.3 over 3 steps
  // compute per step: 1.1 - 0.31 - 0.05 = 0.74; 1.2 - 0.41 - 0.05 = 0.74; 1.3 - 0.51 - 0.05 - 0.3 = 0.44.
  EXPECT_NEAR(m.compute_s, 0.74, 1e-12);

  Projection p;
  p.layout.layout.tp = 2;
  p.layout.layout.pp = 2;
  p.estimate.time.compute_s = 0.6;
  p.estimate.time.straggler_s = 0.1;
  p.estimate.time.tp_s = 0.25;
  p.estimate.time.pp_s = 0.05;
  p.estimate.time.bubble_s = 0.1;
  p.estimate.time.optimizer_s = 0.04;
  const std::vector<StepPart> parts = step_parts(p, m);
  ASSERT_EQ(parts.size(), 6u);
  EXPECT_EQ(parts[0].name, "compute");
  EXPECT_NEAR(parts[0].planned_s, 0.7, 1e-12);
  EXPECT_EQ(parts[1].name, "tp");
  EXPECT_EQ(parts[2].name, "pp + bubble");
  EXPECT_NEAR(parts[2].planned_s, 0.15, 1e-12);
  EXPECT_EQ(parts[3].name, "optimizer");
  EXPECT_EQ(parts[4].name, "control");
  EXPECT_LT(parts[4].planned_s, 0);
  EXPECT_EQ(parts[5].name, "checkpoint");
  const std::string line = parts_line(parts);
  EXPECT_NE(line.find("compute 700.000 ms vs 740.000 ms (-5.4%)"), std::string::npos) << line;
  EXPECT_NE(line.find("control 10.000 ms (not planned)"), std::string::npos) << line;
  const Json j = parts_json(parts);
  EXPECT_TRUE(j[4]["planned_s"].is_null());
  EXPECT_NEAR(j[1]["measured_s"].get<double>(), 0.2, 1e-12);
}

TEST(Projection, CalibrationFileOverridesThePresetAndErrorsNameTheField) {
  Result<topology::Cluster> preset = local_cpu_cluster();
  ASSERT_TRUE(preset.ok()) << preset.error().message();
  EXPECT_EQ(preset->accelerator.host_cores, 2);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("herd_cal" + std::to_string(::getpid()) + ".json")).string();
  Json j = topology::cluster_to_json(*preset);
  j["accelerator"]["peak_tflops"]["fp32"] = 0.5;
  std::ofstream(path) << j.dump();
  Result<topology::Cluster> c = local_cpu_cluster(path);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->accelerator.peak_tflops_fp32, 0.5);
  j["accelerator"]["host_cores"] = "two";
  std::ofstream(path) << j.dump();
  c = local_cpu_cluster(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("accelerator.host_cores"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("projection.cluster_file"), std::string::npos) << c.error().message();
  EXPECT_EQ(c.error().message().find('\n'), std::string::npos);
  j["accelerator"]["host_cores"] = 2;
  j["accelerator"]["thread_scaling"] = 1.5;
  std::ofstream(path) << j.dump();
  c = local_cpu_cluster(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("accelerator.thread_scaling: must be in (0, 1], got 1.5"), std::string::npos)
      << c.error().message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace herd::train

namespace herd::train {
namespace {

// MFU's peak: a given train.peak_gflops_per_core (fp32's, doubled under bf16), else the per-core GEMM
// rate of the cluster the run plans with, in the run's precision.
TEST(Projection, MfuPeakIsTheCalibratedGemmRateOfTheRunsPrecision) {
  TrainConfig cfg;
  cfg.train.peak_gflops_per_core = 100;
  EXPECT_DOUBLE_EQ(peak_flops_per_core(cfg), 100e9);
  cfg.train.precision = Precision::kBF16;
  EXPECT_DOUBLE_EQ(peak_flops_per_core(cfg), 200e9);

  topology::Cluster c = *topology::cluster_preset("local-cpu");
  c.accelerator.peak_tflops_fp32 = 0.237;
  c.accelerator.peak_tflops_bf16 = 0.452;
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("herd_mfu_peak_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << topology::cluster_to_json(c).dump(2);
  cfg.projection.cluster_file = file.string();
  cfg.train.peak_gflops_per_core = 0;
  EXPECT_NEAR(peak_flops_per_core(cfg), 0.452e12, 1e3);
  cfg.train.precision = Precision::kFP32;
  EXPECT_NEAR(peak_flops_per_core(cfg), 0.237e12, 1e3);
  // No calibration named: the local-cpu preset's rate.
  cfg.projection.cluster_file.clear();
  EXPECT_DOUBLE_EQ(peak_flops_per_core(cfg),
                   topology::cluster_preset("local-cpu")->accelerator.peak_tflops_fp32 * 1e12);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace herd::train

namespace herd::train {
namespace {

// A GPU run plans on its GPU's preset (no GPU here: the H100 one) unless projection.cluster_file names
// a calibration, and its MFU divides by that accelerator's peak in the run's precision.
TEST(Projection, AGpuRunPlansOnItsGpusPresetAndItsMfuUsesThatPeak) {
  TrainConfig cfg;
  cfg.train.device = "cuda";
  cfg.train.precision = Precision::kBF16;
  const Result<topology::Cluster> gpu = run_cluster(cfg);
  ASSERT_TRUE(gpu.ok()) << gpu.error().message();
  const topology::Cluster h100 = *topology::cluster_preset("dgx-h100");
  EXPECT_EQ(gpu->accelerator.name, h100.accelerator.name);
  EXPECT_EQ(device_peak_flops(cfg), h100.accelerator.peak_tflops_bf16 * 1e12);
  cfg.train.precision = Precision::kFP32;
  EXPECT_EQ(device_peak_flops(cfg), h100.accelerator.peak_tflops_fp32 * 1e12);
  cfg.train.device = "cpu";
  EXPECT_EQ(run_cluster(cfg)->accelerator.name, topology::cluster_preset("local-cpu")->accelerator.name);
  cfg.train.device = "cuda";
  cfg.projection.cluster_file = "/nonexistent/calibration.json";
  const Result<topology::Cluster> missing = run_cluster(cfg);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("projection.cluster_file"), std::string::npos);
}

}  // namespace
}  // namespace herd::train

// Invariants of one estimate: memory parts sum to the total, activations are model/activations.h's
// bytes times what the schedule keeps in flight, more recompute trades memory for time, and bad
// layouts are refused with the constraint and its numbers.
#include "herd/planner/estimate.h"

#include <gtest/gtest.h>

#include "herd/model/activations.h"
#include "herd/model/params.h"
#include "herd/planner/cost.h"

namespace herd::planner {
namespace {

const model::LlamaConfig kCfg = *model::preset("llama3-70b");
const topology::Cluster kCluster = *topology::cluster_preset("dgx-h100");

Layout layout(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp, int v = 1) {
  Layout l;
  l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.v = v;
  return l;
}

TEST(Estimate, PartsSumToTotalsAndTimeAddsUp) {
  TrainingSpec t{8192, 512, Precision::kBF16};
  for (const Layout& l : {layout(8, 1, 4, 16, 5), layout(4, 2, 2, 32), layout(8, 1, 1, 64)}) {
    Result<Estimate> e = estimate(kCfg, kCluster, t, l, 512);
    ASSERT_TRUE(e.ok()) << e.error().message();
    double sum = 0;
    for (const MemoryPart& p : e->memory.parts) {
      EXPECT_GE(p.bytes, 0) << p.name;
      sum += p.bytes;
    }
    EXPECT_NEAR(sum, e->memory.total_bytes, 1e-6 * sum);
    const TimeBreakdown& T = e->time;
    EXPECT_NEAR(T.compute_s + T.bubble_s + T.exposed_comm_s() + T.optimizer_s + T.straggler_s, T.step_s,
                1e-9 * T.step_s);
    EXPECT_NEAR(e->tokens_per_s * T.step_s, static_cast<double>(t.tokens()), 1e-6 * static_cast<double>(t.tokens()));
    EXPECT_GT(e->mfu, 0.05);
    EXPECT_LT(e->mfu, kCluster.accelerator.matmul_efficiency);
  }
}

// The schedule the layout names is the one simulated: GPipe runs every forward before the first
// backward, so its first pipeline rank holds all M micro-batches' activations where 1F1B holds PP; the
// steps' work is the same. A V > 1 under a one-chunk schedule is refused by the schedule's own check.
TEST(Estimate, TheLayoutsScheduleIsTheOneSimulated) {
  TrainingSpec t{4096, 64, Precision::kBF16};
  Layout l = layout(8, 1, 4, 4);
  l.microbatch = 2;  // M = 64 / (4 x 2) = 8 micro-batches per step, twice PP
  l.schedule = schedule::ScheduleKind::k1F1B;
  Result<Estimate> one_f_one_b = estimate(kCfg, kCluster, t, l, 128);
  l.schedule = schedule::ScheduleKind::kGPipe;
  Result<Estimate> gpipe = estimate(kCfg, kCluster, t, l, 128);
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.error().message();
  ASSERT_TRUE(gpipe.ok()) << gpipe.error().message();
  EXPECT_GT(gpipe->memory.total_bytes, one_f_one_b->memory.total_bytes);
  EXPECT_EQ(gpipe->time.compute_s, one_f_one_b->time.compute_s);
  EXPECT_NE(gpipe->assumptions[1].find("schedule: gpipe"), std::string::npos) << gpipe->assumptions[1];
  EXPECT_NE(one_f_one_b->assumptions[1].find("schedule: 1f1b"), std::string::npos);
  l.schedule = schedule::ScheduleKind::k1F1B;
  l.v = 2;
  EXPECT_FALSE(estimate(kCfg, kCluster, t, l, 128).ok());
}

// The logits' share of the transient bytes, per logit of the output stage's vocabulary: herd's CPU
// kernels keep one fp32 tile of at most 256 rows (turned into its gradient in place) and, with bf16
// inputs, a bf16 gradient tile beside it: 4 and 4 + 2 bytes x 256 rows; a GPU's fused cross-entropy
// an fp32 tile of every row and its gradient: 8 bytes x b t rows. Taken as the difference between two
// vocabularies under one tile's width (the layers' temporaries do not depend on it).
TEST(Estimate, TheLogitsTileIsCountedAsTheRuntimeHoldsIt) {
  model::LlamaConfig small = *model::preset("tiny"), large = small;
  small.vocab = 2048;
  large.vocab = 4096;
  Layout l = layout(1, 1, 1, 1);
  l.microbatch = 4;
  const topology::Cluster cpu = *topology::cluster_preset("local-cpu");
  struct Case {
    Software software;
    Precision precision;
    const topology::Cluster& cluster;
    double rows, bytes_per_logit;
  };
  const Case cases[] = {{Software::kHerd, Precision::kFP32, cpu, 256, 4},
                        {Software::kHerd, Precision::kBF16, cpu, 256, 6},
                        {Software::kFused, Precision::kBF16, kCluster, 4 * 512, 8}};
  for (const Case& c : cases) {
    TrainingSpec t{512, 4, c.precision};
    t.system.software = c.software;
    Result<Estimate> a = estimate(small, c.cluster, t, l, 1), b = estimate(large, c.cluster, t, l, 1);
    ASSERT_TRUE(a.ok()) << a.error().message();
    ASSERT_TRUE(b.ok()) << b.error().message();
    EXPECT_DOUBLE_EQ(b->memory.part("transient") - a->memory.part("transient"), c.rows * 2048 * c.bytes_per_logit)
        << software_name(c.software) << " " << precision_name(c.precision);
  }
}

// Under full recompute the backward's temporaries sit beside the layer it re-materialises: the
// transient bytes grow by exactly one layer's saved set without recompute (model/activations.h).
TEST(Estimate, FullRecomputeAddsOneRematerialisedLayerToTheTemporaries) {
  TrainingSpec t{4096, 64, Precision::kBF16};
  Layout none = layout(4, 1, 1, 16), full = none;
  none.microbatch = full.microbatch = 2;
  none.recompute = model::Recompute::kNone;
  full.recompute = model::Recompute::kFull;
  Result<Estimate> a = estimate(kCfg, kCluster, t, none, 64), b = estimate(kCfg, kCluster, t, full, 64);
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_TRUE(b.ok()) << b.error().message();
  model::ActivationShape s = activation_shape(t, none);
  EXPECT_DOUBLE_EQ(b->memory.part("transient") - a->memory.part("transient"),
                   static_cast<double>(model::layer_activation_bytes(kCfg, s)));
}

// Data parallelism alone: a GPU stack's FSDP keeps a reduce-scatter and an all-gather unit of its own;
// herd's flat units gather into and reduce-scatter from the full buffers the state already counts.
TEST(Estimate, HerdsFlatUnitsNeedNoCommunicationBuffers) {
  const model::LlamaConfig tiny = *model::preset("tiny");
  const topology::Cluster cpu = *topology::cluster_preset("local-cpu");
  Layout l = layout(1, 1, 1, 2);
  l.microbatch = 2;
  l.zero = 3;
  TrainingSpec t{256, 8, Precision::kFP32};
  t.system.software = Software::kHerd;
  Result<Estimate> herd = estimate(tiny, cpu, t, l, 2);
  t.system.software = Software::kFused;
  Result<Estimate> fused = estimate(tiny, cpu, t, l, 2);
  ASSERT_TRUE(herd.ok()) << herd.error().message();
  ASSERT_TRUE(fused.ok()) << fused.error().message();
  EXPECT_EQ(herd->memory.part("comm_buffers"), 0.0);
  EXPECT_GT(fused->memory.part("comm_buffers"), 0.0);
}

TEST(Estimate, ActivationsAreModelBytesTimesInFlight) {
  // One pipeline rank, one micro-batch in flight: the activations are exactly every layer's saved set
  // plus the embedding's and the output's, from model/activations.h.
  TrainingSpec t{4096, 64, Precision::kBF16};
  for (model::Recompute rc : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    Layout l = layout(4, 1, 1, 16);
    l.microbatch = 2;
    l.recompute = rc;
    Result<Estimate> e = estimate(kCfg, kCluster, t, l, 64);
    ASSERT_TRUE(e.ok()) << e.error().message();
    const model::ActivationShape s = activation_shape(t, l);
    const double expect =
        static_cast<double>(kCfg.n_layers * model::layer_activation_bytes(kCfg, s) +
                            model::embedding_activation_bytes(kCfg, s) + model::output_activation_bytes(kCfg, s));
    EXPECT_DOUBLE_EQ(e->memory.part("activations"), expect) << model::recompute_name(rc);
  }
}

TEST(Estimate, ParametersComeFromTheShardCounts) {
  TrainingSpec t{8192, 256, Precision::kBF16};
  Layout l = layout(8, 1, 4, 8);           // no reshard: each rank holds its layers' bf16 weights gathered
  l.layer_split = LayerSplit::kLightEnds;  // the 19/21/21/19 split below
  Result<Estimate> e = estimate(kCfg, kCluster, t, l, 256);
  ASSERT_TRUE(e.ok());
  const auto lp = model::layer_params_tp_shard(kCfg, 8);
  const double layers_on_rank = e->memory.rank == 0 || e->memory.rank == 3 ? 19 : 21;  // 82 slots over 4
  EXPECT_DOUBLE_EQ(e->memory.part("parameters"), 2.0 * layers_on_rank * static_cast<double>(lp.total()));
}

TEST(Estimate, MoreRecomputeLessMemoryMoreTime) {
  TrainingSpec t{8192, 512, Precision::kBF16};
  double prev_act = 1e300, prev_time = 0;
  for (model::Recompute rc : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    Layout l = layout(8, 1, 4, 16, 5);
    l.recompute = rc;
    Result<Estimate> e = estimate(kCfg, kCluster, t, l, 512);
    ASSERT_TRUE(e.ok());
    EXPECT_LT(e->memory.part("activations"), prev_act) << model::recompute_name(rc);
    EXPECT_GT(e->time.step_s, prev_time) << model::recompute_name(rc);
    prev_act = e->memory.part("activations");
    prev_time = e->time.step_s;
  }
}

TEST(Estimate, ZeroStagesShardMoreState) {
  TrainingSpec t{4096, 256, Precision::kBF16};
  double prev = 1e300;
  for (int z : {0, 1, 2}) {
    Layout l = layout(8, 1, 2, 16);
    l.zero = z;
    Result<Estimate> e = estimate(kCfg, kCluster, t, l, 256);
    ASSERT_TRUE(e.ok());
    const double state = e->memory.part("gradients") + e->memory.part("optimizer_state");
    EXPECT_LT(state, prev) << "zero " << z;
    prev = state;
  }
}

TEST(Estimate, CollectivesFollowTheBandwidthModel) {
  topology::GroupLink g;
  g.bw_bytes_per_s = 100e9;
  g.latency_s = 0;
  g.ring_steps = 7;
  g.tier = 0;
  EXPECT_DOUBLE_EQ(all_gather_s(8e9, 8, g), 7.0 / 8.0 * 8e9 / 100e9);
  EXPECT_DOUBLE_EQ(all_reduce_s(8e9, 8, g), 2 * 7.0 / 8.0 * 8e9 / 100e9);
  EXPECT_DOUBLE_EQ(all_gather_s(8e9, 1, g), 0);
  g.latency_s = 1e-5;
  EXPECT_DOUBLE_EQ(all_gather_s(0, 8, g), 0);
  EXPECT_NEAR(all_gather_s(8e3, 8, g), 7e-5 + 7.0 / 8.0 * 8e3 / 100e9, 1e-15);
  // All-reduce: 2 (n - 1) latency steps and 2 (n - 1) / n of the bytes; reduce-scatter as all-gather.
  EXPECT_NEAR(all_reduce_s(8e3, 8, g), 14e-5 + 2 * 7.0 / 8.0 * 8e3 / 100e9, 1e-15);
  EXPECT_NEAR(reduce_scatter_s(8e3, 8, g), 7e-5 + 7.0 / 8.0 * 8e3 / 100e9, 1e-15);
  // A torus ring of 8 ranks as 2 x 2 x 2 crosses 3 hops: the latency counts the link's ring steps.
  g.ring_steps = 3;
  EXPECT_NEAR(all_reduce_s(8e3, 8, g), 6e-5 + 2 * 7.0 / 8.0 * 8e3 / 100e9, 1e-15);
  // Send/recv: one step, the whole message.
  EXPECT_NEAR(p2p_s(8e3, g), 1e-5 + 8e3 / 100e9, 1e-15);
  EXPECT_DOUBLE_EQ(p2p_s(0, g), 0);
  g.tier = -1;  // both ends on one accelerator
  EXPECT_DOUBLE_EQ(p2p_s(8e3, g), 0);
}

TEST(Estimate, ImpossibleLayoutsNameTheConstraint) {
  TrainingSpec t{8192, 512, Precision::kBF16};
  struct Case {
    Layout l;
    std::int64_t gpus;
    const char* expect;
  };
  Layout mb3 = layout(8, 1, 4, 16);
  mb3.microbatch = 3;
  const Case cases[] = {
      {layout(16, 1, 2, 16), 512, "num_key_value_heads (8) is not divisible by tp (16)"},
      {layout(8, 1, 4, 8), 512, "= 256 ranks, but the job has 512"},
      {layout(8, 3, 4, 4), 384, "seq_len (8192) is not divisible by 2 x cp (6)"},
      {layout(1, 1, 128, 4), 512, "layers (80) cannot fill pp*v = 128*1 = 128"},
      {layout(8, 1, 1, 1024), 8192, "global batch (512 sequences) is not divisible by dp (1024)"},
      {mb3, 512, "x microbatch size (3)"},
      {layout(8, 1, 4, 2048), 65536, "exceeds cluster dgx-h100 (32768"},
  };
  for (const Case& c : cases) {
    Result<Estimate> e = estimate(kCfg, kCluster, t, c.l, c.gpus);
    ASSERT_FALSE(e.ok()) << c.expect;
    EXPECT_NE(e.error().message().find(c.expect), std::string::npos) << e.error().message();
  }
}

// The optimizer's pass: 28 bytes per parameter in fp32, 34 with bf16 weights (the bf16 copy written and
// a bf16 gradient read), 30 under herd's runtime (fp32 gradients written in place by the GEMMs); at the
// accelerator's optimizer_bw_efficiency where it has one (a GPU calibration), else memory_bw_efficiency.
TEST(Estimate, OptimizerPassStreamsItsStateAtItsOwnRate) {
  const model::LlamaConfig m = *model::preset("llama3-8b");
  topology::Cluster c = *topology::cluster_preset("h200");
  c.accelerator.memory_bw_gb_per_s = 1000;  // 1e12 B/s
  c.accelerator.memory_bw_efficiency = 0.25;
  const double params = static_cast<double>(model::model_params(m).total());  // one GPU holds them all
  auto optimizer_s = [&](const topology::Cluster& cl, Precision p, Software sw) {
    TrainingSpec t{4096, 1, p};
    t.system.software = sw;
    Result<Estimate> e = estimate(m, cl, t, layout(1, 1, 1, 1), 1);
    EXPECT_TRUE(e.ok()) << e.error().message();
    return e.ok() ? e->time.optimizer_s : 0.0;
  };
  EXPECT_NEAR(optimizer_s(c, Precision::kFP32, Software::kFused), 28 * params / 0.25e12, 1e-6 * 28 * params / 0.25e12);
  EXPECT_NEAR(optimizer_s(c, Precision::kBF16, Software::kFused), 34 * params / 0.25e12, 1e-6 * 34 * params / 0.25e12);
  EXPECT_NEAR(optimizer_s(c, Precision::kBF16, Software::kHerd), 30 * params / 0.25e12, 1e-6 * 30 * params / 0.25e12);
  c.accelerator.optimizer_bw_efficiency = 0.75;  // three times the per-layer kernels' rate
  EXPECT_NEAR(optimizer_s(c, Precision::kBF16, Software::kHerd), 30 * params / 0.75e12, 1e-6 * 30 * params / 0.75e12);
  // The field survives a cluster file; outside [0, 1] it is refused by name.
  Result<topology::Cluster> back = topology::cluster_from_json(topology::cluster_to_json(c));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->accelerator.optimizer_bw_efficiency, 0.75);
  Json j = topology::cluster_to_json(c);
  j["accelerator"]["optimizer_bw_efficiency"] = 1.5;
  Result<topology::Cluster> bad = topology::cluster_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("accelerator.optimizer_bw_efficiency"), std::string::npos);
}

}  // namespace
}  // namespace herd::planner

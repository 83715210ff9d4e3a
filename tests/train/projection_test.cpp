// The projection of a `herd train` run against numbers worked out by hand: a cluster whose memory
// bandwidth is so large that only FLOPs and the collectives' bytes cost time, so the step is the
// GEMMs' 6 x rows x sum(n k) plus attention's 3.5 x 4 B H D pairs per layer over the peak, and the
// state is 16 bytes per parameter. Also: core sharing on a host, the median step time, and the errors
// of a malformed calibration file.
#include "herd/train/projection.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

TEST(Projection, SingleRankStepAndStateMatchTheHandCount) {
  const model::LlamaConfig m = small_cfg();
  RunLayout l;
  l.micro_batch = 2;
  l.seq_len = 16;
  Result<Projection> p = project(m, l, hand_cluster());
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

TEST(Projection, TensorParallelCommunicationMatchesTheHandCount) {
  const model::LlamaConfig m = small_cfg();
  RunLayout l;
  l.tp = 2;
  l.micro_batch = 2;
  l.seq_len = 16;
  Result<Projection> p = project(m, l, hand_cluster());
  ASSERT_TRUE(p.ok()) << p.error().message();
  // Sequence parallel, ring of 2 at 1 GB/s: each all-gather or reduce-scatter of the (B T h) fp32
  // activation A moves A / 2; per layer (2 AG + 2 RS) forward and (4 AG + 2 RS) backward = 5 A; the
  // head gathers forward and reduce-scatters backward, the embedding the reverse (2 A together), and
  // the softmax statistics are two all-reduces of B T fp32 values (each moves them twice x 1/2).
  const double A = 2 * 16 * 32 * 4.0, stats = 2 * 16 * 4.0;
  const double expect = ((5 * 2 + 2) * A + 2 * stats) / 1e9;
  EXPECT_NEAR(p->estimate.time.tp_s, expect, 1e-9 * expect);
  // The TP shard (about half, the norms are replicated) in herd's flat units, even at dp 1: the
  // gathered weights and full gradients plus the shard's weights, gradients, m and v, 4 bytes each.
  const model::ModelParams full = model::model_params(m), shard = model::model_params_tp_shard(m, 2);
  EXPECT_LT(static_cast<double>(shard.total()), 0.6 * static_cast<double>(full.total()));
  EXPECT_DOUBLE_EQ(p->state_bytes, 24.0 * static_cast<double>(shard.total()));
}

TEST(Projection, DataParallelStateIsTheFsdpUnitsBytes) {
  // herd's flat units: gathered weights and full gradients (2 p) plus the shard's weights, gradients
  // and moments (4 p / dp) elements; the planner's ZeRO-3 without reshard says the same in bytes.
  const model::LlamaConfig m = small_cfg();
  RunLayout l;
  l.dp = 2;
  l.micro_batch = 2;
  l.seq_len = 16;
  Result<Projection> p = project(m, l, hand_cluster());
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
  a.background_jobs = 1;                                   // another job: the two share the cores, one each
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 1), 0.5);  // two threads on one core: worth one at half
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 2), 0.5);
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 4), 0.25);
  a.host_cores = 0;
  EXPECT_DOUBLE_EQ(topology::host_core_share(a, 4), 1.0);  // a dedicated accelerator

  // Four ranks on two cores: each rank's compute takes twice as long as on a core of its own.
  topology::Cluster c = hand_cluster();
  c.accelerator.host_cores = 2;
  c.accelerator.thread_scaling = 1.0;
  RunLayout l;
  l.tp = 2;
  l.micro_batch = 2;
  l.seq_len = 16;
  const double two = project(small_cfg(), l, c)->estimate.time.compute_s;
  l.dp = 2;  // micro_batch is per DP rank: the same rows per rank
  const double four = project(small_cfg(), l, c)->estimate.time.compute_s;
  EXPECT_NEAR(four, 2 * two, 1e-6 * two);
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

TEST(Projection, CalibrationFileOverridesThePresetAndErrorsNameTheField) {
  Result<topology::Cluster> preset = local_cpu_cluster();
  ASSERT_TRUE(preset.ok()) << preset.error().message();
  EXPECT_EQ(preset->accelerator.host_cores, 2);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("herd_cal" + std::to_string(::getpid()) + ".json")).string();
  Json j = topology::cluster_to_json(*preset);
  j["accelerator"]["peak_tflops"]["fp32"] = 0.5;
  std::ofstream(path) << j.dump();
  ::setenv("HERD_CLUSTER_FILE", path.c_str(), 1);
  Result<topology::Cluster> c = local_cpu_cluster();
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->accelerator.peak_tflops_fp32, 0.5);
  j["accelerator"]["host_cores"] = "two";
  std::ofstream(path) << j.dump();
  c = local_cpu_cluster();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("accelerator.host_cores"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("HERD_CLUSTER_FILE"), std::string::npos) << c.error().message();
  EXPECT_EQ(c.error().message().find('\n'), std::string::npos);
  j["accelerator"]["host_cores"] = 2;
  j["accelerator"]["thread_scaling"] = 1.5;
  std::ofstream(path) << j.dump();
  c = local_cpu_cluster();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("accelerator.thread_scaling: must be in (0, 1], got 1.5"), std::string::npos)
      << c.error().message();
  ::unsetenv("HERD_CLUSTER_FILE");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace herd::train

// `herd train` prints the planner's prediction at the start ("planned ...") and the comparison at the
// end ("planned vs measured ..."), on one rank and on a TP x DP job, and writes both to
// train.projection_file; a malformed calibration file is one line naming the field, and training
// goes on without a projection.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "herd/core/cores.h"
#include "herd/data/shard.h"
#include "herd/topology/cluster.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class ProjectionCli : public herd::testing::ParityRunDir {
 protected:
  ProjectionCli() : ParityRunDir("herd_projection_cli", /*held_out=*/true) {}
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd(
        "train " + data_and_model() +
        " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=4 --train.steps=3" +
        " --eval.every=0 --eval.batches=1 --generate.samples=0 --calibration-dir " + (dir_ / "store").string() + " " +
        args);
  }
};

TEST_F(ProjectionCli, PlannedAndMeasuredLinesOnOneRankAndOnTpDp) {
  for (const std::string layout : {"", "--tp 2 --dp 2"}) {
    const std::string summary = (dir_ / "p.json").string();
    auto r = train(layout + " --train.projection_file=" + summary);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string all = r.out + r.err;
    // No calibration of this machine in the (empty) store: the committed preset, said so on the line.
    EXPECT_NE(
        all.find("planned (local-cpu preset, uncalibrated, " + std::string(layout.empty() ? "1 rank, " : "4 ranks, ")),
        std::string::npos)
        << all;
    EXPECT_NE(all.find(" background jobs): step "), std::string::npos) << all;
    EXPECT_NE(all.find(" background jobs over the run): step "), std::string::npos) << all;
    const Json j = Json::parse(herd::testing::slurp(summary));
    EXPECT_GT(j["planned"]["step_s"].get<double>(), 0.0);
    EXPECT_GT(j["measured"]["step_s"].get<double>(), 0.0);
    EXPECT_GT(j["measured"]["activation_bytes"].get<double>(), 0.0);
    EXPECT_EQ(j["layout"]["ranks"], layout.empty() ? 1 : 4);
    EXPECT_EQ(j["measured"]["steps"], 3);
    // The job's own CPU over the run, in cores: no more than every core of the host can give (a little
    // over for the clock readings' granularity), or -1 when the run was too short for /proc's ticks.
    const double job_cores = j["measured"]["job_cores"].get<double>();
    if (job_cores != -1.0) {
      EXPECT_GE(job_cores, 0.0);
      EXPECT_LE(job_cores, static_cast<double>(usable_cores()) + 0.25);
    }
    // Rank 0's time inside the communicator: measured on every layout (a one-rank job has nothing to wait for).
    if (layout.empty()) {
      EXPECT_GE(j["measured"]["comm_s"].get<double>(), 0.0);
    } else {
      EXPECT_GT(j["measured"]["comm_s"].get<double>(), 0.0);
      EXPECT_NE(all.find(" | exposed comm "), std::string::npos) << all;
    }
    // The state is exact arithmetic on both sides: 16 bytes per parameter of the rank's share.
    const double planned = j["planned"]["state_bytes"].get<double>(), got = j["measured"]["state_bytes"].get<double>();
    EXPECT_NEAR(planned, got, 0.02 * got) << layout;
    // The activations measured are the busiest rank's arena and its thread's kernel scratch, where the
    // logits tile lives: at least one micro-batch's rows (4 x 16, under the tile's 256) by the rank's
    // vocabulary shard (under the tile's 8,192) in fp32.
    const Json& me = j["measured"];
    const double vocab_shard = static_cast<double>(train::testing::parity_model().vocab) / (layout.empty() ? 1 : 2);
    EXPECT_GE(me["kernel_scratch_bytes"].get<double>(), 4.0 * 16 * vocab_shard * 4) << layout;
    EXPECT_DOUBLE_EQ(me["activation_bytes"].get<double>(),
                     me["arena_peak_bytes"].get<double>() + me["kernel_scratch_bytes"].get<double>());
    fs::remove(summary);
  }
}

// train.precision = bf16: the plan is the planner's bf16 one (said on the line), and the state it counts
// (fp32 master, AdamW moments and gradients, the bf16 weight copies FSDP gathers) is what the rank holds:
// 18 bytes per parameter on one rank, 2 P + 4 P + 16 P / dp on TP x DP (gathered bf16, full fp32
// gradients, the shard's master, reduced gradients and moments). A pipeline measures its saved
// activations apart: bf16 tensors and fp32 statistics, as model/activations.h counts them.
TEST_F(ProjectionCli, Bf16PlanAndStateMatchTheRun) {
  for (const std::string layout : {"", "--tp 2 --dp 2", "--pp 2 --parallel.microbatch_size=2"}) {
    const std::string summary = (dir_ / "p16.json").string();
    auto r = train(layout + " --precision bf16 --train.projection_file=" + summary);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string all = r.out + r.err;
    EXPECT_NE(all.find(layout.empty() ? " 1 rank, bf16, " : " ranks, bf16, "), std::string::npos) << all;
    const Json j = Json::parse(herd::testing::slurp(summary));
    EXPECT_EQ(j["precision"], "bf16");
    const double planned = j["planned"]["state_bytes"].get<double>(), got = j["measured"]["state_bytes"].get<double>();
    EXPECT_NEAR(planned, got, 0.02 * got) << layout;
    if (layout.find("--pp") != std::string::npos) {
      const double ps = j["planned"]["saved_activation_bytes"].get<double>();
      const double ms = j["measured"]["saved_activation_bytes"].get<double>();
      EXPECT_NEAR(ps, ms, 0.05 * ms) << layout;
    }
    fs::remove(summary);
  }
}

// The host speed probe (train/plan/host_speed.h) from a calibration that recorded one: a calibrated rate
// far above what any core here does clamps the ratio at 0.25, so the plan is 4x the plan at the
// calibrated speed, said on both lines and in the summary, on one rank and on thread ranks held at a
// barrier while rank 0 probes. Off unless projection.speed_probe=true, and absent from an older file.
TEST_F(ProjectionCli, AHostSlowerThanItsCalibrationIsPlannedAtItsProbedSpeed) {
  Json cluster = topology::cluster_to_json(*topology::cluster_preset("local-cpu"));
  const std::string older = (dir_ / "older.json").string();
  std::ofstream(older) << cluster.dump();
  cluster["calibration"] = {{"host_speed_probe_flops_per_s", 1e18}};
  const std::string fast = (dir_ / "fast.json").string();
  std::ofstream(fast) << cluster.dump();
  const std::string summary = (dir_ / "speed.json").string();
  for (const std::string layout : {"", "--dp 2"}) {
    auto r = train(layout + " --projection.cluster_file=" + fast + " --projection.speed_probe=true" +
                   " --train.projection_file=" + summary);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string all = r.out + r.err;
    EXPECT_NE(all.find(" background jobs, host at 0.25x its calibrated speed): step "), std::string::npos) << all;
    EXPECT_NE(all.find(" background jobs over the run, host at 0.25x its calibrated speed): step "), std::string::npos)
        << all;
    const Json j = Json::parse(herd::testing::slurp(summary));
    EXPECT_EQ(j["host_speed"]["probed"], true);
    EXPECT_DOUBLE_EQ(j["host_speed"]["ratio"].get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j["host_speed"]["at_start"].get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j["host_speed"]["at_end"].get<double>(), 0.25);
    const double planned = j["planned"]["step_s"].get<double>();
    EXPECT_NEAR(planned, 4 * j["planned"]["step_s_calibrated_speed"].get<double>(), 1e-9 * planned) << layout;
  }
  for (const std::string& args : {" --projection.cluster_file=" + fast,  // off by default
                                  " --projection.cluster_file=" + older + " --projection.speed_probe=true"}) {
    auto r = train(args + " --train.projection_file=" + summary);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ((r.out + r.err).find("host at "), std::string::npos) << r.out + r.err;
    const Json j = Json::parse(herd::testing::slurp(summary));
    EXPECT_EQ(j["host_speed"]["probed"], false) << args;
    EXPECT_DOUBLE_EQ(j["host_speed"]["ratio"].get<double>(), 1.0) << args;
    EXPECT_DOUBLE_EQ(j["planned"]["step_s"].get<double>(), j["planned"]["step_s_calibrated_speed"].get<double>());
  }
}

TEST_F(ProjectionCli, MalformedCalibrationFileIsOneLineAndTrainingGoesOn) {
  const std::string bad = (dir_ / "bad.json").string();
  std::ofstream(bad) << R"({"name": "x", "accelerator": {"name": "cpu", "peak_tflops": {"bf16": "fast"}}})";
  auto r = train(" --projection.cluster_file=" + bad);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string all = r.out + r.err;
  const auto at = all.find("planned: no projection (projection.cluster_file: " + bad);
  ASSERT_NE(at, std::string::npos) << all;
  const std::string line = all.substr(at, all.find('\n', at) - at);
  EXPECT_NE(line.find("accelerator.peak_tflops.bf16"), std::string::npos) << line;
  EXPECT_EQ(all.find("planned vs measured ("), std::string::npos) << all;
}

// `herd calibrate` at a toy size: a cluster file the planner loads, whose runtime efficiency comes
// from a real training step of the model it was given.
TEST_F(ProjectionCli, CalibrateWritesALoadableClusterWithARuntimeEfficiency) {
  const std::string out = (dir_ / "cal.json").string();
  auto r = herd::testing::run_herd("calibrate --model " + (dir_ / "config.json").string() +
                                   " --micro-batch 2 --seq-len 16 --repeats 1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("runtime efficiency"), std::string::npos) << r.out;
  Result<topology::Cluster> c = topology::load_cluster(out);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->name, "local-cpu");
  EXPECT_GT(c->accelerator.matmul_efficiency, 0.0);
  EXPECT_LE(c->accelerator.matmul_efficiency, 1.0);
  EXPECT_EQ(c->accelerator.memory_bw_efficiency, c->accelerator.matmul_efficiency);
  const Json j = Json::parse(herd::testing::slurp(out));
  EXPECT_GT(j["calibration"]["reference_step_s"].get<double>(), 0.0);
  EXPECT_GT(j["calibration"]["reference_step_kernels_only_s"].get<double>(), 0.0);
  // When and where it was taken, the load it saw, and every take of every measurement (two at least).
  const Json& rec = j["calibration"];
  EXPECT_EQ(rec["taken_at"].get<std::string>().size(), 20u) << rec["taken_at"];
  EXPECT_FALSE(rec["host"].get<std::string>().empty());
  EXPECT_TRUE(rec["other_runnable_processes"].is_array());
  EXPECT_FALSE(rec["loadavg"].get<std::string>().empty());
  ASSERT_GE(rec["measurements"].size(), 7u);
  // bf16 measured too: the bf16 GEMM rate is the bf16 peak, and the bf16 runtime's efficiencies.
  EXPECT_GT(rec["gemm_bf16_flops_per_s_one_thread"].get<double>(), 0.0);
  EXPECT_GT(rec["reference_step_bf16_s"].get<double>(), 0.0);
  // The bf16 reference step trains in bf16: on the same documents its loss is not fp32's. (Run in fp32,
  // the planner's bf16 runtime efficiency comes out at 0.41 on an AMD EPYC (Zen 5).)
  EXPECT_NE(rec["reference_step_bf16_loss"].get<double>(), rec["reference_step_loss"].get<double>());
  EXPECT_NEAR(rec["reference_step_bf16_loss"].get<double>(), rec["reference_step_loss"].get<double>(),
              0.01 * rec["reference_step_loss"].get<double>());
  EXPECT_DOUBLE_EQ(c->accelerator.peak_tflops_bf16, rec["gemm_bf16_flops_per_s_one_thread"].get<double>() / 1e12);
  for (double e : {c->accelerator.bf16_matmul_efficiency, c->accelerator.bf16_attention_fwd_efficiency,
                   c->accelerator.bf16_attention_bwd_efficiency, c->accelerator.bf16_memory_bw_efficiency}) {
    EXPECT_GT(e, 0.0);
    EXPECT_LE(e, 1.0);
  }
  for (const Json& m : rec["measurements"]) EXPECT_GE(m["takes"].size(), 2u) << m["what"];
  // Rank skew: rank 0's wait in the two-rank step beyond its collectives' fitted cost, over its compute,
  // is the speed variation the planner's sigma x sqrt(2 ln G) term gives back at G = 2.
  const double comm = rec["reference_step_distributed_comm_s"].get<double>();
  const double planned = rec["reference_step_distributed_planned_comm_s"].get<double>();
  const double wait = rec["reference_step_distributed_wait_s"].get<double>();
  EXPECT_GT(planned, 0.0);
  EXPECT_NEAR(wait, std::max(0.0, comm - planned), 1e-12);
  const double compute = rec["reference_step_distributed_s"].get<double>() - comm;
  EXPECT_NEAR(c->accelerator.speed_variation, std::clamp(wait / compute / std::sqrt(2.0 * std::log(2.0)), 0.0, 0.3),
              1e-9);
  // Thread scaling: from the one-rank step on every core against the one-thread step when that step ran
  // on a quiet host (an arithmetic check of what was written), else the GEMM's or the preset's, said so.
  const std::string source = rec["thread_scaling_source"].get<std::string>();
  if (usable_cores() > 1) {
    const double all = rec["reference_step_all_cores_s"].get<double>();
    EXPECT_GT(all, 0.0);
    const double cores = static_cast<double>(usable_cores());
    if (source == "training step") {
      EXPECT_NEAR(c->accelerator.thread_scaling,
                  std::clamp((rec["reference_step_s"].get<double>() / all - 1.0) / (cores - 1.0), 0.05, 1.0), 1e-9);
    } else {
      EXPECT_TRUE(source == "gemm" || source == "preset") << source;
    }
  }
  // The host speed probe around the reference steps: their mean, which `herd train` compares with its own.
  const double before = rec["host_speed_probe_flops_per_s_before"].get<double>();
  const double after = rec["host_speed_probe_flops_per_s_after"].get<double>();
  EXPECT_GT(before, 0.0);
  EXPECT_GT(after, 0.0);
  EXPECT_DOUBLE_EQ(rec["host_speed_probe_flops_per_s"].get<double>(), 0.5 * (before + after));
}

}  // namespace
}  // namespace herd::train

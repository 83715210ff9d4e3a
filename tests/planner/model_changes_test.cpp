// Terms of the published-run model, each against numbers computed by hand in the comments:
// spanning-group NIC bandwidth (and the published nccl-tests bus bandwidth of 8-GPU DGX nodes),
// the layer split, the software profiles, materialized attention, synchronous sends / gradient
// reduction after the backward, fp8 casts, the loss's traffic per software profile and the share of
// TP overlap a GPU realises (model_changes_cli_test.cpp: the same knobs through `herd estimate`).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "herd/model/params.h"
#include "herd/planner/cost.h"
#include "herd/planner/estimate.h"
#include "herd/planner/software.h"
#include "planner/round_cluster.h"

namespace herd::planner {
namespace {

using testing::costs, testing::k8b, testing::kGemmFwd, testing::kOne, testing::round_cluster;

// Residual stream An = 4096 x 4096 x 2 = 33,554,432 B; q + k Q = 4096 x 40 x 128 x 2 = 41,943,040 B;
// one MLP-width tensor F = 4096 x 14336 x 2 = 117,440,512 B.
constexpr double kAn = 33554432, kQ = 41943040, kF = 117440512;

// 1. A DP ring with 8 members in each node leaves it through 8 NICs, not one.
TEST(ModelChanges, SpanningGroupsUseOneNicPerMember) {
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  // 16 consecutive GPUs over 2 DGX H100 nodes: NVLink 450 x 0.75 = 337.5 GB/s; the leaf tier gives
  // k = 8 members per node x 50 x 0.85 = 340 GB/s (was 42.5, one NIC); the slower of the two: 337.5.
  EXPECT_NEAR(topology::link_for_group(dgx, 1, 16)->bw_bytes_per_s, 337.5e9, 1e6);
  // Published: ring all-reduce bus bandwidth over 4 HGX H100 nodes of 8 x 400 Gbps NICs, 365.8 GB/s
  // (NVIDIA/nccl-tests#309); within 8%.
  EXPECT_NEAR(topology::link_for_group(dgx, 1, 32)->bw_bytes_per_s / 365.84e9, 1.0, 0.08);
  // TP 2 below it: DP at stride 2 has 4 members per node: 4 x 42.5 = 170 GB/s.
  EXPECT_NEAR(topology::link_for_group(dgx, 2, 8)->bw_bytes_per_s, 170e9, 1e6);
  // One member per node (stride 8): one NIC, 42.5 GB/s, as before.
  EXPECT_NEAR(topology::link_for_group(dgx, 8, 4)->bw_bytes_per_s, 42.5e9, 1e6);
  // Llama 3's 1:7 aggregation at stride 2,048: 42.5 x 3072 / (7 x 2048) = 9.107 GB/s (docs 4.2).
  const topology::Cluster meta = *topology::cluster_preset("llama3-h100");
  EXPECT_NEAR(topology::link_for_group(meta, 2048, 8)->bw_bytes_per_s, 42.5e9 * 3072 / (7 * 2048.0), 1e6);
  // An oversubscribed node uplink caps the k channels: 8 NICs x 50 GB/s / 4 = 100 GB/s for the group.
  topology::Cluster over = round_cluster();
  over.tiers[1].oversubscription = 4;
  EXPECT_NEAR(topology::link_for_group(over, 1, 16)->bw_bytes_per_s, 100e9, 1e6);
}

// 2. auto: the split whose busiest pipeline rank is lighter.
TEST(ModelChanges, LayerSplitAutoComparesTheBusiestRank) {
  StepCosts c;
  c.layer.fwd_math = 1.0 / 3, c.layer.bwd_math = 2.0 / 3;  // one layer: 1
  c.embedding.fwd_math = 0.1, c.output.fwd_math = 0.5;
  Layout l;
  l.pp = 4;
  // 32 layers on 4 ranks. Even: 8 each, ranks 0 and 3 carry 8.1 and 8.5. Light ends: 7, 9, 9, 7
  // (34 slots over 4), the middle ranks carry 9. 8.5 < 9: even.
  EXPECT_EQ(resolve_layer_split(k8b, l, c), LayerSplit::kEven);
  // Embedding 1.5 and head 2: even's last rank carries 10; light ends 7 + 1.5, 9, 9, 7 + 2: 9. Light.
  c.embedding.fwd_math = 1.5, c.output.fwd_math = 2;
  EXPECT_EQ(resolve_layer_split(k8b, l, c), LayerSplit::kLightEnds);
  l.layer_split = LayerSplit::kEven;
  EXPECT_EQ(resolve_layer_split(k8b, l, c), LayerSplit::kEven);
  // 405B on PP 16 x V 8: 126 layers cannot fill 128 stages evenly, so auto places them with light ends,
  // and an explicit even split is refused by name.
  const model::LlamaConfig big = *model::preset("llama3-405b");
  Layout m;
  m.tp = 8, m.pp = 16, m.dp = 128, m.v = 8, m.recompute = model::Recompute::kSelective;
  const topology::Cluster meta = *topology::cluster_preset("llama3-h100");
  const TrainingSpec t{8192, 2048};
  EXPECT_EQ(resolve_layer_split(big, m, c), LayerSplit::kLightEnds);
  m.layer_split = LayerSplit::kEven;
  Status s = validate_layout(big, meta, t, m, 16384);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("cannot fill"), std::string::npos);
}

// 3. Software profiles.
TEST(ModelChanges, EagerProfileCostsUnfusedElementwiseAndFa2) {
  const StepCosts fused = costs(kOne);
  TrainingSpec eager_t = kOne;
  eager_t.system.software = Software::kEager;
  const StepCosts eager = costs(eager_t);
  // Attention: 4 x 32 heads x 128 x 4096 x 4097 / 2 pairs = 1.37468e11 FLOPs, at 0.5 of 1e15 fused and
  // 0.25 eager: 2.749e-4 s more forward. Elementwise: (42 - 10) An + (10 - 2) Q + (5 - 3) F =
  // 1,644,167,168 B at 1e13 B/s = 1.644e-4 s. GEMMs (compute-bound, split or fused) are equal.
  const double attn = 4.0 * 32 * 128 * 4096 * 4097 / 2;
  const double d_fwd = attn / 0.25e15 - attn / 0.5e15 + (32 * kAn + 8 * kQ + 2 * kF) / 1e13;
  EXPECT_NEAR(eager.layer.fwd_math - fused.layer.fwd_math, d_fwd, 1e-3 * d_fwd);
  // Op-level selective checkpointing replays every second forward matmul: the backward grows by the
  // elementwise rebuild (4 An + 3 F = 486,539,264 B -> 4.865e-5 s) + 0.5 x 1.78671e-3 s.
  TrainingSpec sel = eager_t;
  const double d_sel = costs(sel, model::Recompute::kSelective).layer.bwd_math - eager.layer.bwd_math;
  EXPECT_NEAR(d_sel, (4 * kAn + 3 * kF) / 1e13 + 0.5 * kGemmFwd, 1e-3 * d_sel);
  // NCCL's 16 channels take 16 of an H100's 132 SMs: 12.1% of an overlapped span.
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  EXPECT_NEAR(software_profile(Software::kFused, dgx.accelerator).overlap_slowdown, 16.0 / 132, 1e-12);
  EXPECT_NEAR(software_profile(Software::kEager, dgx.accelerator).attention_fwd_efficiency, 0.33, 1e-12);
}

// 4. Materialized attention.
TEST(ModelChanges, MaterializedAttentionPaysForTheScores) {
  const StepCosts flash = costs(kOne);
  TrainingSpec mt = kOne;
  mt.system.attention = Attention::kMaterialized;
  const StepCosts mat = costs(mt);
  // Scores: 32 heads x 4096 x 4096 = 536,870,912. Forward: QK^T and PV, 2 x 2 x 32 x 4096^2 x 128 FLOPs
  // = 2.749e-4 s at 1e15, + softmax and dropout 9 B per score = 4.832e-4 s; flash: 1.37468e11 / 5e14.
  const double scores = 32.0 * 4096 * 4096;
  const double mat_fwd = 4.0 * scores * 128 / 1e15 + 9 * scores / 1e13;
  const double flash_fwd = 4.0 * 32 * 128 * 4096 * 4097 / 2 / 0.5e15;
  EXPECT_NEAR(mat.layer.fwd_math - flash.layer.fwd_math, mat_fwd - flash_fwd, 1e-6);
  // Backward: four GEMMs (2x the forward's) + 11 B per score, against flash's 2.5x at 0.5.
  const double mat_bwd = 8.0 * scores * 128 / 1e15 + 11 * scores / 1e13;
  EXPECT_NEAR(mat.layer.bwd_math - flash.layer.bwd_math, mat_bwd - 2.5 * flash_fwd, 1e-6);
  // The kept core: 5 bytes per score = 2,684,354,560 B more per layer.
  EXPECT_NEAR(mat.layer_activation_bytes - flash.layer_activation_bytes, 5 * scores, 1);
  // Selective recompute drops exactly those bytes (the norms are kept: recompute none's saved set) and
  // replays the core's forward in the backward.
  const StepCosts sel = costs(mt, model::Recompute::kSelective);
  EXPECT_NEAR(sel.layer_activation_bytes, flash.layer_activation_bytes, 1);
  EXPECT_NEAR(sel.layer.bwd_math - mat.layer.bwd_math, mat.layer.fwd_math - flash.layer.fwd_math + flash_fwd, 1e-6);
}

// 5. Synchronous sends and gradient reduction after the backward.
TEST(ModelChanges, SyncSendsAndNoDpOverlapExposeTheirTransfers) {
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  Layout l;
  l.tp = 8, l.pp = 2, l.dp = 2, l.zero = 0;
  TrainingSpec t{8192, 16};
  const Estimate on = *estimate(k8b, dgx, t, l, 32);
  TrainingSpec off_t = t;
  off_t.system.dp_overlap = false;
  const Estimate off = *estimate(k8b, dgx, off_t, l, 32);
  // ZeRO-0: one fp32 all-reduce of the rank's parameters, all of it exposed when not overlapped.
  EXPECT_DOUBLE_EQ(off.time.dp_s, off.comm[3].total_s);
  EXPECT_LT(on.time.dp_s, off.time.dp_s);
  // The hidden part slows compute by 16/132 of its length; with nothing hidden, nothing is lost.
  EXPECT_NEAR(on.time.compute_s - off.time.compute_s, 16.0 / 132 * (on.comm[3].total_s - on.time.dp_s), 1e-9);
  TrainingSpec sync_t = t;
  sync_t.system.async_sends = false;
  const Estimate sync = *estimate(k8b, dgx, sync_t, l, 32);
  // A synchronous sender waits for each transfer: the p2p delay grows, by at most every send once.
  EXPECT_GT(sync.time.pp_s, on.time.pp_s);
  EXPECT_LE(sync.time.pp_s - on.time.pp_s, on.comm[2].total_s + 1e-12);
}

// 6. fp8: GEMMs at twice the rate, casts costed at HBM speed, an fp8 weight copy.
TEST(ModelChanges, Fp8HalvesGemmsAndPaysForCasts) {
  const StepCosts bf16 = costs(kOne);
  TrainingSpec ft = kOne;
  ft.precision = Precision::kFP8;
  const StepCosts fp8 = costs(ft);
  // Casts per layer forward: 4 B x (rows x inputs: 4096 x 26,624 = 109,051,904, + weights / M:
  // 218,103,808 / 8 = 27,262,976) = 5.4526e-4... / 1e13 -> 5.4526e-5 s; GEMMs 1.78671e-3 -> half.
  const double cast_fwd = 4.0 * (4096.0 * 26624 + 218103808.0 / 8) / 1e13;
  EXPECT_NEAR(fp8.layer.fwd_math - bf16.layer.fwd_math, cast_fwd - kGemmFwd / 2, 1e-7);
  // Backward: output-gradient casts 4 B x 4096 x 43,008 = 7.0464e-5 s; dgrad + wgrad halve.
  const double cast_bwd = 4.0 * 4096 * 43008 / 1e13;
  EXPECT_NEAR(fp8.layer.bwd_math - bf16.layer.bwd_math, cast_bwd - kGemmFwd, 1e-7);
  // Memory: the fp8 weight and its transpose, 2 B per layer parameter, on top of the bf16 weights.
  Layout l;
  const Estimate eb = *estimate(k8b, round_cluster(), kOne, l, 1);
  const Estimate ef = *estimate(k8b, round_cluster(), ft, l, 1);
  const double layer_params = 32.0 * static_cast<double>(model::layer_params_tp_shard(k8b, 1).total());
  EXPECT_NEAR(ef.memory.part("parameters") - eb.memory.part("parameters"), 2 * layer_params, 1);
}

// fp8 GEMMs at the accelerator's own fp8 fraction (matmul_efficiency_fp8), the rest unchanged.
TEST(ModelChanges, Fp8GemmsUseTheirOwnFraction) {
  TrainingSpec ft = kOne;
  ft.precision = Precision::kFP8;
  topology::Cluster c = round_cluster();
  Layout l;
  const StepCosts same = *step_costs(k8b, c, ft, l);
  c.accelerator.matmul_efficiency_fp8 = 0.8;
  const StepCosts slower = *step_costs(k8b, c, ft, l);
  // Forward GEMMs 1.78671e-3 / 2 s at fraction 1 take 1 / 0.8 as long: + 0.25 x 8.93355e-4 s; dgrad and
  // wgrad twice that. Attention, casts and the output head (bf16) do not move.
  EXPECT_NEAR(slower.layer.fwd_math - same.layer.fwd_math, 0.25 * kGemmFwd / 2, 1e-8);
  EXPECT_NEAR(slower.layer.bwd_math - same.layer.bwd_math, 0.25 * kGemmFwd, 1e-8);
  EXPECT_DOUBLE_EQ(slower.output.fwd_math, same.output.fwd_math);
  // bf16 ignores it.
  EXPECT_DOUBLE_EQ(step_costs(k8b, c, kOne, l)->layer.fwd_math, costs(kOne).layer.fwd_math);
  // Presets: the measured fp8 fractions (Bekman's MAMF table) x 0.9: H100 1402.6 / 1979 -> 0.638, H200
  // 1453.4 / 1979 -> 0.661; bf16 stays 0.72.
  EXPECT_NEAR(topology::cluster_preset("dgx-h100")->accelerator.matmul_efficiency_fp8, 0.9 * 1402.6 / 1979, 5e-4);
  EXPECT_NEAR(topology::cluster_preset("h200")->accelerator.matmul_efficiency_fp8, 0.9 * 1453.4 / 1979, 5e-4);
  EXPECT_DOUBLE_EQ(topology::cluster_preset("h200")->accelerator.matmul_efficiency, 0.72);
  // A cluster file may give it; out of [0, 1] it is refused with its name.
  Json j = topology::cluster_to_json(c);
  EXPECT_DOUBLE_EQ(topology::cluster_from_json(j)->accelerator.matmul_efficiency_fp8, 0.8);
  j["accelerator"]["matmul_efficiency_fp8"] = 1.5;
  const Result<topology::Cluster> bad = topology::cluster_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("accelerator.matmul_efficiency_fp8"), std::string::npos);
}

// The softmax cross-entropy after the output head moves each profile's bytes per local logit.
TEST(ModelChanges, LossTrafficFollowsTheSoftwareProfile) {
  // llama3-8b, one accelerator: 4,096 rows x 128,256 ids = 525,336,576 logits per micro-batch, at the
  // round accelerator's 1e13 B/s. herd's tiled loss: 8 B a logit each way (4.2027e-4 s). Megatron's
  // vocab-parallel cross-entropy (fused): 38 forward, 14 backward; PyTorch's F.cross_entropy on fp32
  // logits (eager, compiled): 22 and 26. Nothing else in the output piece depends on the profile.
  const double logits = 4096.0 * 128256;
  auto output = [](Software sw) {
    TrainingSpec t = kOne;
    t.system.software = sw;
    return costs(t).output;
  };
  const PieceCost herd = output(Software::kHerd), fused = output(Software::kFused);
  const PieceCost eager = output(Software::kEager), compiled = output(Software::kCompiled);
  EXPECT_NEAR(fused.fwd_math - herd.fwd_math, (38 - 8) * logits / 1e13, 1e-9);
  EXPECT_NEAR(fused.bwd_math - herd.bwd_math, (14 - 8) * logits / 1e13, 1e-9);
  EXPECT_NEAR(eager.fwd_math - herd.fwd_math, (22 - 8) * logits / 1e13, 1e-9);
  EXPECT_NEAR(eager.bwd_math - herd.bwd_math, (26 - 8) * logits / 1e13, 1e-9);
  EXPECT_DOUBLE_EQ(compiled.fwd_math, eager.fwd_math);
  EXPECT_DOUBLE_EQ(compiled.bwd_math, eager.bwd_math);
  // The layers do not move: the loss belongs to the last stage's output piece only.
  TrainingSpec t_herd = kOne, t_fused = kOne;
  t_herd.system.software = Software::kHerd;
  EXPECT_DOUBLE_EQ(costs(t_herd).embedding.fwd_math, costs(t_fused).embedding.fwd_math);
}

// Of the TP time the chunked overlap would hide, a GPU hides kTpOverlapHiddenShareGpu (0.40); an
// accelerator without SMs (the round one, a TPU) keeps the schedule's whole hiding.
TEST(ModelChanges, TpOverlapOnAGpuHidesItsMeasuredShare) {
  EXPECT_DOUBLE_EQ(kTpOverlapHiddenShareGpu, 0.40);
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  EXPECT_DOUBLE_EQ(software_profile(Software::kFused, dgx.accelerator).tp_overlap_hidden_share, 0.40);
  EXPECT_DOUBLE_EQ(software_profile(Software::kCompiled, dgx.accelerator).tp_overlap_hidden_share, 0.40);
  const topology::Cluster tpu = *topology::cluster_preset("tpu-v5p");
  EXPECT_DOUBLE_EQ(software_profile(Software::kFused, tpu.accelerator).tp_overlap_hidden_share, 1.0);
  // TP 2 on an H100 node, sequence parallelism: every collective c is shorter than the GEMM it pairs
  // with, so the schedule exposes c / 2 of each (system_knobs_test.cpp); forward 4 pairs: 4c without
  // overlap, 2c with the schedule's whole hiding. A GPU hides 0.40 of the 2c: 4c - 0.8c = 3.2c exposed,
  // and the hidden 0.8c costs 16 / 132 of its length in compute.
  Layout l;
  l.tp = 2;
  TrainingSpec ov = kOne;
  ov.system.tp_overlap = true;
  const StepCosts plain = *step_costs(k8b, dgx, kOne, l), on = *step_costs(k8b, dgx, ov, l);
  const double c4 = plain.layer.fwd_tp;  // 4c
  EXPECT_NEAR(on.layer.fwd_tp, c4 - 0.40 * c4 / 2, 1e-12);
  EXPECT_NEAR(on.layer.bwd_tp, plain.layer.bwd_tp - 0.40 * plain.layer.bwd_tp / 2, 1e-12);
  EXPECT_NEAR(on.layer.tp_hidden, 0.40 * (c4 + plain.layer.bwd_tp) / 2, 1e-12);
  EXPECT_NEAR(on.layer.fwd_math - plain.layer.fwd_math, 16.0 / 132 * 0.40 * c4 / 2, 1e-12);
  // Without SMs the schedule's whole hiding stands: 2c exposed forward.
  const StepCosts r_plain = costs(kOne, l), r_on = costs(ov, l);
  EXPECT_NEAR(r_on.layer.fwd_tp, r_plain.layer.fwd_tp / 2, 1e-12);
}

}  // namespace
}  // namespace herd::planner

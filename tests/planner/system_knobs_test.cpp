// The system knobs added for the published runs (docs/planner.md section 3 and 4.4), each against
// numbers computed by hand in the comments: gradient accumulation fusion (--grad-acc-fusion), TP
// communication pipelined with its GEMMs (--tp-overlap), the ZeRO-1/2 parameter all-gather overlapped
// with the next forward (--dp-overlap on), gradients accumulated and reduced in bf16 (--grad-dtype),
// and the compiled (torch.compile) and herd software profiles.
#include <gtest/gtest.h>

#include "herd/model/params.h"
#include "herd/planner/cost.h"
#include "herd/planner/estimate.h"
#include "herd/planner/software.h"
#include "planner/round_cluster.h"

namespace herd::planner {
namespace {

using testing::costs, testing::k8b, testing::kGemmFwd, testing::kOne, testing::round_cluster;

TEST(SystemKnobs, GradAccFusionFoldsTheAccumulationIntoTheWgradGemm) {
  // A weight-gradient GEMM accumulating into fp32: C (m x n) read and written at 8 bytes. With m = n =
  // 4096 and k = 16 the GEMM is memory-bound: (4096 x 16 + 16 x 4096) x 2 + 4096 x 4096 x 8 =
  // 134,479,872 B at 1e13 B/s = 1.34480e-5 s (its FLOPs, 5.4e8, take 5.4e-7 s).
  const topology::Accelerator acc = round_cluster().accelerator;
  EXPECT_NEAR(gemm_accumulate_s(4096, 4096, 16, 1e15, 2, 8, acc), 134479872.0 / 1e13, 1e-12);
  EXPECT_NEAR(gemm_s(4096, 4096, 16, 1e15, 2, acc), (2.0 * 4096 * 16 * 2 + 4096.0 * 4096 * 2) / 1e13, 1e-12);
  // llama3-8b's layer wgrad GEMMs stay compute-bound with the fp32 C (q/k/v: 2.06e11 FLOPs = 2.06e-4 s
  // against 2.85e-5 s of bytes), so fusion only removes the separate pass: 12 bytes per layer parameter
  // (bf16 gradient written 2, read back 2, fp32 buffer read 4 and written 4).
  const StepCosts off = costs(kOne);
  TrainingSpec on_t = kOne;
  on_t.system.grad_acc_fusion = true;
  const StepCosts on = costs(on_t);
  const double layer_params = static_cast<double>(model::layer_params_tp_shard(k8b, 1).total());
  EXPECT_NEAR(off.layer.bwd_math - on.layer.bwd_math, 12.0 * layer_params / 1e13, 1e-12);
  EXPECT_DOUBLE_EQ(off.layer.fwd_math, on.layer.fwd_math);
  // The output head: its fp32 gradient update (8 bytes per weight) moves into the GEMM's epilogue.
  const double head = static_cast<double>(model::model_params_tp_shard(k8b, 1).output);
  EXPECT_NEAR(off.output.bwd_math - on.output.bwd_math, 8.0 * head / 1e13, 1e-12);
  // fp32 runs (herd's CPU runtime) never had the separate pass: fusion changes nothing there.
  TrainingSpec f32 = kOne, f32_on = kOne;
  f32.precision = f32_on.precision = Precision::kFP32;
  f32_on.system.grad_acc_fusion = true;
  EXPECT_DOUBLE_EQ(costs(f32).layer.bwd_math, costs(f32_on).layer.bwd_math);
}

TEST(SystemKnobs, TpOverlapExposesTheFirstChunkOrWhatTheGemmCannotCover) {
  // A collective of c seconds in tp chunks beside a GEMM of g seconds: max(c, g) + min(c, g) / tp - g.
  EXPECT_DOUBLE_EQ(tp_overlapped_exposed_s(1.0, 3.0, 4), 0.25);  // GEMM-bound: the first chunk
  EXPECT_DOUBLE_EQ(tp_overlapped_exposed_s(3.0, 1.0, 4), 2.25);  // comm-bound: 3 - 1 + 1/4
  EXPECT_DOUBLE_EQ(tp_overlapped_exposed_s(0.0, 1.0, 4), 0.0);
  // TP 2 with sequence parallelism: every all-gather or reduce-scatter of the 4096 x 4096 bf16 stream
  // (33,554,432 B) takes 1 ring step x 3 us + 1/2 x 33,554,432 / 337.5e9 = 5.27106e-5 s. Every GEMM it
  // pairs with is longer (the shortest, o and its dgrad: 2 x 4096 x 4096 x 2048 = 6.87e10 FLOPs =
  // 6.87e-5 s), so each pair exposes c / 2: forward 4 pairs = 2c (4c without overlap), backward 6
  // pairs = 3c (6c).
  const double c = 3e-6 + 0.5 * 33554432.0 / 337.5e9;
  Layout l;
  l.tp = 2;
  const StepCosts plain = costs(kOne, l);
  EXPECT_NEAR(plain.layer.fwd_tp, 4 * c, 1e-12);
  EXPECT_NEAR(plain.layer.bwd_tp, 6 * c, 1e-12);
  TrainingSpec ov = kOne;
  ov.system.tp_overlap = true;
  const StepCosts overlapped = costs(ov, l);
  EXPECT_NEAR(overlapped.layer.fwd_tp, 2 * c, 1e-12);
  EXPECT_NEAR(overlapped.layer.bwd_tp, 3 * c, 1e-12);
  // What it hides is kept for the report (the TP row's total): 2c + 3c, and nothing without overlap.
  EXPECT_NEAR(overlapped.layer.tp_hidden, 5 * c, 1e-12);
  EXPECT_DOUBLE_EQ(plain.layer.tp_hidden, 0.0);
  // Full recompute replays the forward's four pairs: 2c more exposed and 2c more hidden.
  Layout full = l;
  full.recompute = model::Recompute::kFull;
  EXPECT_NEAR(costs(ov, full).layer.tp_hidden, 7 * c, 1e-12);
  EXPECT_NEAR(costs(ov, full).layer.bwd_tp, 5 * c, 1e-12);
  // The round accelerator has no SM count, so the hidden part costs no compute here ...
  EXPECT_DOUBLE_EQ(overlapped.layer.fwd_math, plain.layer.fwd_math);
  // ... on an H100 the hidden span costs 16 of 132 SMs (the same NCCL-channel share as DP overlap).
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  const StepCosts h_plain = *step_costs(k8b, dgx, kOne, l), h_ov = *step_costs(k8b, dgx, ov, l);
  const double hidden_f = h_plain.layer.fwd_tp - h_ov.layer.fwd_tp;
  EXPECT_GT(hidden_f, 0);
  EXPECT_NEAR(h_ov.layer.fwd_math - h_plain.layer.fwd_math, 16.0 / 132 * hidden_f, 1e-12);
  // Without sequence parallelism (all-reduces) neither userbuffers nor async TP applies.
  l.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(costs(ov, l).layer.fwd_tp, costs(kOne, l).layer.fwd_tp);
}

// The estimate's TP row: with the overlap its total is the collectives' whole time (the same as
// without overlap, where all of it is exposed) and its exposed part is what the step pays.
TEST(SystemKnobs, TpRowReportsTheWholeCollectiveTimeAndWhatTheOverlapLeavesExposed) {
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  Layout l;
  l.tp = 8;
  l.dp = 2;
  TrainingSpec ov = kOne;
  ov.system.tp_overlap = true;
  const Estimate on = *estimate(k8b, dgx, ov, l, 16), off = *estimate(k8b, dgx, kOne, l, 16);
  auto tp_row = [](const Estimate& e) {
    for (const DimComm& d : e.comm) {
      if (d.dim == "tp") return d;
    }
    ADD_FAILURE() << "no tp row";
    return DimComm{};
  };
  const DimComm r_on = tp_row(on), r_off = tp_row(off);
  EXPECT_DOUBLE_EQ(r_off.total_s, r_off.exposed_s);
  EXPECT_NEAR(r_on.total_s, r_off.total_s, 1e-12 * r_off.total_s);
  EXPECT_DOUBLE_EQ(r_on.exposed_s, on.time.tp_s);
  // The schedule would hide more than half (a GEMM-bound pair exposes 1/8 of its collective); an H100
  // hides 0.40 of that (kTpOverlapHiddenShareGpu): at least a fifth of the whole.
  EXPECT_LT(r_on.exposed_s, 0.8 * r_on.total_s);
  EXPECT_GT(r_on.exposed_s, 0.6 * r_on.total_s);
  EXPECT_NE(r_on.overlap.find("--tp-overlap on"), std::string::npos) << r_on.overlap;
  EXPECT_NE(r_off.overlap.find("no overlap assumed"), std::string::npos) << r_off.overlap;
}

TEST(SystemKnobs, ZeroOneParameterGatherOverlapsTheNextForward) {
  // llama3-8b, TP 8 in a DGX H100, DP 2 across nodes, ZeRO-1: a reduce-scatter of the fp32 gradients
  // and an all-gather of the updated bf16 parameters per step.
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  Layout l;
  l.tp = 8, l.dp = 2, l.zero = 1;
  const TrainingSpec t{8192, 16};
  TrainingSpec off_t = t;
  off_t.system.dp_overlap = false;
  const Estimate on = *estimate(k8b, dgx, t, l, 16), off = *estimate(k8b, dgx, off_t, l, 16);
  // Off: both after the backward, all exposed.
  EXPECT_DOUBLE_EQ(off.time.dp_s, off.comm[3].total_s);
  // On: of the gather only its first layer stays exposed (the next forward covers the rest), so the
  // exposed DP time drops by at least the gather less one layer's gather. Rank 0 holds 32 layers, the
  // embedding and the head: the bf16 gather of all of them against that of one layer.
  const topology::GroupLink link = *topology::link_for_group(dgx, 8, 2);
  const model::ModelParams mp = model::model_params_tp_shard(k8b, 8);
  const double unit = static_cast<double>(model::layer_params_tp_shard(k8b, 8).total());
  const double p = 32 * unit + static_cast<double>(mp.embedding + mp.output);
  const double ag = all_gather_s(2 * p, 2, link), ag_unit = all_gather_s(2 * unit, 2, link);
  EXPECT_LE(on.time.dp_s, off.time.dp_s - ag + ag_unit + 1e-12);
  EXPECT_GE(on.time.dp_s, ag_unit);
  EXPECT_NE(on.comm[3].overlap.find("overlapped with the next forward"), std::string::npos) << on.comm[3].overlap;
}

TEST(SystemKnobs, Bf16GradientsHalveTheAccumulationTheReductionAndTheBuffer) {
  // The separate accumulation pass moves 2 + 2 + 2 + 2 = 8 bytes per layer parameter instead of 12.
  TrainingSpec bf = kOne;
  bf.system.bf16_grads = true;
  const double layer_params = static_cast<double>(model::layer_params_tp_shard(k8b, 1).total());
  EXPECT_NEAR(costs(kOne).layer.bwd_math - costs(bf).layer.bwd_math, 4.0 * layer_params / 1e13, 1e-12);
  // With fusion the wgrad GEMM's C moves 4 bytes instead of 8: the memory-bound example of the fusion
  // test, (4096 x 16 + 16 x 4096) x 2 + 4096 x 4096 x 4 = 67,371,008 B.
  EXPECT_NEAR(gemm_accumulate_s(4096, 4096, 16, 1e15, 2, 4, round_cluster().accelerator), 67371008.0 / 1e13, 1e-12);
  // DP: plain data parallelism over 2 nodes (TP 8, DP 2, ZeRO-0, reduction after the backward): the
  // all-reduce of the rank's gradients at 2 bytes takes the 4-byte one's bandwidth term halved.
  const topology::Cluster dgx = *topology::cluster_preset("dgx-h100");
  Layout l;
  l.tp = 8, l.dp = 2, l.zero = 0;
  TrainingSpec t{8192, 16};
  t.system.dp_overlap = false;
  TrainingSpec tb = t;
  tb.system.bf16_grads = true;
  const Estimate e32 = *estimate(k8b, dgx, t, l, 16), e16 = *estimate(k8b, dgx, tb, l, 16);
  const topology::GroupLink link = *topology::link_for_group(dgx, 8, 2);
  const model::ModelParams mp = model::model_params_tp_shard(k8b, 8);
  const double p = 32 * static_cast<double>(model::layer_params_tp_shard(k8b, 8).total()) +
                   static_cast<double>(mp.embedding + mp.output);
  EXPECT_NEAR(e32.time.dp_s, all_reduce_s(4 * p, 2, link), 1e-12);
  EXPECT_NEAR(e16.time.dp_s, all_reduce_s(2 * p, 2, link), 1e-12);
  EXPECT_NE(e16.comm[3].overlap.find("bf16 all-reduce"), std::string::npos) << e16.comm[3].overlap;
  // Memory: the layers' accumulation buffer (ZeRO-0 keeps no shard; the embedding and head are counted
  // apart) at 2 bytes per parameter.
  const double layers = 32 * static_cast<double>(model::layer_params_tp_shard(k8b, 8).total());
  EXPECT_NEAR(e32.memory.part("gradients"), 4 * layers, 1);
  EXPECT_NEAR(e16.memory.part("gradients"), 2 * layers, 1);
  // fp32 runs keep fp32 gradients whatever the flag says.
  TrainingSpec f32 = kOne;
  f32.precision = Precision::kFP32;
  f32.system.bf16_grads = true;
  EXPECT_EQ(f32.system.grad_bytes(f32.precision), 4.0);
}

TEST(SystemKnobs, CompiledProfileFusesElementwiseButKeepsPytorchGemmsAndSdpa) {
  const StepCosts fused = costs(kOne);
  TrainingSpec ct = kOne;
  ct.system.software = Software::kCompiled;
  const StepCosts compiled = costs(ct);
  // Elementwise traffic as the fused kernels'; GEMMs split but compute-bound (equal); attention at
  // PyTorch SDPA's FlashAttention-2 rate: 1.37468e11 FLOPs at 0.25 instead of 0.5 of 1e15 forward.
  const double attn = 4.0 * 32 * 128 * 4096 * 4097 / 2;
  EXPECT_NEAR(compiled.layer.fwd_math - fused.layer.fwd_math, attn / 0.25e15 - attn / 0.5e15, 1e-9);
  EXPECT_NEAR(compiled.layer.bwd_math - fused.layer.bwd_math, 2.5 * (attn / 0.25e15 - attn / 0.5e15), 1e-9);
  // Selective recompute is PyTorch's op-level policy: half the forward GEMM time replayed on top of the
  // elementwise rebuild the fused profile also pays.
  Layout sel;
  sel.recompute = model::Recompute::kSelective;
  const double d_sel = costs(ct, sel).layer.bwd_math - compiled.layer.bwd_math;
  const double d_sel_fused = costs(kOne, sel).layer.bwd_math - fused.layer.bwd_math;
  EXPECT_NEAR(d_sel - d_sel_fused, 0.5 * kGemmFwd, 1e-9);
  const SoftwareProfile p = software_profile(Software::kCompiled, round_cluster().accelerator);
  EXPECT_FALSE(p.fused_projections);
  EXPECT_EQ(p.launches_fwd, software_profile(Software::kFused, round_cluster().accelerator).launches_fwd);
}

// herd's own runtime as a profile: the fused kernels (the same forward), the weight gradients summed
// into the fp32 buffer by the GEMM itself (12 bytes per layer parameter fewer, as --grad-acc-fusion),
// full recompute without the down projection (2 x 4096 x 4096 x 14336 FLOPs of llama3-8b fewer), and
// collectives on the compute threads only where the cluster is a CPU host.
TEST(SystemKnobs, HerdProfileIsTheFusedKernelsWithHerdsAccumulationAndRecompute) {
  TrainingSpec ht = kOne;
  ht.system.software = Software::kHerd;
  const StepCosts fused = costs(kOne), herd = costs(ht);
  const double layer_params = static_cast<double>(model::layer_params_tp_shard(k8b, 1).total());
  EXPECT_DOUBLE_EQ(herd.layer.fwd_math, fused.layer.fwd_math);
  EXPECT_NEAR(fused.layer.bwd_math - herd.layer.bwd_math, 12.0 * layer_params / 1e13, 1e-12);
  Layout full;
  full.recompute = model::Recompute::kFull;
  const double replay_fused = costs(kOne, full).layer.bwd_math - fused.layer.bwd_math;
  const double replay_herd = costs(ht, full).layer.bwd_math - herd.layer.bwd_math;
  EXPECT_NEAR(replay_fused - replay_herd, 2.0 * 4096 * 4096 * 14336 / 1e15, 1e-12);
  topology::Accelerator acc = round_cluster().accelerator;
  EXPECT_FALSE(software_profile(Software::kHerd, acc).collectives_on_compute_threads);
  const SoftwareProfile f = software_profile(Software::kFused, acc);
  EXPECT_FALSE(f.weight_grads_in_place || f.recompute_keeps_down_projection || f.tiled_logits || f.flat_unit_gradients);
  acc.host_cores = 2;
  const SoftwareProfile h = software_profile(Software::kHerd, acc);
  EXPECT_TRUE(h.collectives_on_compute_threads && h.weight_grads_in_place && h.recompute_keeps_down_projection &&
              h.tiled_logits && h.flat_unit_gradients);
  EXPECT_FALSE(software_profile(Software::kFused, acc).collectives_on_compute_threads);
}

}  // namespace
}  // namespace herd::planner

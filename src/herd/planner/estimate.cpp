#include "herd/planner/estimate.h"

#include <algorithm>
#include <cmath>

#include "herd/core/format.h"
#include "herd/model/params.h"
#include "herd/planner/software.h"

namespace herd::planner {

schedule::ScheduleSpec schedule_spec(const Layout& l, const TrainingSpec& train) {
  schedule::ScheduleSpec s;
  s.pp = static_cast<int>(l.pp);
  s.v = l.v;
  s.microbatches = static_cast<int>(l.microbatches(train));
  s.n = l.n_resolved(train);
  s.kind = l.schedule;
  return s;
}

namespace {

struct RankSums {
  double math = 0, tp = 0, cp = 0, fwd = 0, bwd = 0;
  double tp_hidden = 0;  // TP collectives the overlap hides (not in the step; the TP row's total)
};

// Exposed time of a stream of collectives split into units that become ready one after another: the
// first (or last) unit is always exposed, the rest hide behind `window` seconds of compute.
double exposed(double total, double unit, double window) {
  if (total <= 0) return 0;
  unit = std::min(unit, total);
  return unit + std::max(0.0, total - unit - window);
}

}  // namespace

namespace {

// Busiest pipeline rank's forward + backward time per micro-batch under an assignment: its chunks'
// layers, plus the embedding on virtual stage 0 and the output head on the last.
double busiest_rank_s(const schedule::LayerAssignment& a, int pp, const StepCosts& c) {
  const int stages = static_cast<int>(a.layers.size());
  std::vector<double> rank(pp, 0.0);
  for (int s = 0; s < stages; ++s) {
    double x = static_cast<double>(a.layers[s].size()) * (c.layer.fwd() + c.layer.bwd());
    if (s == 0) x += c.embedding.fwd() + c.embedding.bwd();
    if (s == stages - 1) x += c.output.fwd() + c.output.bwd();
    rank[s % pp] += x;
  }
  return *std::max_element(rank.begin(), rank.end());
}

}  // namespace

LayerSplit resolve_layer_split(const model::LlamaConfig& cfg, const Layout& l, const StepCosts& c) {
  if (l.layer_split != LayerSplit::kAuto) return l.layer_split;
  const int layers = static_cast<int>(cfg.n_layers), pp = static_cast<int>(l.pp);
  Result<schedule::LayerAssignment> even = schedule::assign_layers(layers, pp, l.v, false);
  if (!even.ok()) return LayerSplit::kLightEnds;  // fewer layers than stages: only light ends place them
  Result<schedule::LayerAssignment> light = schedule::assign_layers(layers, pp, l.v, true);
  if (!light.ok()) return LayerSplit::kEven;
  return busiest_rank_s(*light, pp, c) < busiest_rank_s(*even, pp, c) ? LayerSplit::kLightEnds : LayerSplit::kEven;
}

Result<schedule::LayerAssignment> layer_assignment(const model::LlamaConfig& cfg, const Layout& l, const StepCosts& c) {
  return schedule::assign_layers(static_cast<int>(cfg.n_layers), static_cast<int>(l.pp), l.v,
                                 resolve_layer_split(cfg, l, c) == LayerSplit::kLightEnds);
}

Result<Estimate> estimate(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                          const Layout& layout, std::int64_t gpus, const EstimateOptions& options) {
  HERD_RETURN_IF_ERROR(validate_layout(cfg, cluster, train, layout, gpus));
  HERD_ASSIGN_OR_RETURN(const StepCosts c, step_costs(cfg, cluster, train, layout));
  return estimate_from_costs(cfg, cluster, train, layout, gpus, c, options);
}

namespace {

// The pipeline's cost model, one entry per virtual stage (its layers, plus the embedding on the first
// and the output head on the last), and each pipeline rank's sums over its chunks for M micro-batches.
struct StageCosts {
  schedule::CostModel cost;
  std::vector<RankSums> sums;
  int critical = 0;  // the pipeline rank with the most work
  double busy = 0;   // its compute and exposed TP and CP time
};

StageCosts stage_costs(const StepCosts& c, const schedule::ScheduleSpec& spec, const schedule::LayerAssignment& assign,
                       double M, bool async_sends) {
  const int stages = spec.pp * spec.v;
  StageCosts out;
  schedule::CostModel& cost = out.cost;
  cost.forward.resize(stages);
  cost.backward.resize(stages);
  cost.activation_bytes.resize(stages);
  cost.boundary_bytes.assign(stages, c.boundary_bytes);
  // Synchronous sends (--pipeline-sends sync): a stage waits for its send to complete before its next
  // compute, so each transfer sits on the sender's critical path.
  cost.async_send = async_sends;
  out.sums.resize(spec.pp);
  for (int s = 0; s < stages; ++s) {
    const double nl = static_cast<double>(assign.layers[s].size());
    PieceCost p;
    auto add = [&](const PieceCost& x, double k) {
      p.fwd_math += k * x.fwd_math, p.bwd_math += k * x.bwd_math, p.fwd_tp += k * x.fwd_tp, p.bwd_tp += k * x.bwd_tp;
      p.fwd_cp += k * x.fwd_cp, p.bwd_cp += k * x.bwd_cp, p.tp_hidden += k * x.tp_hidden;
    };
    add(c.layer, nl);
    double act = nl * c.layer_activation_bytes;
    if (s == 0) add(c.embedding, 1), act += c.embedding_activation_bytes;
    if (s == stages - 1) add(c.output, 1), act += c.output_activation_bytes;
    cost.forward[s] = p.fwd();
    cost.backward[s] = p.bwd();
    cost.activation_bytes[s] = act;
    RankSums& r = out.sums[schedule::Schedule::rank_of_stage(spec, s)];
    r.math += M * (p.fwd_math + p.bwd_math);
    r.tp += M * (p.fwd_tp + p.bwd_tp);
    r.tp_hidden += M * p.tp_hidden;
    r.cp += M * (p.fwd_cp + p.bwd_cp);
    r.fwd += p.fwd();
    r.bwd += p.bwd();
  }
  const auto busy = [](const RankSums& r) { return r.math + r.tp + r.cp; };
  for (int r = 0; r < spec.pp; ++r) {
    if (busy(out.sums[r]) > busy(out.sums[out.critical])) out.critical = r;
  }
  out.busy = busy(out.sums[out.critical]);
  return out;
}

// The pipeline's bubble and exposed sends (T.bubble_s, T.pp_s) and each pipeline rank's peak activation
// bytes: simulated from the generated schedule, or, in the search's quick pass, from closed forms.
struct PipelineTime {
  std::vector<double> peak_activation_bytes;
  schedule::Schedule schedule;
  schedule::SimResult sim;  // with the sends' latency and bandwidth
};

Result<PipelineTime> pipeline_time(const StepCosts& c, const schedule::ScheduleSpec& spec, schedule::CostModel& cost,
                                   double busy, double M, bool simulate, TimeBreakdown& T) {
  PipelineTime out;
  out.peak_activation_bytes.assign(spec.pp, 0.0);
  if (simulate) {
    HERD_ASSIGN_OR_RETURN(out.schedule, schedule::generate(spec));
    HERD_ASSIGN_OR_RETURN(schedule::SimResult sim0, schedule::simulate(out.schedule, cost));
    double makespan = sim0.step_time;
    if (spec.pp > 1) {
      cost.p2p_latency = c.pp_link.latency_s;
      cost.p2p_per_byte = 1.0 / c.pp_link.bw_bytes_per_s;
      HERD_ASSIGN_OR_RETURN(out.sim, schedule::simulate(out.schedule, cost));
      makespan = std::max(makespan, out.sim.step_time);
    } else {
      out.sim = sim0;
    }
    T.bubble_s = std::max(0.0, sim0.step_time - busy);
    T.pp_s = std::max(0.0, makespan - sim0.step_time);
    for (int r = 0; r < spec.pp && r < static_cast<int>(out.sim.peak_activation_bytes.size()); ++r) {
      out.peak_activation_bytes[r] = out.sim.peak_activation_bytes[r];
    }
    return out;
  }
  T.bubble_s = busy * static_cast<double>(spec.pp - 1) / (static_cast<double>(spec.v) * M);
  T.pp_s = spec.pp > 1 ? 2.0 * static_cast<double>(spec.pp - 1) * p2p_s(c.boundary_bytes, c.pp_link) : 0.0;
  for (int r = 0; r < spec.pp; ++r) {
    double chunk_max = 0;
    for (int ch = 0; ch < spec.v; ++ch) chunk_max = std::max(chunk_max, cost.activation_bytes[ch * spec.pp + r]);
    const double warm = spec.v == 1
                            ? std::min<double>(M, spec.pp - r)
                            : std::min<double>(M * spec.v, (spec.v - 1.0) * spec.n + 2.0 * (spec.pp - 1 - r) + 1);
    out.peak_activation_bytes[r] = warm * chunk_max;
  }
  return out;
}

// Ranks time-slicing a CPU host's cores (more threads than cores, herd's own runs): while a rank waits
// in the bubble, or has less work than the busiest (the stage with the output head), the scheduler
// gives its share of a core to the ranks that can run. The step is then the longer of the critical path
// at a core per rank, (busy + bubble) / k, and the job's work spread over its cores: the mean of the
// pipeline ranks' busy times at their shares (every rank holds the same share, so the job's
// core-seconds over its cores is that mean). Above the busiest rank's time the difference is bubble;
// below it, the busiest rank runs faster than its share, and its compute and collectives shrink by
// that ratio.
void share_host_cores(double k, const std::vector<double>& rank_busy_s, double busy, TimeBreakdown& T,
                      double& tp_hidden_s) {
  double work = 0;
  for (double b : rank_busy_s) work += b;
  const double sliced = std::max((busy + T.bubble_s) / k, work / static_cast<double>(rank_busy_s.size()));
  T.bubble_s = std::max(0.0, sliced - busy);
  if (sliced < busy) {
    const double f = sliced / busy;
    T.compute_s *= f, T.tp_s *= f, T.cp_s *= f, tp_hidden_s *= f;
  }
}

// The pipeline rank holding the most parameters (of this TP shard), and one layer's.
struct LargestRank {
  double params = 0;
  int rank = 0;
  double layer_params = 0;
};

// Memory and checkpoint bytes of every pipeline rank into `est`; the worst rank's memory is reported.
LargestRank rank_memories(const model::LlamaConfig& cfg, const topology::Cluster& host, const TrainingSpec& train,
                          const Layout& l, const schedule::ScheduleSpec& spec, const schedule::LayerAssignment& assign,
                          const std::vector<double>& peak_activation_bytes, bool simulate, Estimate& est) {
  const model::LayerParams lp = model::layer_params_tp_shard(cfg, l.tp);
  const model::ModelParams mp = model::model_params_tp_shard(cfg, l.tp);
  LargestRank out;
  out.layer_params = static_cast<double>(lp.total());
  for (int r = 0; r < spec.pp; ++r) {
    RankMemoryInput in;
    in.rank = r;
    for (int ch = 0; ch < spec.v; ++ch) in.layers += static_cast<std::int64_t>(assign.layers[ch * spec.pp + r].size());
    in.embedding = r == 0;
    in.output = r == spec.pp - 1;
    in.peak_activation_bytes = peak_activation_bytes[r];
    double p = static_cast<double>(in.layers) * out.layer_params;
    if (in.embedding) p += static_cast<double>(mp.embedding);
    if (in.output) p += static_cast<double>(mp.output);
    if (p > out.params) out.params = p, out.rank = r;
    const CheckpointBytes ck = rank_checkpoint_bytes(cfg, train, l, in);
    est.checkpoint_total_bytes += ck.total() * static_cast<double>(l.tp * l.cp * l.dp);
    if (ck.total() > est.checkpoint.total()) est.checkpoint = ck;
    // The quick pass sizes the ranks that can be worst: the first (most in flight), the second (a full
    // set of layers) and the last (output head and logits).
    if (!simulate && r > 1 && r != spec.pp - 1) continue;
    // The host as given (host_share only rescales rates, and clears host_cores, which says a CPU host).
    MemoryBreakdown mb = rank_memory(cfg, host, train, l, in);
    est.rank_memory_bytes.push_back(mb.total_bytes);
    if (est.memory.parts.empty() || mb.total_bytes > est.memory.total_bytes) est.memory = mb;
  }
  return out;
}

// Data parallelism (FSDP / ZeRO over the dp x cp replicas of the same shard): the collectives' time,
// the part of it exposed, the rule that hides the rest, and the link they cross.
struct DpComm {
  double total_s = 0, exposed_s = 0;
  std::string rule;
  topology::GroupLink link;
};

Result<DpComm> dp_comm(const topology::Cluster& cluster, const topology::Cluster& host, const TrainingSpec& train,
                       const Layout& l, const StepCosts& c, const schedule::ScheduleSpec& spec, const RankSums& pr,
                       const LargestRank& largest, double M, double n) {
  const std::int64_t n_dp = l.dp * l.cp;
  DpComm out;
  // One FSDP group spans the CP and DP coordinates. Without PP between them it is one strided group
  // (on a torus it may use more axes than either part); otherwise its ring crosses both links.
  out.link = l.dp > 1 ? c.dp_link : c.cp_link;
  if (l.dp > 1 && l.cp > 1) {
    if (l.pp == 1) {
      HERD_ASSIGN_OR_RETURN(out.link, topology::link_for_group(cluster, l.tp, l.cp * l.dp));
    } else if (c.cp_link.bw_bytes_per_s < out.link.bw_bytes_per_s) {
      out.link.bw_bytes_per_s = c.cp_link.bw_bytes_per_s;
    }
  }
  if (n_dp <= 1) return out;
  const topology::GroupLink& link = out.link;
  const double p_max = largest.params, unit = largest.layer_params, e = element_bytes(train.precision);
  const double nmin = std::min<double>(n, M);
  const double lay = std::max<double>(1.0, unit > 0 ? p_max / unit : 1.0);
  // herd's runtime on a CPU host: the ranks' own threads do the copies, so nothing hides behind
  // compute, and the flat units are re-gathered before every micro-batch (released after each backward).
  const bool cpu_ranks = software_profile(train.system.software, host.accelerator).collectives_on_compute_threads;
  const double hide = cpu_ranks ? 0.0 : 1.0;
  const double window_f =
      hide * nmin * pr.fwd * (1.0 - 1.0 / spec.v) + pr.fwd / spec.v * std::max(0.0, 1.0 - spec.v / lay);
  const double window_b =
      hide * nmin * pr.bwd * (1.0 - 1.0 / spec.v) + pr.bwd / spec.v * std::max(0.0, 1.0 - spec.v / lay);
  const double pr_busy = pr.math + pr.tp + pr.cp;
  // --dp-overlap off: the gradient reduction runs after the backward, nothing of it hidden.
  const double hide_grad = hide * (train.system.dp_overlap ? 1.0 : 0.0);
  const double window_g = train.system.dp_overlap ? window_b : 0.0;
  const bool gather_overlap = train.system.dp_overlap && !cpu_ranks;  // ZeRO-1/2 parameter all-gather
  double& total = out.total_s;
  double& exp = out.exposed_s;
  std::string& rule = out.rule;
  const double ag = all_gather_s(e * p_max, n_dp, link), ag_unit = all_gather_s(e * unit, n_dp, link);
  // Gradients are reduced at their accumulation precision (--grad-dtype): 4 bytes, or 2.
  const double g = train.system.grad_bytes(train.precision);
  const double rs = reduce_scatter_s(g * p_max, n_dp, link), rs_unit = reduce_scatter_s(g * unit, n_dp, link);
  switch (l.zero) {
    case 0: {
      const double ar = all_reduce_s(g * p_max, n_dp, link);
      total = ar;
      exp = exposed(ar, all_reduce_s(g * unit, n_dp, link), window_g);
      rule = "fp32 all-reduce overlapped with the last backward except the last layer";
      break;
    }
    // ZeRO-1/2: the updated bf16 parameters are all-gathered after the optimizer step; under
    // --dp-overlap on that gather is issued bucket by bucket ahead of the next step's forward
    // (Megatron-Core's overlap_param_gather), prefetched like ZeRO-3's gather (first layer exposed).
    case 1:
      total = rs + ag;
      exp = exposed(rs, rs_unit, window_g) + (gather_overlap ? exposed(ag, ag_unit, window_f) : ag);
      rule = gather_overlap ? "fp32 reduce-scatter overlapped with the last backward; bf16 all-gather "
                              "overlapped with the next forward (first layer exposed)"
                            : "fp32 reduce-scatter and bf16 all-gather after the backward, exposed";
      break;
    case 2:
      total = M * rs + ag;
      exp =
          exposed(M * rs, rs_unit, hide_grad * pr_busy * 0.5) + (gather_overlap ? exposed(ag, ag_unit, window_f) : ag);
      rule = gather_overlap ? "fp32 reduce-scatter per micro-batch overlapped with backward; bf16 "
                              "all-gather overlapped with the next forward (first layer exposed)"
                            : "fp32 reduce-scatter per micro-batch overlapped with backward; bf16 "
                              "all-gather after the step exposed";
      break;
    default:
      if (l.reshard_after_forward) {
        total = 2.0 * M * ag + M * rs;
        exp = train.system.dp_overlap
                  ? exposed(2.0 * M * ag + (M - 1) * rs, ag_unit, hide * pr_busy) + exposed(rs, rs_unit, window_b)
                  : exposed(2.0 * M * ag, ag_unit, hide * pr_busy) + M * rs;
        rule =
            "bf16 all-gather before every forward and backward, fp32 reduce-scatter after every backward, "
            "prefetched and overlapped (first and last layer exposed)";
      } else if (cpu_ranks) {
        total = M * ag + rs;
        exp = total;
        rule = "all-gather before every micro-batch and one reduce-scatter, done by the ranks' threads (exposed)";
      } else {
        total = ag + rs;
        exp = exposed(ag, ag_unit, window_f) + exposed(rs, rs_unit, window_g);
        rule =
            "bf16 all-gather once, prefetched (first layer exposed); fp32 reduce-scatter overlapped with "
            "the last backward (last layer exposed)";
      }
  }
  if (g == 2.0) {
    for (std::size_t at = rule.find("fp32 "); at != std::string::npos; at = rule.find("fp32 ", at)) {
      rule.replace(at, 4, "bf16");  // the gradient collectives run at --grad-dtype bf16
    }
  }
  if (!train.system.dp_overlap) rule += "; --dp-overlap off: gradient reduction after the backward";
  return out;
}

// The optimizer step: AdamW's memory traffic over this rank's parameters, and the global-norm
// all-reduce's latency. Per parameter fp32 reads p, g, m, v and writes p, m, v (28 bytes); with bf16
// weights also the bf16 copy written and, where gradients arrive in bf16, read (34; herd's weight-
// gradient GEMMs write the fp32 gradient in place: 30).
double optimizer_s(const topology::Accelerator& acc, const SoftwareProfile& sw, double element_bytes, double params,
                   std::int64_t gpus, double latency_s) {
  const double bytes_per_param = element_bytes == 4.0 ? 28.0 : sw.weight_grads_in_place ? 30.0 : 34.0;
  return memory_bound_s(bytes_per_param * params, acc, acc.optimizer_bw_efficiency) +
         (gpus > 1 ? 2.0 * std::ceil(std::log2(static_cast<double>(gpus))) * latency_s : 0.0);
}

// Tokens/s, TFLOP/s per accelerator, MFU and HFU of the step time in `est`.
void set_throughput(const model::LlamaConfig& cfg, const topology::Accelerator& acc, const TrainingSpec& train,
                    const Layout& l, std::int64_t gpus, Estimate& est) {
  const double step_s = est.time.step_s;
  est.model_flops_per_token = model_flops_per_token(cfg, train.seq_len);
  const double tokens = static_cast<double>(train.tokens());
  const double peak = acc.peak_tflops_bf16 * 1e12;
  est.tokens_per_s = tokens / step_s;
  est.tflops_per_gpu = est.model_flops_per_token * tokens / (step_s * static_cast<double>(gpus)) / 1e12;
  est.mfu = est.tflops_per_gpu * 1e12 / peak;
  const double hw =
      *model::train_hardware_flops_per_token(cfg, train.seq_len, model::AttentionMask::causal(), l.recompute);
  est.hfu = hw * tokens / (step_s * static_cast<double>(gpus) * peak);
}

// The report's text: each dimension's communication with its tier and overlap rule, the roofline
// verdict, and the assumptions.
void describe(const topology::Accelerator& acc, const TrainingSpec& train, const Layout& l, const StepCosts& c,
              const schedule::ScheduleSpec& spec, double tp_hidden_s, const DpComm& dp, const SoftwareProfile& sw,
              Estimate& est) {
  const TimeBreakdown& T = est.time;
  const double M = static_cast<double>(est.microbatches);
  auto dim = [&](const char* name, std::int64_t size, std::int64_t stride, const topology::GroupLink& g, double total,
                 double exp, std::string rule) {
    DimComm d{name,  size, stride,         size > 1 ? g.tier_name : "none", size > 1 ? g.bw_bytes_per_s / 1e9 : 0,
              total, exp,  std::move(rule)};
    est.comm.push_back(d);
  };
  double p2p_total = 0;
  if (l.pp > 1) p2p_total = 2.0 * M * spec.v * p2p_s(c.boundary_bytes, c.pp_link);
  dim("tp", l.tp, 1, c.tp_link, T.tp_s + tp_hidden_s, T.tp_s,
      !l.sp() ? "all-reduce, exposed"
      : train.system.tp_overlap
          ? "sequence-parallel all-gather / reduce-scatter in chunks under their GEMMs (--tp-overlap on)"
          : "sequence-parallel all-gather / reduce-scatter, exposed (no overlap assumed)");
  dim("cp", l.cp, l.tp, c.cp_link, T.cp_s, T.cp_s, "K/V all-gather and dK/dV reduce-scatter, exposed (Llama 3)");
  dim("pp", l.pp, l.tp * l.cp, c.pp_link, p2p_total, T.pp_s, "asynchronous p2p; exposed part from the simulator");
  dim("dp", l.dp * l.cp, l.tp * l.cp * l.pp, dp.link, dp.total_s, T.dp_s, dp.rule.empty() ? "none" : dp.rule);

  // Roofline verdict (the scaling book's test): a dimension whose communication, perfectly
  // overlapped, still outlasts the compute makes the step communication-bound.
  est.bound = "compute-bound";
  for (const DimComm& d : est.comm) {
    const double ratio = T.compute_s > 0 ? d.total_s / T.compute_s : 0;
    if (ratio > est.compute_bound_ratio) est.compute_bound_ratio = ratio;
    if (ratio > 1.0 && est.bound == "compute-bound") est.bound = "communication-bound (" + d.dim + ")";
  }

  est.assumptions = {
      "FLOP convention (MFU): 6 x parameters (embedding included) + 12 x layers x n_heads x head_dim x (T+1)/2 "
      "per token (causal attention) = " +
          format_sci(est.model_flops_per_token) + " FLOPs/token",
      "schedule: " +
          (l.schedule == schedule::ScheduleKind::kFlexible ? std::string("Llama 3 flexible interleaved")
                                                           : std::string(schedule::schedule_kind_name(l.schedule))) +
          ", V=" + std::to_string(l.v) + ", micro-batch size " + std::to_string(l.microbatch) +
          ", M=" + std::to_string(est.microbatches) + ", N=" + std::to_string(est.n) + ", layer split " +
          layer_split_name(est.layout.layer_split) +
          (l.layer_split == LayerSplit::kAuto ? " (auto: the busiest pipeline rank's load is lower so)" : ""),
      std::string("system: software ") + software_name(train.system.software) + ", attention " +
          attention_name(train.system.attention) + ", pipeline sends " + (train.system.async_sends ? "async" : "sync") +
          ", DP overlap " + (train.system.dp_overlap ? "on" : "off") + ", gradient accumulation fusion " +
          (train.system.grad_acc_fusion ? "on" : "off") + ", TP overlap " + (train.system.tp_overlap ? "on" : "off") +
          "; compute slowed by " + format_fixed(100 * sw.overlap_slowdown, 1) +
          "% of the overlapped DP span (NCCL channels' SMs)",
      std::string("recompute: ") + model::recompute_name(l.recompute) + (l.sp() ? "; sequence parallelism on" : "") +
          "; ZeRO-" + std::to_string(l.zero) +
          (l.zero == 3
               ? (l.reshard_after_forward ? " (FSDP, reshard after forward)" : " (FSDP, no reshard after forward)")
               : ""),
      "compute: GEMM roofline at " + format_fixed(100 * acc.matmul_efficiency, 0) + "% of peak" +
          (train.precision == Precision::kFP8 && acc.matmul_efficiency_fp8 > 0
               ? " (fp8: " + format_fixed(100 * acc.matmul_efficiency_fp8, 0) + "% of the fp8 peak)"
               : "") +
          " with wave quantization; flash attention " + format_fixed(100 * acc.attention_fwd_efficiency, 0) +
          "% fwd / " + format_fixed(100 * acc.attention_bwd_efficiency, 0) + "% bwd; elementwise at " +
          format_fixed(100 * acc.memory_bw_efficiency, 0) + "% of HBM bandwidth" +
          (acc.optimizer_bw_efficiency > 0
               ? ", the optimizer's pass at " + format_fixed(100 * acc.optimizer_bw_efficiency, 0) + "%"
               : ""),
      "memory: fragmentation allowance " + format_fixed(100 * kFragmentationFraction, 0) +
          "% of dynamic allocations; capacity " + format_fixed(acc.memory_gib, 1) + " GiB"};
}

}  // namespace

Result<Estimate> estimate_from_costs(const model::LlamaConfig& cfg, const topology::Cluster& host,
                                     const TrainingSpec& train, const Layout& layout, std::int64_t gpus,
                                     const StepCosts& c, const EstimateOptions& options) {
  const Layout& l = layout;
  topology::Cluster at_precision = host, shared;  // as step_costs: bf16 efficiencies for a bf16 run
  at_precision.accelerator = topology::at_precision(host.accelerator, train.precision != Precision::kFP32);
  const topology::Cluster& cluster = topology::host_share(at_precision, gpus, &shared);
  Estimate est;
  est.layout = l;
  est.layout.layer_split = resolve_layer_split(cfg, l, c);
  est.train = train;
  est.gpus = gpus;
  est.microbatches = l.microbatches(train);
  est.n = l.n_resolved(train);
  const double M = static_cast<double>(est.microbatches);

  // Pipeline: per-virtual-stage costs and activation bytes, simulated by schedule/.
  const schedule::ScheduleSpec spec = schedule_spec(l, train);
  HERD_RETURN_IF_ERROR(schedule::validate(spec));
  schedule::LayerAssignment own;
  if (!options.assignment) {
    HERD_ASSIGN_OR_RETURN(own, layer_assignment(cfg, l, c));
  }
  const schedule::LayerAssignment& assign = options.assignment ? *options.assignment : own;
  HERD_CHECK(static_cast<int>(assign.layers.size()) == spec.pp * spec.v, "layer assignment for another (pp, v)");
  StageCosts stages = stage_costs(c, spec, assign, M, train.system.async_sends);
  const RankSums& critical = stages.sums[stages.critical];
  TimeBreakdown& T = est.time;
  T.compute_s = critical.math;
  T.tp_s = critical.tp;
  double tp_hidden_s = critical.tp_hidden;
  T.cp_s = critical.cp;
  HERD_ASSIGN_OR_RETURN(PipelineTime pipe, pipeline_time(c, spec, stages.cost, stages.busy, M, options.simulate, T));
  for (const RankSums& r : stages.sums) est.pipeline_rank_busy_s.push_back(r.math + r.tp + r.cp);
  if (const double k = topology::host_oversubscription(host.accelerator, gpus); k > 1.0 && l.pp > 1) {
    share_host_cores(k, est.pipeline_rank_busy_s, stages.busy, T, tp_hidden_s);
  }

  const LargestRank largest =
      rank_memories(cfg, host, train, l, spec, assign, pipe.peak_activation_bytes, options.simulate, est);
  HERD_ASSIGN_OR_RETURN(const DpComm dp,
                        dp_comm(cluster, host, train, l, c, spec, stages.sums[largest.rank], largest, M, est.n));
  T.dp_s = dp.exposed_s;
  // Compute slows while a collective overlaps it: NCCL's channels take SMs (planner/software.h).
  const SoftwareProfile sw = software_profile(train.system.software, cluster.accelerator);
  const double overlap_loss = sw.overlap_slowdown * std::max(0.0, dp.total_s - dp.exposed_s);
  const double n_dp = static_cast<double>(l.dp * l.cp);
  T.optimizer_s =
      optimizer_s(cluster.accelerator, sw, element_bytes(train.precision), largest.params / (l.zero >= 1 ? n_dp : 1.0),
                  gpus, std::max(dp.link.latency_s, c.tp_link.latency_s));
  // Synchronous steps run at the pace of the slowest accelerator: with speeds spread by sigma, the
  // expected maximum of G draws exceeds the mean by about sigma * sqrt(2 ln G) (Gaussian extremes).
  if (gpus > 1) {
    T.straggler_s =
        T.compute_s * cluster.accelerator.speed_variation * std::sqrt(2.0 * std::log(static_cast<double>(gpus)));
  }
  T.compute_s += overlap_loss;
  T.step_s = T.compute_s + T.tp_s + T.cp_s + T.bubble_s + T.pp_s + T.dp_s + T.optimizer_s + T.straggler_s;
  set_throughput(cfg, cluster.accelerator, train, l, gpus, est);
  if (!options.simulate) return est;  // the quick pass needs no report text

  describe(cluster.accelerator, train, l, c, spec, tp_hidden_s, dp, sw, est);
  if (options.keep_timeline) {
    est.schedule = std::move(pipe.schedule);
    est.sim = std::move(pipe.sim);
  }
  return est;
}

}  // namespace herd::planner

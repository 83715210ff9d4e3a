// herd estimate: memory and step time of one layout, broken down, with the assumptions stated; its
// reliability at that scale (checkpoint size and interval, interruptions, effective training time);
// optionally the scaling book's whole-job view (training days, checkpoint memory, fewest chips).
#include "herd/planner/estimate.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/planner_options.h"
#include "herd/cli/table.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/model/params.h"
#include "herd/planner/memory.h"
#include "herd/planner/reliability.h"
#include "herd/planner/report.h"

namespace herd::cli {

// "step time 12.300 s (p10-p90 11.800-14.100 s)".
std::string band_text(const planner::StepBand& b) {
  return "step time " + format_fixed(b.point_s, 3) + " s (p10-p90 " + format_fixed(b.p10_s, 3) + "-" +
         format_fixed(b.p90_s, 3) + " s)";
}

void print_estimate(std::ostream& os, const planner::Estimate& e, const PlannerInputs& in,
                    const planner::StepBand& band) {
  const planner::Layout& l = e.layout;
  os << "Layout " << l.to_string() << " on " << e.gpus << " x " << in.cluster.accelerator.name << " ("
     << in.cluster.name << "), model " << in.cfg.name << ", " << e.train.global_batch << " x " << e.train.seq_len
     << " tokens per step\n\n";
  os << "Memory per accelerator (worst pipeline rank: " << e.memory.rank << ")\n";
  Table mem({"part", "bytes", "what"});
  for (const planner::MemoryPart& p : e.memory.parts) mem.add({p.name, format_bytes(p.bytes), p.note});
  mem.add({"total", format_bytes(e.memory.total_bytes),
           (e.fits() ? "fits in " : "DOES NOT FIT in ") + format_bytes(e.memory.capacity_bytes)});
  mem.print(os);

  os << "\nStep time\n";
  Table t({"part", "seconds", "share"});
  auto row = [&](const std::string& name, double s) {
    t.add({name, format_fixed(s, 4), format_fixed(100 * s / e.time.step_s, 1) + "%"});
  };
  row("compute (busiest pipeline rank)", e.time.compute_s);
  row("pipeline bubble (simulated)", e.time.bubble_s);
  row("exposed TP", e.time.tp_s);
  row("exposed CP", e.time.cp_s);
  row("exposed PP (p2p)", e.time.pp_s);
  row("exposed DP", e.time.dp_s);
  row("optimizer", e.time.optimizer_s);
  row("slowest accelerator (stragglers)", e.time.straggler_s);
  row("step", e.time.step_s);
  t.print(os);
  const planner::BandSources& bs = band.sources;
  os << band_text(band) << "\n  band sources (docs/planner.md section 5.1): software "
     << (bs.software_ratios.empty()
             ? std::string("given")
             : "presets x" + format_fixed(*std::min_element(bs.software_ratios.begin(), bs.software_ratios.end()), 3) +
                   "-" + format_fixed(*std::max_element(bs.software_ratios.begin(), bs.software_ratios.end()), 3))
     << ", bus bandwidth sigma " << format_fixed(bs.comm_sigma, 3) << " on " << format_fixed(100 * bs.comm_share, 1)
     << "% exposed communication, scale sigma " << format_fixed(bs.scale_sigma, 3) << ", planner residual p10/p90 "
     << format_fixed(bs.residual_q10, 3) << "/" << format_fixed(bs.residual_q90, 3) << "\n";

  os << "\nCommunication per dimension ([TP, CP, PP, DP] placement)\n";
  Table c({"dim", "size", "stride", "tier", "GB/s", "total", "exposed", "overlap"});
  for (const planner::DimComm& d : e.comm) {
    c.add({d.dim, std::to_string(d.size), std::to_string(d.stride), d.tier, format_fixed(d.bw_gb_per_s, 1),
           format_seconds(d.total_s), format_seconds(d.exposed_s), d.overlap});
  }
  c.print(os);

  os << "\nThroughput: " << format_fixed(e.tokens_per_s, 0) << " tokens/s ("
     << format_fixed(e.tokens_per_s / static_cast<double>(e.gpus), 1) << " per GPU), "
     << format_fixed(e.tflops_per_gpu, 0) << " TFLOP/s per GPU, MFU " << format_fixed(100 * e.mfu, 1) << "% (HFU "
     << format_fixed(100 * e.hfu, 1) << "%); " << e.bound << "\n";
  os << "  p10-p90: " << format_fixed(e.tokens_per_s * e.time.step_s / band.p90_s, 0) << "-"
     << format_fixed(e.tokens_per_s * e.time.step_s / band.p10_s, 0) << " tokens/s, MFU "
     << format_fixed(100 * e.mfu * e.time.step_s / band.p90_s, 1) << "-"
     << format_fixed(100 * e.mfu * e.time.step_s / band.p10_s, 1) << "%\n";
  os << "\nAssumptions\n";
  for (const std::string& a : e.assumptions) os << "  - " << a << "\n";
}

void print_reliability(std::ostream& os, const planner::Reliability& r) {
  const planner::ReliabilitySpec& s = r.spec;
  const planner::CheckpointBytes& ck = r.checkpoint_per_rank;
  os << "\nReliability (docs/reliability-planner.md)\n";
  os << "  failure rate " << format_sci(s.failure_rate_per_hour) << " per accelerator-hour"
     << (s.failure_rate_per_hour == planner::kLlama3FailureRatePerHour
             ? " (Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs)"
             : " (--failure-rate)")
     << "\n  x " << r.accelerators << " accelerators: an interruption every " << format_seconds(r.mtbf_s) << " (MTBF), "
     << format_fixed(r.interruptions_per_day, 1) << " per day\n";
  os << "  checkpoint: " << format_bytes(ck.total()) << " per accelerator (";
  if (ck.weights > 0) os << "bf16 weights " << format_bytes(ck.weights) << ", ";
  os << "fp32 master " << format_bytes(ck.master) << ", AdamW moments " << format_bytes(ck.moments) << "), "
     << format_bytes(r.checkpoint_total_bytes) << " in all\n";
  os << "  write: " << format_seconds(r.write_s) << " to storage at " << format_fixed(r.storage_bw_gb_per_s, 0)
     << " GB/s (" << r.storage_bw_source << "); async snapshot to host memory " << format_seconds(r.snapshot_s)
     << " at " << format_fixed(s.snapshot_bw_gb_per_s, 0) << " GB/s per accelerator\n";
  os << "  restart: " << format_seconds(s.restart_s) << " from an interruption to the first step (--restart-s)\n";
  Table t({"checkpoint", "stall", "interval", "steps", "ETT", "checkpoints", "lost work", "restarts"});
  for (const planner::CheckpointPolicy* p : {&r.sync, &r.async}) {
    const planner::TimeShares& x = p->shares;
    t.add({std::string(planner::checkpoint_mode_name(p->mode)) + (p->mode == s.mode ? " *" : ""),
           format_seconds(p->stall_s), format_seconds(p->interval_s), std::to_string(p->interval_steps),
           format_fixed(100 * x.productive, 2) + "%", format_fixed(100 * x.checkpoint, 2) + "%",
           format_fixed(100 * x.lost_work, 2) + "%", format_fixed(100 * x.restart, 2) + "%"});
  }
  t.print(os);
  const planner::TimeShares& x = r.chosen().shares;
  os << "  ETT " << format_fixed(100 * x.productive, 2) << "% (" << planner::checkpoint_mode_name(s.mode)
     << ", *): of every 100 hours, " << format_fixed(100 * x.productive, 2) << " train, "
     << format_fixed(100 * x.restart, 2) << " restart after "
     << format_fixed(r.interruptions_per_day, r.interruptions_per_day < 10 ? 2 : 1) << " interruptions a day, "
     << format_fixed(100 * x.lost_work, 2) << " redo work lost since the last checkpoint, "
     << format_fixed(100 * x.checkpoint, 2) << " wait for checkpoints\n";
  if (!r.elastic) return;
  const planner::ElasticRecovery& el = *r.elastic;
  os << "  Recovery from a node failure (" << el.node_accelerators << " accelerators lost), ETT with "
     << planner::checkpoint_mode_name(s.mode) << " checkpoints:\n";
  os << "    replacement  " << format_fixed(100 * x.productive, 2) << "%  wait " << format_seconds(s.restart_s)
     << " for a spare or a requeue (--restart-s), resume on all " << r.accelerators << "\n";
  if (!el.possible) {
    os << "    elastic      not possible: " << el.why_not << "\n";
    return;
  }
  const planner::ElasticShares& y = el.shares;
  const double gain = 100 * (y.productive - x.productive);
  os << "    elastic      " << format_fixed(100 * y.productive, 2) << "%  restart in "
     << format_seconds(s.elastic_restart_s) << " on the " << el.survivors
     << " survivors (--elastic-restart-s), run degraded until the node is repaired (" << format_seconds(s.repair_s)
     << " on average, --repair-s), then grow back; " << (gain >= 0 ? "+" : "") << format_fixed(gain, 2) << " points\n";
  os << "  degraded layout: " << el.layout.to_flags() << " on " << el.accelerators << " accelerators, step "
     << format_fixed(el.step_s, 3) << " s (" << format_fixed(el.slowdown, 3) << "x the full layout's, "
     << format_fixed(100 / el.slowdown, 1) << "% of its throughput), an interruption every "
     << format_seconds(el.mtbf_s) << "\n";
  os << "  elastic: of every 100 hours, " << format_fixed(100 * y.productive, 2) << " train (full-layout time), "
     << format_fixed(100 * y.on_degraded, 2) << " run degraded and lose " << format_fixed(100 * y.degraded, 2)
     << " to its slowdown, " << format_fixed(100 * y.restart, 2) << " restart, " << format_fixed(100 * y.regrow, 2)
     << " grow back, " << format_fixed(100 * y.lost_work, 2) << " redo lost work, "
     << format_fixed(100 * y.checkpoint, 2) << " wait for checkpoints\n";
}

namespace {

struct EstimateOptions {
  PlannerOptions p;
  std::int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  int checkpoints_per_layer = 0;
  double train_tokens = 0;
  double assume_mfu = 0;
  std::int64_t job_gpus = 0;
};

Json job_summary(const EstimateOptions& o, const PlannerInputs& in, const planner::Estimate& e) {
  Json j;
  const double params = static_cast<double>(model::model_params(in.cfg).total());
  j["params"] = params;
  j["flops_per_token_6n"] = 6.0 * params;
  j["flops_per_token"] = e.model_flops_per_token;
  if (o.train_tokens > 0) {
    const std::int64_t gpus = o.job_gpus > 0 ? o.job_gpus : e.gpus;
    const double peak = in.cluster.accelerator.peak_tflops_bf16 * 1e12 * static_cast<double>(gpus);
    j["job_gpus"] = gpus;
    j["train_tokens"] = o.train_tokens;
    j["train_flops_6n"] = 6.0 * params * o.train_tokens;
    j["train_flops"] = e.model_flops_per_token * o.train_tokens;
    j["train_days_at_predicted_mfu"] = e.model_flops_per_token * o.train_tokens / (peak * e.mfu) / 86400.0;
    if (o.assume_mfu > 0) {
      j["assumed_mfu"] = o.assume_mfu;
      j["train_days_at_assumed_mfu_6n"] = 6.0 * params * o.train_tokens / (peak * o.assume_mfu) / 86400.0;
      j["train_days_at_assumed_mfu"] = e.model_flops_per_token * o.train_tokens / (peak * o.assume_mfu) / 86400.0;
    }
  }
  if (o.checkpoints_per_layer > 0) {
    const planner::JobMemory m =
        planner::job_memory(in.cfg, static_cast<double>(e.train.tokens()), o.checkpoints_per_layer,
                            in.cluster.accelerator.memory_gib * 1024.0 * 1024 * 1024);
    j["checkpoints_per_layer"] = o.checkpoints_per_layer;
    j["job_memory"] = {{"params_bytes", m.params_bytes},
                       {"optimizer_bytes", m.optimizer_bytes},
                       {"checkpoint_bytes", m.checkpoint_bytes},
                       {"total_bytes", m.total_bytes},
                       {"min_accelerators", m.min_accelerators},
                       {"per_accelerator_bytes", m.total_bytes / static_cast<double>(e.gpus)}};
  }
  return j;
}

// The knobs, given or chosen, each with its reason; and, when nothing fits, what would.
void print_choice(std::ostream& os, const planner::FamilyChoice& c) {
  os << "Knobs: given, or chosen by herd plan's search over these degrees (" << c.variants << " variants costed, "
     << c.fitting << " within memory, " << c.simulated << " simulated)\n";
  for (const planner::KnobChoice& k : c.knobs) {
    os << "  " << k.flag << " " << k.value << (k.given ? " (given): " : " (chosen): ") << k.why << "\n";
  }
  if (!c.best.fits()) os << "\nNo variant of these degrees fits: " << c.to_fit << "\n";
  os << "\n";
}

int run_estimate(const EstimateOptions& o) {
  Result<PlannerInputs> in = resolve_planner_inputs(o.p);
  if (!in.ok()) return report_error("estimate", in.error());
  planner::Layout degrees = in->base;
  degrees.tp = o.tp, degrees.cp = o.cp, degrees.pp = o.pp, degrees.dp = o.dp;
  Result<planner::FamilyChoice> choice =
      planner::choose_layout(in->cfg, in->cluster, in->train, degrees, o.p.gpus, search_space(o.p, *in));
  if (!choice.ok()) return report_error("estimate", choice.error());
  Result<planner::Estimate> e = choice->best;
  if (!o.p.svg.empty() || !o.p.html.empty()) {
    planner::EstimateOptions eo;
    eo.keep_timeline = true;
    e = planner::estimate(in->cfg, in->cluster, in->train, choice->best.layout, o.p.gpus, eo);
    if (!e.ok()) return report_error("estimate", e.error());
  }
  const std::string title = "herd estimate: " + in->cfg.name + " on " + std::to_string(o.p.gpus) + " x " +
                            in->cluster.accelerator.name + " (" + in->cluster.name + ")";
  if (!o.p.svg.empty()) {
    Status s = write_text_file(o.p.svg, planner::report_svg(*e, title));
    if (!s.ok()) return report_error("estimate", s.error());
  }
  if (!o.p.html.empty()) {
    Status s = write_text_file(o.p.html, planner::report_html(*e, title));
    if (!s.ok()) return report_error("estimate", s.error());
  }
  Result<planner::BandSources> sources = planner::band_sources(in->cfg, in->cluster, in->train, *e, in->software_given);
  if (!sources.ok()) return report_error("estimate", sources.error());
  const planner::StepBand band = planner::step_band(e->time.step_s, *sources);
  const bool summary = o.checkpoints_per_layer > 0 || o.train_tokens > 0;
  const planner::DegradedLayout degraded =
      planner::degraded_layout(in->cfg, in->cluster, in->train, o.p.gpus, search_space(o.p, *in));
  const planner::Reliability rel = planner::project_reliability(*e, in->cluster, in->reliability, &degraded);
  if (o.p.json) {
    Json j = planner::estimate_to_json(*e);
    j["chosen"] = planner::chosen_to_json(*choice);
    j["search"] = planner::family_search_to_json(*choice);
    j["reliability"] = planner::reliability_to_json(rel);
    planner::add_band_json(j, band, *e, in->cluster, in->reliability);
    if (summary) j["job"] = job_summary(o, *in, *e);
    std::cout << json_text(j, 2) << "\n";
    return 0;
  }
  print_choice(std::cout, *choice);
  print_estimate(std::cout, *e, *in, band);
  print_reliability(std::cout, rel);
  if (summary) {
    std::cout << "\nWhole job (scaling-book view)\n" << json_text(job_summary(o, *in, *e), 2) << "\n";
  }
  return 0;
}

}  // namespace

Subcommand add_estimate_command(CLI::App& root) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* app = root.add_subcommand(
      "estimate", "Memory and step time of one 4D layout, broken down; knobs not given are chosen by plan's search");
  add_planner_options(app, o->p);
  app->add_option("--tp", o->tp, "Tensor-parallel degree")->required()->check(positive_integer());
  app->add_option("--cp", o->cp, "Context-parallel degree")->required()->check(positive_integer());
  app->add_option("--pp", o->pp, "Pipeline-parallel degree")->required()->check(positive_integer());
  app->add_option("--dp", o->dp, "Data-parallel (FSDP) degree")->required()->check(positive_integer());
  app->add_option(
         "--checkpoints-per-layer", o->checkpoints_per_layer,
         "Also print the scaling book's whole-job memory with this many bf16 (tokens, hidden) checkpoints per layer")
      ->check(positive_integer());
  app->add_option("--train-tokens", o->train_tokens, "Also print the training time for this many tokens")
      ->check(positive_number());
  app->add_option("--assume-mfu", o->assume_mfu, "With --train-tokens: also the time at this MFU (e.g. 0.4)")
      ->check(number_in(0.0, 1.0));
  app->add_option("--job-gpus", o->job_gpus,
                  "With --train-tokens: accelerators for the training-time figures (default --gpus)")
      ->check(positive_integer());
  return {app, [o] { return run_estimate(*o); }};
}

}  // namespace herd::cli

#include "herd/planner/report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "herd/core/format.h"
#include "herd/core/xml.h"
#include "herd/schedule/render.h"

namespace herd::planner {

void add_band_json(Json& j, const StepBand& b, const Estimate& e, const topology::Cluster& cluster,
                   const ReliabilitySpec& spec) {
  j["step_time_band_s"] = {{"p10", b.p10_s}, {"p90", b.p90_s}};
  j["tokens_per_s_band"] = {{"p10", e.tokens_per_s * e.time.step_s / b.p90_s},
                            {"p90", e.tokens_per_s * e.time.step_s / b.p10_s}};
  j["mfu_band"] = {{"p10", e.mfu * e.time.step_s / b.p90_s}, {"p90", e.mfu * e.time.step_s / b.p10_s}};
  double ett[2];
  for (int i = 0; i < 2; ++i) {
    Estimate at = e;
    at.time.step_s = i == 0 ? b.p10_s : b.p90_s;
    ett[i] = project_reliability(at, cluster, spec).chosen().shares.productive;
  }
  j["ett_band"] = {{"p10", std::min(ett[0], ett[1])}, {"p90", std::max(ett[0], ett[1])}};
  const BandSources& s = b.sources;
  Json src;
  src["software_step_ratios"] = s.software_ratios;
  src["comm_share"] = s.comm_share;
  src["comm_sigma"] = s.comm_sigma;
  src["scale_sigma"] = s.scale_sigma;
  src["residual_log_p10_p50_p90"] = {s.residual_q10, s.residual_q50, s.residual_q90};
  j["band_sources"] = src;
}

Json estimate_to_json(const Estimate& e) {
  Json j;
  j["fits"] = e.fits();
  j["mfu"] = e.mfu;
  j["hfu"] = e.hfu;
  j["tflops_per_gpu"] = e.tflops_per_gpu;
  j["tokens_per_s"] = e.tokens_per_s;
  j["tokens_per_s_per_gpu"] = e.tokens_per_s / static_cast<double>(e.gpus);
  j["step_time_s"] = e.time.step_s;
  j["gpus"] = e.gpus;
  j["model_flops_per_token"] = e.model_flops_per_token;
  j["bound"] = e.bound;
  j["precision"] = precision_name(e.train.precision);
  Json mem;
  mem["total_bytes"] = e.memory.total_bytes;
  mem["capacity_bytes"] = e.memory.capacity_bytes;
  mem["worst_pipeline_rank"] = e.memory.rank;
  for (const MemoryPart& p : e.memory.parts) mem[p.name] = p.bytes;
  mem["notes"] = Json::object();
  for (const MemoryPart& p : e.memory.parts) mem["notes"][p.name] = p.note;
  mem["per_pipeline_rank_bytes"] = e.rank_memory_bytes;
  j["memory"] = mem;
  Json t;
  t["compute_s"] = e.time.compute_s;
  t["bubble_s"] = e.time.bubble_s;
  t["optimizer_s"] = e.time.optimizer_s;
  t["straggler_s"] = e.time.straggler_s;
  t["exposed_comm_s"] = {{"tp", e.time.tp_s},
                         {"cp", e.time.cp_s},
                         {"pp", e.time.pp_s},
                         {"dp", e.time.dp_s},
                         {"total", e.time.exposed_comm_s()}};
  t["step_s"] = e.time.step_s;
  Json comm = Json::array();
  for (const DimComm& d : e.comm) {
    comm.push_back({{"dim", d.dim},
                    {"size", d.size},
                    {"stride", d.stride},
                    {"tier", d.tier},
                    {"bw_gb_per_s", d.bw_gb_per_s},
                    {"total_s", d.total_s},
                    {"exposed_s", d.exposed_s},
                    {"overlap", d.overlap}});
  }
  t["communication"] = comm;
  j["time"] = t;
  const Layout& l = e.layout;
  j["layout"] = {{"tp", l.tp},
                 {"cp", l.cp},
                 {"pp", l.pp},
                 {"dp", l.dp},
                 {"v", l.v},
                 {"microbatch_size", l.microbatch},
                 {"n_microbatches", e.microbatches},
                 {"n", e.n},
                 {"recompute", model::recompute_name(l.recompute)},
                 {"sequence_parallel", l.sp()},
                 {"zero", l.zero},
                 {"reshard_after_forward", l.reshard_after_forward},
                 {"layer_split", layer_split_name(l.layer_split)},
                 {"software", software_name(e.train.system.software)},
                 {"attention", attention_name(e.train.system.attention)},
                 {"pipeline_sends", e.train.system.async_sends ? "async" : "sync"},
                 {"dp_overlap", e.train.system.dp_overlap ? "on" : "off"},
                 {"grad_acc_fusion", e.train.system.grad_acc_fusion ? "on" : "off"},
                 {"tp_overlap", e.train.system.tp_overlap ? "on" : "off"},
                 {"grad_dtype", e.train.system.bf16_grads && e.train.precision != Precision::kFP32 ? "bf16" : "fp32"},
                 {"flags", l.to_flags() + " --seq-len " + std::to_string(e.train.seq_len) + " --global-batch " +
                               std::to_string(e.train.global_batch)}};
  j["training"] = {{"seq_len", e.train.seq_len},
                   {"global_batch_sequences", e.train.global_batch},
                   {"global_batch_tokens", e.train.tokens()},
                   {"precision", precision_name(e.train.precision)}};
  j["assumptions"] = e.assumptions;
  return j;
}

namespace {

Json knob_value(KnobChoice::Type type, const std::string& text) {
  switch (type) {
    case KnobChoice::Type::kInteger: return std::stoll(text);
    case KnobChoice::Type::kBoolean: return text == "true";
    case KnobChoice::Type::kName: break;
  }
  return text;
}

}  // namespace

Json chosen_to_json(const FamilyChoice& c) {
  Json j = Json::object();
  for (const KnobChoice& k : c.knobs) {
    Json x = {{"value", knob_value(k.type, k.value)}, {"given", k.given}, {"why", k.why}};
    if (k.runner_up) {
      const KnobChoice::Alternative& r = *k.runner_up;
      x["runner_up"] = {{"value", knob_value(k.type, r.value)},
                        {"layout", r.layout.to_string()},
                        {"step_time_s", r.step_s},
                        {"memory_bytes", r.memory_bytes},
                        {"fits", r.fits}};
    }
    j[k.knob] = x;
  }
  return j;
}

Json family_search_to_json(const FamilyChoice& c) {
  Json j = {{"variants_costed", c.variants},
            {"variants_fitting", c.fitting},
            {"simulated", c.simulated},
            {"fits", c.best.fits()}};
  if (!c.to_fit.empty()) j["to_fit"] = c.to_fit;
  return j;
}

namespace {

Json shares_to_json(const TimeShares& t) {
  return {
      {"productive", t.productive}, {"checkpoint", t.checkpoint}, {"lost_work", t.lost_work}, {"restart", t.restart}};
}

Json policy_to_json(const CheckpointPolicy& p) {
  return {{"ett", p.shares.productive},
          {"checkpoint_interval_s", p.interval_s},
          {"checkpoint_interval_steps", p.interval_steps},
          {"young_interval_s", p.young_interval_s},
          {"daly_interval_s", p.daly_interval_s},
          {"checkpoint_stall_s", p.stall_s},
          {"checkpoint_durable_lag_s", p.durable_lag_s},
          {"wall_time_shares", shares_to_json(p.shares)}};
}

Json elastic_to_json(const Reliability& r) {
  const ElasticRecovery& x = *r.elastic;
  Json j;
  j["possible"] = x.possible;
  j["lost_accelerators"] = x.node_accelerators;
  j["survivors"] = x.survivors;
  j["restart_s"] = r.spec.elastic_restart_s;
  j["repair_s"] = r.spec.repair_s;
  if (!x.possible) {
    j["why_not"] = x.why_not;
    return j;
  }
  const ElasticShares& t = x.shares;
  j["ett"] = t.productive;
  j["degraded_layout"] = x.layout.to_string();
  j["degraded_layout_flags"] = x.layout.to_flags();
  j["degraded_accelerators"] = x.accelerators;
  j["degraded_step_s"] = x.step_s;
  j["slowdown"] = x.slowdown;
  j["degraded_mtbf_s"] = x.mtbf_s;
  j["degraded_checkpoint_interval_s"] = x.policy.interval_s;
  j["degraded_checkpoint_interval_steps"] = x.policy.interval_steps;
  j["on_degraded"] = t.on_degraded;
  j["wall_time_shares"] = {{"productive", t.productive}, {"degraded", t.degraded}, {"checkpoint", t.checkpoint},
                           {"lost_work", t.lost_work},   {"restart", t.restart},   {"regrow", t.regrow}};
  return j;
}

}  // namespace

Json reliability_to_json(const Reliability& r) {
  const CheckpointPolicy& c = r.chosen();
  Json j;
  j["ett"] = c.shares.productive;
  j["checkpoint_mode"] = checkpoint_mode_name(r.spec.mode);
  j["checkpoint_interval_s"] = c.interval_s;
  j["checkpoint_interval_steps"] = c.interval_steps;
  j["interruptions_per_day"] = r.interruptions_per_day;
  j["mtbf_s"] = r.mtbf_s;
  j["failure_rate_per_hour"] = r.spec.failure_rate_per_hour;
  j["accelerators"] = r.accelerators;
  j["restart_s"] = r.spec.restart_s;
  j["step_time_s"] = r.step_s;
  j["checkpoint_bytes_per_rank"] = r.checkpoint_per_rank.total();
  j["checkpoint_bytes_per_rank_parts"] = {{"weights", r.checkpoint_per_rank.weights},
                                          {"master", r.checkpoint_per_rank.master},
                                          {"moments", r.checkpoint_per_rank.moments}};
  j["checkpoint_bytes_total"] = r.checkpoint_total_bytes;
  j["checkpoint_bandwidth_gb_per_s"] = r.storage_bw_gb_per_s;
  j["checkpoint_bandwidth_source"] = r.storage_bw_source;
  j["snapshot_bandwidth_gb_per_s"] = r.spec.snapshot_bw_gb_per_s;
  j["checkpoint_write_s"] = r.write_s;
  j["checkpoint_snapshot_s"] = r.snapshot_s;
  j["checkpoint_stall_s"] = c.stall_s;
  j["wall_time_shares"] = shares_to_json(c.shares);
  j["sync"] = policy_to_json(r.sync);
  j["async"] = policy_to_json(r.async);
  j["replacement"] = {
      {"ett", c.shares.productive}, {"restart_s", r.spec.restart_s}, {"wall_time_shares", shares_to_json(c.shares)}};
  if (r.elastic) j["elastic"] = elastic_to_json(r);
  return j;
}

namespace {

struct Segment {
  std::string label;
  double value;
  const char* color;
};

const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// One horizontal stacked bar with a legend underneath; returns the height used.
double stacked_bar(std::ostringstream& os, double y, const std::string& title, const std::vector<Segment>& segs,
                   double scale_max, const std::string& total_label, double width) {
  os << "<text x='10' y='" << y + 14 << "' font-size='14' font-weight='bold'>" << xml_text(title) << "</text>\n";
  double x = 10;
  const double bar_y = y + 22;
  for (const Segment& s : segs) {
    const double w = scale_max > 0 ? s.value / scale_max * width : 0;
    if (w <= 0) continue;
    os << "<rect x='" << x << "' y='" << bar_y << "' width='" << w << "' height='26' fill='" << s.color << "'><title>"
       << xml_text(s.label) << "</title></rect>\n";
    x += w;
  }
  os << "<text x='" << x + 6 << "' y='" << bar_y + 18 << "' font-size='12'>" << xml_text(total_label) << "</text>\n";
  double ly = bar_y + 44, lx = 10;
  for (const Segment& s : segs) {
    if (s.value <= 0) continue;
    if (lx > width - 150) lx = 10, ly += 18;
    os << "<rect x='" << lx << "' y='" << ly - 10 << "' width='10' height='10' fill='" << s.color << "'/>";
    os << "<text x='" << lx + 14 << "' y='" << ly << "' font-size='11'>" << xml_text(s.label) << "</text>\n";
    lx += 215;
  }
  return ly - y + 16;
}

}  // namespace

std::string report_svg(const Estimate& e, const std::string& title) {
  const double width = 900;
  std::ostringstream body;
  double y = 10;
  body << "<text x='10' y='" << y + 16 << "' font-size='16' font-weight='bold'>" << xml_text(title) << "</text>\n";
  body << "<text x='10' y='" << y + 34 << "' font-size='12'>" << xml_text(e.layout.to_string()) << " on " << e.gpus
       << " GPUs: MFU " << format_fixed(100 * e.mfu, 1) << "%, " << format_fixed(e.tflops_per_gpu, 0)
       << " TFLOP/s per GPU, step " << xml_text(format_seconds(e.time.step_s)) << "</text>\n";
  y += 44;
  std::vector<Segment> mem;
  for (std::size_t i = 0; i < e.memory.parts.size(); ++i) {
    const MemoryPart& p = e.memory.parts[i];
    mem.push_back({p.name + " " + format_bytes(p.bytes), p.bytes, kColors[i % 10]});
  }
  const double mem_scale = std::max(e.memory.total_bytes, e.memory.capacity_bytes);
  y += stacked_bar(body, y, "Memory on pipeline rank " + std::to_string(e.memory.rank), mem, mem_scale,
                   format_bytes(e.memory.total_bytes) + " of " + format_bytes(e.memory.capacity_bytes) +
                       (e.fits() ? " (fits)" : " (does not fit)"),
                   width - 200);
  const TimeBreakdown& t = e.time;
  std::vector<Segment> ts = {{"compute " + format_seconds(t.compute_s), t.compute_s, kColors[0]},
                             {"TP exposed " + format_seconds(t.tp_s), t.tp_s, kColors[1]},
                             {"CP exposed " + format_seconds(t.cp_s), t.cp_s, kColors[2]},
                             {"bubble " + format_seconds(t.bubble_s), t.bubble_s, kColors[3]},
                             {"PP exposed " + format_seconds(t.pp_s), t.pp_s, kColors[4]},
                             {"DP exposed " + format_seconds(t.dp_s), t.dp_s, kColors[5]},
                             {"optimizer " + format_seconds(t.optimizer_s), t.optimizer_s, kColors[6]},
                             {"stragglers " + format_seconds(t.straggler_s), t.straggler_s, kColors[7]}};
  y += stacked_bar(body, y + 10, "Step time", ts, t.step_s, format_seconds(t.step_s), width - 200) + 10;

  // Pipeline timeline: schedule/'s renderer (Llama 3 Figure 6 style), nested at this height.
  double total_width = width;
  if (!e.sim.timeline.empty()) {
    schedule::SvgOptions so;
    so.title = "Pipeline timeline (simulated): PP=" + std::to_string(e.layout.pp) +
               ", V=" + std::to_string(e.layout.v) + ", M=" + std::to_string(e.microbatches) +
               ", N=" + std::to_string(e.n);
    so.time_unit = "s";
    so.width = static_cast<int>(width);
    so.row_height = e.layout.pp > 32 ? 12 : 24;
    so.label_microbatches = e.layout.pp * e.layout.v * e.microbatches <= 512;
    std::string tl = schedule::render_svg(e.schedule, e.sim, so);
    double h = 0;
    const std::size_t hp = tl.find("height=\"");
    if (hp != std::string::npos) h = std::atof(tl.c_str() + hp + 8);
    const std::size_t open = tl.find("<svg");
    if (open != std::string::npos) tl.insert(open + 4, " x=\"0\" y=\"" + std::to_string(y) + "\"");
    body << "<text x='10' y='" << y - 4 << "' font-size='11'>Timeline: pipeline ranks by time</text>\n" << tl;
    y += h + 10;
    total_width = std::max(total_width, static_cast<double>(so.width));
  }
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << total_width << "' height='" << y + 10
     << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
     << body.str() << "</svg>\n";
  return os.str();
}

std::string report_html(const Estimate& e, const std::string& title) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" << xml_text(title)
     << "</title><style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}</style></head><body>\n";
  os << report_svg(e, title);
  os << "<h3>Memory (pipeline rank " << e.memory.rank
     << ")</h3><table><tr><th>part</th><th>bytes</th><th>what</th></tr>\n";
  for (const MemoryPart& p : e.memory.parts) {
    os << "<tr><td>" << xml_text(p.name) << "</td><td>" << format_bytes(p.bytes) << "</td><td style='text-align:left'>"
       << xml_text(p.note) << "</td></tr>\n";
  }
  os << "</table><h3>Communication</h3><table><tr><th>dim</th><th>size</th><th>tier</th><th>GB/s</th><th>total</th>"
        "<th>exposed</th><th>overlap rule</th></tr>\n";
  for (const DimComm& d : e.comm) {
    os << "<tr><td>" << d.dim << "</td><td>" << d.size << "</td><td>" << xml_text(d.tier) << "</td><td>"
       << format_fixed(d.bw_gb_per_s, 1) << "</td><td>" << format_seconds(d.total_s) << "</td><td>"
       << format_seconds(d.exposed_s) << "</td><td style='text-align:left'>" << xml_text(d.overlap) << "</td></tr>\n";
  }
  os << "</table><h3>Assumptions</h3><ul>\n";
  for (const std::string& a : e.assumptions) os << "<li>" << xml_text(a) << "</li>\n";
  os << "</ul></body></html>\n";
  return os.str();
}

}  // namespace herd::planner

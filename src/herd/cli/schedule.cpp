// herd schedule: generate, check, simulate and draw one pipeline schedule (schedule/ only).
//
// Prints the layer split, an ASCII timeline, the bubble, the step time in units of one transformer
// layer's forward, and the peak in-flight micro-batches per rank; --json prints the same as one object
// (with every rank's action list) and --svg writes a Figure-6-style drawing.
//
// --cost llama: each layer's forward costs 1 and its backward --backward-factor (2); the first stage
// adds --embedding-cost (0), the last --output-cost (1: a 128K-vocabulary output projection and loss
// cost about one layer). --cost uniform: every virtual stage costs 1 forward and 2 backward with free
// communication, the setting of the textbook bubble formulas.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "herd/cli/app.h"
#include "herd/cli/table.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json.h"
#include "herd/core/json_text.h"
#include "herd/schedule/render.h"
#include "herd/schedule/simulate.h"

namespace herd::cli {

namespace {

struct ScheduleOptions {
  int pp = 4;
  int v = 2;
  int microbatches = 8;
  int n = 0;       // 0: min(pp, microbatches), depth-first where M allows
  int layers = 0;  // 0: 4*PP*V - 2, four slots per stage with the embedding and output in two of them
  std::string kind = "flexible";
  std::string cost = "llama";
  double output_cost = 1.0;
  double embedding_cost = 0.0;
  double backward_factor = 2.0;
  double p2p_latency = 0.0;
  bool sync_send = false;
  bool even_split = false;
  std::string svg;
  int svg_width = 0;  // 0: from the number of boxes per rank
  bool json = false;
  int width = 120;
  bool v_given = false;
  bool n_given = false;
};

std::string layer_range(const std::vector<int>& l) {
  if (l.empty()) return "-";
  if (l.size() == 1) return std::to_string(l.front());
  return std::to_string(l.front()) + "-" + std::to_string(l.back());
}

Json action_json(const schedule::Action& a) {
  Json j;
  j["type"] = schedule::action_type_name(a.type);
  j["microbatch"] = a.microbatch;
  j["stage"] = a.stage;
  if (a.peer >= 0) j["peer"] = a.peer;
  return j;
}

int run_schedule(ScheduleOptions o) {
  const char* cmd = "schedule";
  Result<schedule::ScheduleKind> kind = schedule::parse_schedule_kind(o.kind);
  if (!kind.ok()) return report_error(cmd, kind.error());
  const bool single_chunk = *kind == schedule::ScheduleKind::kGPipe || *kind == schedule::ScheduleKind::k1F1B;
  if (single_chunk && !o.v_given) o.v = 1;
  if (*kind == schedule::ScheduleKind::kInterleaved && o.n_given && o.n != o.pp) {
    return report_error(cmd, make_error("--n (", o.n, ") is fixed to --pp (", o.pp,
                                        ") by the interleaved schedule; use --schedule flexible to choose N"));
  }
  if (o.cost != "llama" && o.cost != "uniform") {
    return report_error(cmd, make_error("--cost: unknown model \"", o.cost, "\"; use llama or uniform"));
  }
  // Ranges are checked here rather than by CLI11 so that the message names the option and the fix.
  if (o.p2p_latency < 0) return report_error(cmd, make_error("--p2p-latency (", o.p2p_latency, ") must be >= 0"));
  if (o.output_cost < 0) return report_error(cmd, make_error("--output-cost (", o.output_cost, ") must be >= 0"));
  if (o.embedding_cost < 0) {
    return report_error(cmd, make_error("--embedding-cost (", o.embedding_cost, ") must be >= 0"));
  }
  if (o.backward_factor <= 0) {
    return report_error(cmd, make_error("--backward-factor (", o.backward_factor, ") must be positive"));
  }
  if (o.width < 10) return report_error(cmd, make_error("--width (", o.width, ") must be at least 10 columns"));
  if (o.layers < 0) return report_error(cmd, make_error("--layers (", o.layers, ") must be positive"));
  schedule::ScheduleSpec spec;
  spec.pp = o.pp;
  spec.v = o.v;
  spec.microbatches = o.microbatches;
  spec.n = o.n_given ? o.n : std::min(o.pp, o.microbatches);
  spec.kind = *kind;
  Result<schedule::Schedule> sched = schedule::generate(spec);
  if (!sched.ok()) return report_error(cmd, sched.error());
  Result<schedule::CheckResult> checked = schedule::check(*sched);
  if (!checked.ok()) return report_error(cmd, checked.error().with_context("internal: generated schedule fails check"));
  if (o.layers == 0) o.layers = 4 * o.pp * o.v - 2;
  Result<schedule::LayerAssignment> layers = schedule::assign_layers(o.layers, o.pp, o.v, !o.even_split);
  if (!layers.ok()) return report_error(cmd, layers.error());

  schedule::CostModel cost;
  if (o.cost == "uniform") {
    cost = schedule::CostModel::uniform(sched->spec);
  } else {
    schedule::LayerCosts lc;
    lc.output_forward = o.output_cost;
    lc.embedding_forward = o.embedding_cost;
    lc.backward_factor = o.backward_factor;
    cost = schedule::CostModel::from_layers(*layers, lc);
  }
  cost.p2p_latency = o.p2p_latency;
  cost.async_send = !o.sync_send;
  Result<schedule::SimResult> sim = schedule::simulate(*sched, cost);
  if (!sim.ok()) return report_error(cmd, sim.error());
  const schedule::ScheduleSpec& s = sched->spec;
  const double textbook = double(s.pp - 1) / (s.v * s.microbatches);

  if (!o.svg.empty()) {
    schedule::SvgOptions so;
    so.time_unit = o.cost == "uniform" ? "units of one stage's forward" : "units of one layer's forward";
    // Wide enough for about 6 pixels per box (capped), so large schedules stay readable when zoomed.
    const int boxes = 2 * s.microbatches * s.v;
    so.width = o.svg_width > 0 ? o.svg_width : std::clamp(6 * boxes + 100, 1200, 16000);
    if (Status w = write_file(o.svg, schedule::render_svg(*sched, *sim, so)); !w.ok()) {
      return report_error(cmd, make_error("--svg: ", w.error().message(), "; give a writable file"));
    }
  }

  if (o.json) {
    Json j;
    j["schedule"] = schedule::schedule_kind_name(s.kind);
    j["pp"] = s.pp;
    j["v"] = s.v;
    j["microbatches"] = s.microbatches;
    j["n"] = s.n;
    j["layers"] = o.layers;
    j["cost"] = o.cost;
    j["p2p_latency"] = o.p2p_latency;
    j["async_send"] = cost.async_send;
    j["step_time"] = sim->step_time;
    j["bubble_ratio"] = sim->bubble_ratio;
    j["bubble_fraction"] = sim->bubble_fraction;
    j["textbook_bubble_ratio"] = textbook;
    j["busy"] = sim->busy;
    j["idle"] = sim->idle;
    j["peak_inflight"] = sim->peak_inflight;
    j["peak_activation"] = sim->peak_activation_bytes;
    j["stages"] = layers->layers;
    j["stage_forward_cost"] = cost.forward;
    j["stage_backward_cost"] = cost.backward;
    Json actions = Json::array(), timeline = Json::array();
    for (int r = 0; r < s.pp; ++r) {
      Json list = Json::array(), tl = Json::array();
      for (const schedule::Action& a : sched->ranks[r]) list.push_back(action_json(a));
      for (const schedule::Interval& iv : sim->timeline[r]) tl.push_back({iv.start, iv.end, iv.action});
      actions.push_back(std::move(list));
      timeline.push_back(std::move(tl));
    }
    j["actions"] = std::move(actions);
    j["timeline"] = std::move(timeline);
    if (!o.svg.empty()) j["svg"] = o.svg;
    std::cout << json_text(j) << "\n";
    return 0;
  }

  std::cout << "Pipeline schedule " << schedule::schedule_kind_name(s.kind) << ": PP=" << s.pp << " V=" << s.v
            << " M=" << s.microbatches << " N=" << s.n << ", " << o.layers << " layers, cost " << o.cost;
  if (o.cost == "llama") {
    std::cout << " (layer forward 1, backward " << format_fixed(o.backward_factor, 2) << ", embedding "
              << format_fixed(o.embedding_cost, 2) << ", output+loss " << format_fixed(o.output_cost, 2) << ")";
  }
  std::cout << ", p2p latency " << format_fixed(o.p2p_latency, 2) << ", " << (cost.async_send ? "async" : "sync")
            << " sends\n\n";
  std::cout << "Layer split (" << (o.even_split ? "even" : "lighter ends")
            << "; embedding on stage 0, output projection and loss on stage " << sched->n_stages() - 1 << ")\n";
  Table split({"stage", "rank", "chunk", "layers", "count", "forward", "backward"});
  for (int st = 0; st < sched->n_stages(); ++st) {
    const auto& l = layers->layers[st];
    std::string what = layer_range(l);
    if (st == 0) what += " +emb";
    if (st == sched->n_stages() - 1) what += " +out";
    split.add({std::to_string(st), std::to_string(st % s.pp), std::to_string(st / s.pp), what, std::to_string(l.size()),
               format_fixed(cost.forward[st], 2), format_fixed(cost.backward[st], 2)});
  }
  split.print(std::cout);
  std::cout << "\nTimeline\n" << schedule::render_ascii(*sched, *sim, o.width) << "\n";
  Table ranks({"rank", "busy", "idle", "peak in-flight", "peak activations"});
  for (int r = 0; r < s.pp; ++r) {
    ranks.add({std::to_string(r), format_fixed(sim->busy[r], 2), format_fixed(sim->idle[r], 2),
               std::to_string(sim->peak_inflight[r]), format_fixed(sim->peak_activation_bytes[r], 1)});
  }
  ranks.print(std::cout);
  std::cout << "  (in-flight: (micro-batch, chunk) pairs forwarded and not yet backwarded; activations in units of "
            << (o.cost == "uniform" ? "one stage's" : "one layer's") << " per micro-batch)\n\n";
  std::cout << "Step time: " << format_fixed(sim->step_time, 2) << " ("
            << (o.cost == "uniform" ? "units of one stage's forward" : "units of one layer's forward") << ")\n";
  std::cout << "Bubble: " << format_fixed(100 * sim->bubble_fraction, 2) << "% of the step (idle / step), ratio "
            << format_fixed(sim->bubble_ratio, 4) << " (idle / busy; (PP-1)/(V*M) = " << format_fixed(textbook, 4)
            << ")\n";
  if (!o.svg.empty()) std::cout << "Wrote " << o.svg << "\n";
  return 0;
}

}  // namespace

Subcommand add_schedule_command(CLI::App& root) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App* app = root.add_subcommand(
      "schedule", "Generate, check, simulate and draw a pipeline schedule (Llama 3's flexible interleaved 1F1B)");
  app->add_option("--pp", o->pp, "Pipeline ranks")->capture_default_str();
  app->add_option("--v", o->v, "Virtual stages (model chunks) per rank; default 2, or 1 for gpipe and 1f1b")
      ->capture_default_str();
  app->add_option("--microbatches", o->microbatches, "Micro-batches per step (M); any M >= 1, also M < PP")
      ->capture_default_str();
  app->add_option("--n", o->n,
                  "Contiguous micro-batches per chunk (N), from PP (depth-first) to M (breadth-first); default "
                  "min(PP, M)");
  app->add_option("--layers", o->layers,
                  "Transformer layers to split over the PP*V virtual stages; default 4*PP*V - 2 (balanced with "
                  "lighter ends, like Llama 3 405B's 126 = 16*8 - 2)");
  app->add_option("--schedule", o->kind, "flexible (Llama 3), gpipe, 1f1b or interleaved (Megatron, N = PP)")
      ->capture_default_str();
  app->add_option("--cost", o->cost,
                  "llama: costs from the layer split (layer forward 1, backward 2, output+loss --output-cost); "
                  "uniform: every stage forward 1, backward 2, free communication")
      ->capture_default_str();
  app->add_option("--output-cost", o->output_cost, "Output projection + loss forward, in layer forwards (llama cost)")
      ->capture_default_str();
  app->add_option("--embedding-cost", o->embedding_cost, "Embedding forward, in layer forwards (llama cost)")
      ->capture_default_str();
  app->add_option("--backward-factor", o->backward_factor, "Backward time over forward time (llama cost)")
      ->capture_default_str();
  app->add_option("--p2p-latency", o->p2p_latency, "Time of one point-to-point transfer, in the same units")
      ->capture_default_str();
  app->add_flag("--sync-send", o->sync_send, "Synchronous sends: the sender waits for each transfer to finish");
  app->add_flag("--even-split", o->even_split,
                "Split layers evenly instead of making the first and last stages lighter");
  app->add_option("--svg", o->svg, "Write the timeline as an SVG drawing to this file");
  app->add_option("--svg-width", o->svg_width, "Width of the SVG in pixels; default about 6 per box, 1200 to 16000");
  app->add_option("--width", o->width, "Columns of the ASCII timeline")->capture_default_str();
  app->add_flag("--json", o->json, "Print one JSON object instead of tables");
  return {app, [o, app] {
            o->v_given = app->count("--v") > 0;
            o->n_given = app->count("--n") > 0;
            return run_schedule(*o);
          }};
}

}  // namespace herd::cli

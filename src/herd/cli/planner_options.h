// Options shared by `herd estimate` and `herd plan`: model, cluster, GPU count, training shape and the
// layout knobs (fixed where given; `plan` searches the ones left out). Parsing turns them into the
// planner's value types with errors that name the option.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/planner/layout.h"
#include "herd/planner/reliability.h"
#include "herd/planner/search.h"
#include "herd/topology/cluster.h"

namespace herd::cli {

// The layout knobs beside the four degrees, with the same flag names and meanings wherever a layout is
// given: `herd estimate`, `herd plan` and `herd train` (Layout::to_flags prints them back).
struct LayoutKnobs {
  std::optional<int> v;
  std::optional<std::int64_t> microbatch;  // sequences per micro-batch on one data-parallel rank
  std::optional<int> n;
  std::optional<std::string> recompute;
  std::optional<std::string> sequence_parallel;
  std::optional<std::string> reshard_after_forward;
};
void add_layout_knob_options(CLI::App* app, LayoutKnobs& k);
// Sets the knobs that were given on `l`; errors name the option.
Status apply_layout_knobs(const LayoutKnobs& k, planner::Layout& l);

struct PlannerOptions {
  std::string model;
  std::string cluster;
  std::int64_t gpus = 0;
  std::int64_t seq_len = 8192;
  std::int64_t global_batch = 0;         // sequences
  std::int64_t global_batch_tokens = 0;  // alternative to global_batch
  std::string precision = "bf16";
  // Planner-only system knobs (planner::SystemSpec) and the layer split (planner::Layout::layer_split).
  std::string layer_split = "auto";
  std::string software;  // empty: herd on a CPU host (the only software that runs there), else fused
  std::string attention = "flash";
  std::string pipeline_sends = "async";
  std::string dp_overlap = "on";
  std::string grad_acc_fusion = "off";
  std::string tp_overlap = "off";
  std::string grad_dtype = "fp32";
  LayoutKnobs knobs;
  int zero = 3;
  bool json = false;
  std::string svg, html;
  // Reliability projection (planner/reliability.h); checkpoint_bw unset = the cluster's storage.
  double failure_rate = planner::kLlama3FailureRatePerHour;
  std::optional<double> checkpoint_bw;
  double snapshot_bw = planner::kDefaultSnapshotGbPerS;
  double restart_s = planner::kDefaultRestartS;
  std::string checkpoint_mode = "async";
  double elastic_restart_s = planner::kDefaultElasticRestartS;
  double repair_s = planner::kDefaultRepairS;
};

// Adds the shared options to a subcommand.
void add_planner_options(CLI::App* app, PlannerOptions& o);

struct PlannerInputs {
  model::LlamaConfig cfg;
  topology::Cluster cluster;
  planner::TrainingSpec train;
  planner::Layout base;  // knobs from the command line (degrees filled in by the caller)
  planner::ReliabilitySpec reliability;
  bool software_given = false;  // --software was given (else the step-time band spans the presets)
};
Result<PlannerInputs> resolve_planner_inputs(const PlannerOptions& o);
// The knobs the command line fixes (taken from `in.base`); the search chooses the others.
planner::SearchSpace search_space(const PlannerOptions& o, const PlannerInputs& in);

Result<bool> parse_bool_option(const std::string& name, const std::string& value);
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace herd::cli

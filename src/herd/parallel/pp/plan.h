// Planning a pipeline before any rank starts: the schedule (generated and checked), the layer split
// and the activation memory the schedule simulator predicts for it.
//
// plan_pipeline() is everything that can refuse a pipeline layout: an M, N, V combination that cannot
// run (schedule::validate and schedule::check), a layer count the PP*V virtual stages cannot hold
// (schedule::assign_layers), or micro-batch and stage counts whose p2p tags do not fit. It is a pure
// function of the configuration, so every rank computes the same plan and a bad layout is refused
// with one line before a communicator is touched.
#pragma once

#include <vector>

#include "herd/core/error.h"
#include "herd/model/activations.h"
#include "herd/model/config.h"
#include "herd/schedule/schedule.h"
#include "herd/schedule/simulate.h"

namespace herd::parallel::pp {

struct PipelinePlan {
  schedule::Schedule schedule;
  schedule::LayerAssignment layers;
  schedule::CheckResult check;  // peak_inflight: the slots each rank's executor allocates
};

Result<PipelinePlan> plan_pipeline(const model::LlamaConfig& cfg, const schedule::ScheduleSpec& spec,
                                   bool lighter_ends = true);

// Bytes one micro-batch leaves on its rank from the forward of virtual stage s until its backward,
// from model/activations.h: the embedding's ids on stage 0, the saved list of each layer, the head's
// list on the last stage. This is what the executor allocates per (micro-batch, stage) slot.
std::vector<double> stage_activation_bytes(const model::LlamaConfig& cfg, const schedule::LayerAssignment& layers,
                                           const model::ActivationShape& shape);

// schedule::simulate's peak activation bytes per pipeline rank for the plan (uniform compute costs:
// the peak depends on each rank's program order only).
Result<std::vector<double>> predicted_peak_activation_bytes(const PipelinePlan& plan, const model::LlamaConfig& cfg,
                                                            const model::ActivationShape& shape);

}  // namespace herd::parallel::pp

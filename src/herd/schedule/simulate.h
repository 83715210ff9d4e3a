// Event simulation of a schedule: when each action starts and ends on each rank, given the cost of
// each virtual stage's forward and backward and of point-to-point transfers.
//
// The planner calls simulate() for every candidate layout, so it must be fast (bench/: PP=16, V=8,
// M=64 well under a millisecond).
#pragma once

#include <cstdint>
#include <vector>

#include "herd/core/error.h"
#include "herd/schedule/schedule.h"

namespace herd::schedule {

// Costs of a Llama model cut by assign_layers(), in units the caller chooses (`herd schedule`: one
// transformer layer's forward = 1). The embedding sits on the first virtual stage, the output projection
// and loss on the last; with a 128K vocabulary the output costs about one layer, the embedding ~0.
struct LayerCosts {
  double layer_forward = 1.0;
  double backward_factor = 2.0;  // backward = 2 x forward (two matmuls per forward matmul)
  double embedding_forward = 0.0;
  double output_forward = 1.0;
  double layer_activation_bytes = 1.0;   // per layer and micro-batch (units: one layer's activations)
  double output_activation_bytes = 0.0;  // logits kept for the loss backward, if any
  double boundary_bytes = 0.0;           // one stage boundary's activation (= its gradient)
  double p2p_latency = 0.0;
  double p2p_per_byte = 0.0;
  bool async_send = true;
};

struct CostModel {
  // Per virtual stage s (size PP*V): compute time of one micro-batch's forward and backward, in any
  // time unit (the planner uses seconds; `herd schedule` one layer's forward).
  std::vector<double> forward;
  std::vector<double> backward;
  // Point-to-point: time = latency + bytes * per_byte for the tensor crossing the boundary after
  // stage s (activation forward, gradient backward; same size). boundary_bytes has size PP*V.
  double p2p_latency = 0;
  double p2p_per_byte = 0;
  std::vector<double> boundary_bytes;
  // Asynchronous sends (Llama 3) let the sender go on at once; synchronous sends block the sender
  // until the transfer has finished.
  bool async_send = true;
  // Activation bytes one micro-batch leaves on its rank from the forward of stage s until its
  // backward (size PP*V); used for the peak-memory figure.
  std::vector<double> activation_bytes;

  // Every stage forward = 1, backward = 2, free communication: the textbook setting.
  static CostModel uniform(const ScheduleSpec& spec);
  // Stage costs from a layer assignment: layers x layer cost, plus the embedding on the first stage
  // and the output projection + loss on the last.
  static CostModel from_layers(const LayerAssignment& layers, const LayerCosts& costs);
};

struct Interval {
  double start;
  double end;
  int action;  // index into schedule.ranks[r]
};

struct SimResult {
  double step_time = 0;                         // last action's end on any rank
  std::vector<double> busy;                     // per rank: compute time
  std::vector<double> idle;                     // per rank: step_time - busy
  double bubble_ratio = 0;                      // mean over ranks of idle / busy (the paper's (PP-1)/(V*M))
  double bubble_fraction = 0;                   // mean over ranks of idle / step_time
  std::vector<int> peak_inflight;               // per rank, as check() counts it
  std::vector<double> peak_activation_bytes;    // per rank, from CostModel::activation_bytes
  std::vector<std::vector<Interval>> timeline;  // per rank: compute intervals (forward and backward)
};

Result<SimResult> simulate(const Schedule& schedule, const CostModel& cost);

}  // namespace herd::schedule

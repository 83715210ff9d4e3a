// plan_pipeline and the simulator's activation-memory prediction (plan.h).
#include "herd/parallel/pp/plan.h"

#include <limits>

#include "herd/comm/types.h"

namespace herd::parallel::pp {

Result<PipelinePlan> plan_pipeline(const model::LlamaConfig& cfg, const schedule::ScheduleSpec& spec,
                                   bool lighter_ends) {
  HERD_RETURN_IF_ERROR(schedule::validate(spec));
  if (cfg.n_layers > std::numeric_limits<int>::max()) return make_error("layers (", cfg.n_layers, ") too many");
  PipelinePlan plan;
  HERD_ASSIGN_OR_RETURN(plan.layers,
                        schedule::assign_layers(static_cast<int>(cfg.n_layers), spec.pp, spec.v, lighter_ends));
  HERD_ASSIGN_OR_RETURN(plan.schedule, schedule::generate(spec));
  HERD_ASSIGN_OR_RETURN(plan.check, schedule::check(plan.schedule));
  // The largest tag the step will use must fit MPI's guaranteed tag range.
  const int n_st = plan.schedule.n_stages();
  if (!comm::p2p_tag(spec.microbatches - 1, n_st - 1, true, n_st).ok()) {
    return make_error("microbatches (", spec.microbatches, ") x pp*v (", n_st, ") virtual stages needs p2p tags up to ",
                      2LL * spec.microbatches * n_st - 1, ", over the 32767 every MPI allows; use at most ",
                      32768 / (2 * n_st), " micro-batches per step");
  }
  return plan;
}

std::vector<double> stage_activation_bytes(const model::LlamaConfig& cfg, const schedule::LayerAssignment& layers,
                                           const model::ActivationShape& shape) {
  const std::size_t n = layers.layers.size();
  std::vector<double> out(n, 0.0);
  const double layer = static_cast<double>(model::layer_activation_bytes(cfg, shape));
  for (std::size_t s = 0; s < n; ++s) {
    out[s] = static_cast<double>(layers.layers[s].size()) * layer;
    if (s == 0) out[s] += static_cast<double>(model::embedding_activation_bytes(cfg, shape));
    if (s + 1 == n) out[s] += static_cast<double>(model::output_activation_bytes(cfg, shape));
  }
  return out;
}

Result<std::vector<double>> predicted_peak_activation_bytes(const PipelinePlan& plan, const model::LlamaConfig& cfg,
                                                            const model::ActivationShape& shape) {
  schedule::CostModel cost = schedule::CostModel::uniform(plan.schedule.spec);
  cost.activation_bytes = stage_activation_bytes(cfg, plan.layers, shape);
  HERD_ASSIGN_OR_RETURN(schedule::SimResult sim, schedule::simulate(plan.schedule, cost));
  return sim.peak_activation_bytes;
}

}  // namespace herd::parallel::pp

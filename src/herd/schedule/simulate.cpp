// Event simulation of a schedule (simulate.h).
//
// Semantics. Each rank runs its list in order with its own clock. A forward or backward of stage s
// occupies the rank for cost.forward[s] or cost.backward[s]. A send of the tensor crossing boundary b
// (after stage b) issued at time t arrives at t + p2p_latency + boundary_bytes[b] * p2p_per_byte; an
// asynchronous send costs the sender nothing, a synchronous one holds it until the transfer is done.
// Receives are posted ahead by the executor, so a transfer never waits for its receiver; a receive
// action waits until the data has arrived. Because every time is a function of its dependencies only,
// the order in which ranks are advanced does not change the result.
//
// Speed. The planner simulates thousands of layouts, so one pass does everything: ranks are advanced
// from a work stack until they block on a receive, and a send wakes its receiver if that rank is
// blocked on exactly this send. Each action is visited once; the only allocations are the result
// vectors and two tables indexed by (micro-batch, stage).
#include "herd/schedule/simulate.h"

#include <algorithm>

namespace herd::schedule {

CostModel CostModel::uniform(const ScheduleSpec& spec) {
  const std::size_t s = static_cast<std::size_t>(spec.pp) * spec.v;
  CostModel c;
  c.forward.assign(s, 1.0);
  c.backward.assign(s, 2.0);
  c.boundary_bytes.assign(s, 0.0);
  c.activation_bytes.assign(s, 1.0);
  return c;
}

CostModel CostModel::from_layers(const LayerAssignment& la, const LayerCosts& lc) {
  const std::size_t s = la.layers.size();
  CostModel c;
  c.forward.resize(s);
  c.backward.resize(s);
  c.activation_bytes.resize(s);
  c.boundary_bytes.assign(s, lc.boundary_bytes);
  for (std::size_t i = 0; i < s; ++i) {
    const double layers = static_cast<double>(la.layers[i].size());
    double fwd = layers * lc.layer_forward;
    double act = layers * lc.layer_activation_bytes;
    if (i == 0) fwd += lc.embedding_forward;
    if (i + 1 == s) {
      fwd += lc.output_forward;
      act += lc.output_activation_bytes;
    }
    c.forward[i] = fwd;
    c.backward[i] = fwd * lc.backward_factor;
    c.activation_bytes[i] = act;
  }
  c.p2p_latency = lc.p2p_latency;
  c.p2p_per_byte = lc.p2p_per_byte;
  c.async_send = lc.async_send;
  return c;
}

Result<SimResult> simulate(const Schedule& sched, const CostModel& cost) {
  const ScheduleSpec& spec = sched.spec;
  const int pp = spec.pp, n_mb = spec.microbatches, n_st = sched.n_stages();
  const std::size_t ns = static_cast<std::size_t>(n_st);
  if (cost.forward.size() != ns || cost.backward.size() != ns) {
    return make_error("cost model has ", cost.forward.size(), " forward and ", cost.backward.size(),
                      " backward costs for ", n_st, " virtual stages");
  }
  if (!cost.boundary_bytes.empty() && cost.boundary_bytes.size() != ns) {
    return make_error("cost model has ", cost.boundary_bytes.size(), " boundary sizes for ", n_st, " virtual stages");
  }
  if (!cost.activation_bytes.empty() && cost.activation_bytes.size() != ns) {
    return make_error("cost model has ", cost.activation_bytes.size(), " activation sizes for ", n_st,
                      " virtual stages");
  }
  HERD_CHECK(static_cast<int>(sched.ranks.size()) == pp, "schedule has ", sched.ranks.size(), " ranks, pp = ", pp);

  // arrival[kind * M * S + m * S + s]: when the tensor sent by (m, s) is at its receiver, or -1 before
  // the send has run; kind 0 is activations, 1 gradients.
  const std::size_t keys = static_cast<std::size_t>(n_mb) * ns;
  std::vector<double> arrival(2 * keys, -1.0);

  SimResult res;
  res.busy.assign(pp, 0.0);
  res.idle.assign(pp, 0.0);
  res.peak_inflight.assign(pp, 0);
  res.peak_activation_bytes.assign(pp, 0.0);
  res.timeline.resize(pp);

  std::vector<std::size_t> pc(pp, 0);
  std::vector<double> clock(pp, 0.0);
  std::vector<std::int64_t> blocked(pp, -1);  // arrival index a blocked rank waits for
  std::vector<int> live(pp, 0);
  std::vector<double> live_bytes(pp, 0.0);
  std::vector<int> ready(pp);
  for (int r = 0; r < pp; ++r) {
    ready[r] = pp - 1 - r;
    std::size_t computes = 0;
    for (const Action& a : sched.ranks[r])
      computes += a.type == ActionType::kForward || a.type == ActionType::kBackward;
    res.timeline[r].reserve(computes);
  }
  const bool have_bytes = !cost.boundary_bytes.empty();
  const bool have_act = !cost.activation_bytes.empty();
  auto transfer = [&](int boundary) {
    return cost.p2p_latency + (have_bytes ? cost.boundary_bytes[boundary] * cost.p2p_per_byte : 0.0);
  };

  while (!ready.empty()) {
    const int r = ready.back();
    ready.pop_back();
    const std::vector<Action>& list = sched.ranks[r];
    const std::size_t n = list.size();
    std::size_t i = pc[r];
    double t = clock[r];
    for (; i < n; ++i) {
      const Action& a = list[i];
      HERD_CHECK(a.stage >= 0 && a.stage < n_st && a.microbatch >= 0 && a.microbatch < n_mb,
                 "action out of range on rank ", r);
      const std::size_t key = static_cast<std::size_t>(a.microbatch) * ns + a.stage;
      switch (a.type) {
        case ActionType::kForward: {
          const double d = cost.forward[a.stage];
          res.timeline[r].push_back({t, t + d, static_cast<int>(i)});
          t += d;
          res.busy[r] += d;
          res.peak_inflight[r] = std::max(res.peak_inflight[r], ++live[r]);
          if (have_act) {
            live_bytes[r] += cost.activation_bytes[a.stage];
            res.peak_activation_bytes[r] = std::max(res.peak_activation_bytes[r], live_bytes[r]);
          }
          break;
        }
        case ActionType::kBackward: {
          const double d = cost.backward[a.stage];
          res.timeline[r].push_back({t, t + d, static_cast<int>(i)});
          t += d;
          res.busy[r] += d;
          --live[r];
          if (have_act) live_bytes[r] -= cost.activation_bytes[a.stage];
          break;
        }
        case ActionType::kSendActivation:
        case ActionType::kSendGrad: {
          const bool grad = a.type == ActionType::kSendGrad;
          const double d = transfer(grad ? a.stage - 1 : a.stage);
          const std::size_t idx = (grad ? keys : 0) + key;
          arrival[idx] = t + d;
          if (!cost.async_send) t += d;
          HERD_CHECK(a.peer >= 0 && a.peer < pp, "send to rank ", a.peer, " on rank ", r);
          if (blocked[a.peer] == static_cast<std::int64_t>(idx)) {
            blocked[a.peer] = -1;
            ready.push_back(a.peer);
          }
          break;
        }
        case ActionType::kRecvActivation:
        case ActionType::kRecvGrad: {
          // The matching send: activation of (m, s - 1), gradient of (m, s + 1).
          const bool grad = a.type == ActionType::kRecvGrad;
          HERD_CHECK(grad ? a.stage + 1 < n_st : a.stage > 0, "receive from beyond the pipeline on rank ", r);
          const std::size_t idx = grad ? keys + key + 1 : key - 1;
          if (arrival[idx] < 0) {
            blocked[r] = static_cast<std::int64_t>(idx);
            break;
          }
          t = std::max(t, arrival[idx]);
          break;
        }
      }
      if (blocked[r] >= 0) break;
    }
    pc[r] = i;
    clock[r] = t;
  }

  for (int r = 0; r < pp; ++r) {
    if (pc[r] != sched.ranks[r].size()) {
      const Action& a = sched.ranks[r][pc[r]];
      return make_error("deadlock: rank ", r, " waits forever at action ", pc[r], " (", action_type_name(a.type),
                        " m=", a.microbatch, " s=", a.stage, "); run check() for the full diagnosis");
    }
    res.step_time = std::max(res.step_time, clock[r]);
  }
  for (int r = 0; r < pp; ++r) {
    res.idle[r] = res.step_time - res.busy[r];
    if (res.busy[r] > 0) res.bubble_ratio += res.idle[r] / res.busy[r] / pp;
    if (res.step_time > 0) res.bubble_fraction += res.idle[r] / res.step_time / pp;
  }
  return res;
}

}  // namespace herd::schedule

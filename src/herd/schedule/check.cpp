// The schedule checker: proves a per-rank action list complete, well-formed and deadlock-free.
//
// Completeness: every (micro-batch, virtual stage) pair has exactly one forward and one backward, on
// the rank that holds the stage, the forward first. Data flow: a compute action finds its input on its
// rank before it runs (a receive earlier in the list, or the neighbouring stage's compute when both
// stages share the rank), a send comes after the compute that produced its tensor, and every send has
// exactly one receive and vice versa. Deadlock freedom: the lists are executed with asynchronous sends
// (a receive waits for its send; nothing else waits) until no rank can make progress; if some rank is
// left with actions, the dependency graph (program order + send -> receive) has a cycle and the
// message names every stuck rank and what it waits for. This is the semantics herd's executor has
// (receives posted early, sends asynchronous); synchronous sends in simulate() only add time.
#include <algorithm>
#include <string>

#include "herd/schedule/schedule.h"

namespace herd::schedule {

namespace {

std::string describe(const Action& a) {
  std::string s =
      std::string(action_type_name(a.type)) + " m=" + std::to_string(a.microbatch) + " s=" + std::to_string(a.stage);
  if (a.peer >= 0) s += " peer=" + std::to_string(a.peer);
  return s;
}

std::string where(int rank, int index, const Action& a) {
  return "rank " + std::to_string(rank) + " action " + std::to_string(index) + " (" + describe(a) + ")";
}

// Which stage's compute a communication action serves, and the peer it must name.
int expected_peer(const ScheduleSpec& spec, const Action& a) {
  switch (a.type) {
    case ActionType::kSendActivation:
    case ActionType::kRecvGrad: return Schedule::rank_of_stage(spec, a.stage + 1);
    case ActionType::kRecvActivation:
    case ActionType::kSendGrad: return Schedule::rank_of_stage(spec, a.stage - 1);
    default: return -1;
  }
}

bool is_send(ActionType t) { return t == ActionType::kSendActivation || t == ActionType::kSendGrad; }
bool is_recv(ActionType t) { return t == ActionType::kRecvActivation || t == ActionType::kRecvGrad; }

}  // namespace

Result<CheckResult> check(const Schedule& sched) {
  const ScheduleSpec& spec = sched.spec;
  const int pp = spec.pp, n_mb = spec.microbatches, n_st = sched.n_stages(), last = n_st - 1;
  if (static_cast<int>(sched.ranks.size()) != pp) {
    return make_error("schedule has ", sched.ranks.size(), " rank lists for pp = ", pp);
  }
  // pos[type][m * S + s]: index in its rank's list of the one action of that kind, or -1.
  const std::size_t keys = static_cast<std::size_t>(n_mb) * n_st;
  std::vector<std::vector<int>> pos(6, std::vector<int>(keys, -1));
  auto key = [&](const Action& a) { return static_cast<std::size_t>(a.microbatch) * n_st + a.stage; };

  for (int r = 0; r < pp; ++r) {
    const auto& list = sched.ranks[r];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (a.microbatch < 0 || a.microbatch >= n_mb || a.stage < 0 || a.stage >= n_st) {
        return make_error(where(r, i, a), ": micro-batch or stage out of range (M = ", n_mb, ", stages = ", n_st, ")");
      }
      if (Schedule::rank_of_stage(spec, a.stage) != r) {
        return make_error(where(r, i, a), ": stage ", a.stage, " lives on rank ",
                          Schedule::rank_of_stage(spec, a.stage));
      }
      const bool comm = is_send(a.type) || is_recv(a.type);
      if (comm) {
        const bool off_end =
            (a.type == ActionType::kSendActivation || a.type == ActionType::kRecvGrad) ? a.stage == last : a.stage == 0;
        if (off_end) return make_error(where(r, i, a), ": no neighbouring stage on that side");
        const int want = expected_peer(spec, a);
        if (want == r) return make_error(where(r, i, a), ": both stages live on this rank; no transfer needed");
        if (a.peer != want) return make_error(where(r, i, a), ": peer should be rank ", want);
      }
      int& slot = pos[static_cast<int>(a.type)][key(a)];
      if (slot >= 0) return make_error(where(r, i, a), ": duplicate of action ", slot);
      slot = i;
    }
  }

  auto at = [&](ActionType t, int m, int s) {
    return pos[static_cast<int>(t)][static_cast<std::size_t>(m) * n_st + s];
  };
  for (int m = 0; m < n_mb; ++m) {
    for (int s = 0; s < n_st; ++s) {
      const int r = Schedule::rank_of_stage(spec, s);
      const int f = at(ActionType::kForward, m, s), b = at(ActionType::kBackward, m, s);
      const std::string id = "m=" + std::to_string(m) + " s=" + std::to_string(s) + " on rank " + std::to_string(r);
      if (f < 0) return make_error("missing forward of ", id);
      if (b < 0) return make_error("missing backward of ", id);
      if (b < f) return make_error("backward of ", id, " (action ", b, ") precedes its forward (action ", f, ")");
      // Inputs: forward needs the previous stage's output, backward the next stage's input gradient.
      if (s > 0) {
        const bool local = Schedule::rank_of_stage(spec, s - 1) == r;
        const int src = local ? at(ActionType::kForward, m, s - 1) : at(ActionType::kRecvActivation, m, s);
        if (src < 0 || src > f) {
          return make_error("forward of ", id, " runs before its input ",
                            local ? "(forward of the previous stage)" : "(recv_activation)", " is on the rank");
        }
      }
      if (s < last) {
        const bool local = Schedule::rank_of_stage(spec, s + 1) == r;
        const int src = local ? at(ActionType::kBackward, m, s + 1) : at(ActionType::kRecvGrad, m, s);
        if (src < 0 || src > b) {
          return make_error("backward of ", id, " runs before its output gradient ",
                            local ? "(backward of the next stage)" : "(recv_grad)", " is on the rank");
        }
        const int sa = at(ActionType::kSendActivation, m, s);
        if (!local && (sa < 0 || sa < f))
          return make_error("send_activation of ", id, " missing or before its forward");
        if (!local && at(ActionType::kRecvActivation, m, s + 1) < 0) {
          return make_error("send_activation of ", id, " has no matching recv_activation on rank ",
                            Schedule::rank_of_stage(spec, s + 1));
        }
      }
      if (s > 0 && Schedule::rank_of_stage(spec, s - 1) != r) {
        const int sg = at(ActionType::kSendGrad, m, s);
        if (sg < 0 || sg < b) return make_error("send_grad of ", id, " missing or before its backward");
        if (at(ActionType::kRecvGrad, m, s - 1) < 0) {
          return make_error("send_grad of ", id, " has no matching recv_grad on rank ",
                            Schedule::rank_of_stage(spec, s - 1));
        }
      }
    }
  }

  // Deadlock: run the lists; a receive is ready once its matching send has run.
  std::vector<std::vector<char>> done(2, std::vector<char>(keys, 0));  // [activation, grad] sends run
  std::vector<std::size_t> pc(pp, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto& list = sched.ranks[r];
      while (pc[r] < list.size()) {
        const Action& a = list[pc[r]];
        if (a.type == ActionType::kRecvActivation && !done[0][key(a) - 1]) break;
        if (a.type == ActionType::kRecvGrad && !done[1][key(a) + 1]) break;
        if (a.type == ActionType::kSendActivation) done[0][key(a)] = 1;
        if (a.type == ActionType::kSendGrad) done[1][key(a)] = 1;
        ++pc[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < pp; ++r) {
    if (pc[r] == sched.ranks[r].size()) continue;
    stuck += (stuck.empty() ? "" : "; ") + where(r, static_cast<int>(pc[r]), sched.ranks[r][pc[r]]);
  }
  if (!stuck.empty()) return make_error("deadlock: stuck ranks wait on receives whose sends never run: ", stuck);

  CheckResult res;
  res.peak_inflight.assign(pp, 0);
  for (int r = 0; r < pp; ++r) {
    int live = 0;
    for (const Action& a : sched.ranks[r]) {
      if (a.type == ActionType::kForward) res.peak_inflight[r] = std::max(res.peak_inflight[r], ++live);
      if (a.type == ActionType::kBackward) --live;
    }
  }
  return res;
}

}  // namespace herd::schedule

// Schedule generators: GPipe, 1F1B, Megatron's interleaved 1F1B and Llama 3's flexible interleaved
// schedule, all emitted as per-rank action lists (schedule.h).
//
// Every generator works in two passes. The first decides the order of compute on each rank: which
// (micro-batch, chunk) forward or backward comes next. The second threads the point-to-point actions
// through that order: a receive right before the compute that consumes it, a send right after the
// compute that produces it. The executor posts receives early on its own (it can see the whole list);
// placing them next to their consumer keeps the list readable and lets the simulator treat a receive
// as "wait until the data is here".
//
// The flexible schedule (Llama 3, section 3.3.2 and Figure 6) orders forwards on rank r as
//   for each group of N consecutive micro-batches (the last group may be shorter):
//     for chunk c = 0 .. V-1: forward of each micro-batch of the group on chunk c
// and backwards in the same order with the chunks reversed (V-1 .. 0). Counting in slots, where a
// group shorter than PP is padded to PP with phantoms (see interleaved_order) and G = max(N, PP) is the
// first group's length, rank r then runs
//   W_r = (V-1)*G + 2*(PP-1-r) forward slots (warm-up; capped at the total),
//   alternates one forward and one backward slot (steady 1F1B phase),
//   and finishes the remaining backwards (cool-down).
// With N = PP and M a multiple of PP this is exactly Megatron's interleaved 1F1B; with N = M it is
// breadth-first (all chunks but the last run forward for every micro-batch before the first
// backward). The factor 2 in the warm-up lets rank r keep computing while the first backward travels
// from the last stage back to it. check() proves the lists deadlock-free over a broad grid of M, also
// M < PP and M not a multiple of N (tests/schedule/).
#include "herd/schedule/schedule.h"

#include <algorithm>

namespace herd::schedule {

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kFlexible: return "flexible";
  }
  return "?";
}

Result<ScheduleKind> parse_schedule_kind(const std::string& s) {
  for (ScheduleKind k :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved, ScheduleKind::kFlexible}) {
    if (s == schedule_kind_name(k)) return k;
  }
  return make_error("schedule: unknown kind \"", s, "\"; use flexible, gpipe, 1f1b or interleaved");
}

const char* action_type_name(ActionType t) {
  switch (t) {
    case ActionType::kForward: return "forward";
    case ActionType::kBackward: return "backward";
    case ActionType::kSendActivation: return "send_activation";
    case ActionType::kRecvActivation: return "recv_activation";
    case ActionType::kSendGrad: return "send_grad";
    case ActionType::kRecvGrad: return "recv_grad";
  }
  return "?";
}

namespace {
constexpr std::int64_t kMaxPairs = std::int64_t{1} << 22;
}  // namespace

Status validate(const ScheduleSpec& spec) {
  if (spec.pp < 1) return make_error("pp (", spec.pp, ") must be at least 1");
  if (spec.v < 1) return make_error("v (", spec.v, ") must be at least 1 (virtual stages per pipeline rank)");
  if (spec.microbatches < 1) return make_error("microbatches (", spec.microbatches, ") must be at least 1");
  // Each (micro-batch, stage) pair takes a few actions per list and a slot in the checker's and the
  // simulator's tables; beyond a few million pairs a step no longer fits comfortably in memory.
  const std::int64_t pairs = std::int64_t{spec.microbatches} * spec.pp * spec.v;
  if (pairs > kMaxPairs) {
    return make_error("microbatches * pp * v (", spec.microbatches, " * ", spec.pp, " * ", spec.v, " = ", pairs,
                      ") exceeds ", kMaxPairs, "; use fewer micro-batches per step");
  }
  const char* name = schedule_kind_name(spec.kind);
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
      if (spec.v != 1) {
        return make_error("v (", spec.v, ") must be 1 for the ", name,
                          " schedule; use --schedule flexible or interleaved for virtual stages");
      }
      break;
    case ScheduleKind::kInterleaved:
      if (spec.microbatches % spec.pp != 0) {
        return make_error("microbatches (", spec.microbatches, ") must be a multiple of pp (", spec.pp,
                          ") for the interleaved schedule; use --schedule flexible for any M");
      }
      break;
    case ScheduleKind::kFlexible:
      if (spec.n < 1) return make_error("n (", spec.n, ") must be at least 1 (contiguous micro-batches per chunk)");
      if (spec.n > spec.microbatches) {
        return make_error("n (", spec.n, ") must not exceed microbatches (", spec.microbatches,
                          "); n = microbatches is breadth-first, n = pp depth-first");
      }
      break;
  }
  return Status::Ok();
}

namespace {

struct Compute {
  bool forward;
  int microbatch;  // -1: a phantom slot (see interleaved_order)
  int chunk;
};

// Warm-up forwards, then one forward / one backward, then the remaining backwards. Phantom entries
// keep their place in the pairing and are dropped from the output.
std::vector<Compute> one_f_one_b(const std::vector<Compute>& fwd, const std::vector<Compute>& bwd, int warmup) {
  const int total = static_cast<int>(fwd.size());
  warmup = std::clamp(warmup, 0, total);
  std::vector<Compute> out;
  out.reserve(2 * fwd.size());
  auto emit = [&](const Compute& c) {
    if (c.microbatch >= 0) out.push_back(c);
  };
  for (int i = 0; i < warmup; ++i) emit(fwd[i]);
  for (int k = 0; k < total - warmup; ++k) {
    emit(fwd[warmup + k]);
    emit(bwd[k]);
  }
  for (int k = total - warmup; k < total; ++k) emit(bwd[k]);
  return out;
}

// The interleaved family in "slot space": micro-batches in groups of N, and a group shorter than PP
// (every group when N < PP, the last one when M mod N < PP) padded with phantom micro-batches to PP
// slots, so that the slot lists have the shape of Megatron's interleaved 1F1B, every group at least PP
// long. Dropping every action of a phantom micro-batch from all ranks keeps the cross-rank dependency
// graph acyclic (the remaining program orders are sub-orders of acyclic ones, and no real transfer
// involves a phantom), so the real schedule inherits the padded one's deadlock freedom. Without the
// padding, N < PP (forced when M < PP) and a short last group deadlock: the warm-up counts assume a
// group of at least PP ahead of every chunk switch. check() confirms the result over a broad grid.
std::vector<Compute> interleaved_order(const ScheduleSpec& spec, int n, int rank) {
  const int pp = spec.pp, m_total = spec.microbatches, v = spec.v;
  const int g_size = std::max(n, pp);
  const int groups = (m_total + n - 1) / n;
  std::vector<Compute> fwd, bwd;
  fwd.reserve(static_cast<std::size_t>(groups) * g_size * v);
  bwd.reserve(fwd.capacity());
  for (int g = 0; g < groups; ++g) {
    const int g0 = g * n, real = std::min(n, m_total - g0);
    const int slots = std::max(real, pp);
    for (int i = 0; i < v; ++i) {
      for (int j = 0; j < slots; ++j) {
        const int mb = j < real ? g0 + j : -1;
        fwd.push_back({true, mb, i});
        bwd.push_back({false, mb, v - 1 - i});
      }
    }
  }
  return one_f_one_b(fwd, bwd, (v - 1) * g_size + 2 * (pp - 1 - rank));
}

std::vector<Compute> compute_order(const ScheduleSpec& spec, int rank) {
  const int pp = spec.pp, m = spec.microbatches;
  std::vector<Compute> fwd, bwd;
  for (int i = 0; i < m; ++i) {
    fwd.push_back({true, i, 0});
    bwd.push_back({false, i, 0});
  }
  switch (spec.kind) {
    case ScheduleKind::kGPipe: return one_f_one_b(fwd, bwd, m);
    case ScheduleKind::k1F1B: return one_f_one_b(fwd, bwd, pp - 1 - rank);
    case ScheduleKind::kInterleaved: return interleaved_order(spec, pp, rank);
    case ScheduleKind::kFlexible:
      // With one chunk per rank the grouping is moot and the schedule is plain 1F1B.
      if (spec.v == 1) return one_f_one_b(fwd, bwd, pp - 1 - rank);
      return interleaved_order(spec, spec.n, rank);
  }
  return {};
}

}  // namespace

Result<Schedule> generate(const ScheduleSpec& spec_in) {
  HERD_RETURN_IF_ERROR(validate(spec_in));
  Schedule sched;
  sched.spec = spec_in;
  if (sched.spec.kind == ScheduleKind::kInterleaved) sched.spec.n = sched.spec.pp;
  if (sched.spec.kind == ScheduleKind::kGPipe || sched.spec.kind == ScheduleKind::k1F1B) {
    sched.spec.n = sched.spec.microbatches;
  }
  const ScheduleSpec& spec = sched.spec;
  const int pp = spec.pp;
  const int last = sched.n_stages() - 1;
  sched.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    std::vector<Action>& out = sched.ranks[r];
    const std::vector<Compute> order = compute_order(spec, r);
    out.reserve(order.size() * 2);
    const int prev_rank = (r + pp - 1) % pp, next_rank = (r + 1) % pp;
    // With a single rank every neighbour is local and nothing crosses a link.
    const bool p2p = pp > 1;
    for (const Compute& c : order) {
      const int s = c.chunk * pp + r;
      if (c.forward) {
        if (p2p && s > 0) out.push_back({ActionType::kRecvActivation, c.microbatch, s, prev_rank});
        out.push_back({ActionType::kForward, c.microbatch, s, -1});
        if (p2p && s < last) out.push_back({ActionType::kSendActivation, c.microbatch, s, next_rank});
      } else {
        if (p2p && s < last) out.push_back({ActionType::kRecvGrad, c.microbatch, s, next_rank});
        out.push_back({ActionType::kBackward, c.microbatch, s, -1});
        if (p2p && s > 0) out.push_back({ActionType::kSendGrad, c.microbatch, s, prev_rank});
      }
    }
  }
  return sched;
}

}  // namespace herd::schedule

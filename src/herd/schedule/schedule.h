// Pipeline schedules as data: for each pipeline rank, the ordered list of actions it
// performs in one training step. The generator builds the lists, the checker proves them complete and
// deadlock-free, the simulator (simulate.h) times them, and parallel/pp/ executes them verbatim.
//
// Terms (Llama 3 paper, section 3.3.2 and Figure 6):
//   PP  pipeline ranks; V virtual stages (model chunks) per rank, so PP*V virtual stages in all.
//       Virtual stage s lives on rank s % PP (chunk s / PP of that rank), as in Megatron's interleaving.
//   M   micro-batches per step; any M >= 1, also M < PP.
//   N   contiguous micro-batches a rank runs through one chunk before switching chunk:
//       N = PP is depth-first (Megatron's interleaved 1F1B), N = M breadth-first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::schedule {

enum class ScheduleKind {
  kGPipe,        // all forwards, then all backwards (V = 1)
  k1F1B,         // PipeDream-flush one-forward-one-backward (V = 1)
  kInterleaved,  // Megatron interleaved 1F1B: N = PP, M a multiple of PP
  kFlexible,     // Llama 3: any M, N in [1, M]; V >= 1
};
const char* schedule_kind_name(ScheduleKind k);  // "gpipe", "1f1b", "interleaved", "flexible"
Result<ScheduleKind> parse_schedule_kind(const std::string& s);

struct ScheduleSpec {
  int pp = 1;
  int v = 1;
  int microbatches = 1;  // M
  int n = 1;             // N; ignored by gpipe and 1f1b; forced to PP by interleaved
  ScheduleKind kind = ScheduleKind::kFlexible;
};

// Refuses what cannot run, with the numbers: V = 0, N > M, interleaved with M % PP != 0, ...
Status validate(const ScheduleSpec& spec);

enum class ActionType {
  kForward,         // run micro-batch m through virtual stage s
  kBackward,        // backward of micro-batch m through virtual stage s
  kSendActivation,  // send the output of (m, s) forward to the rank holding s + 1
  kRecvActivation,  // receive the input of (m, s) forward from the rank holding s - 1
  kSendGrad,        // send the input gradient of (m, s) backward to the rank holding s - 1
  kRecvGrad,        // receive the output gradient of (m, s) backward from the rank holding s + 1
};
const char* action_type_name(ActionType t);

struct Action {
  ActionType type;
  int microbatch;  // m in [0, M)
  int stage;       // virtual stage s in [0, PP*V) this action belongs to
  int peer = -1;   // pipeline rank on the other end of a send or receive
  bool operator==(const Action&) const = default;
};

struct Schedule {
  ScheduleSpec spec;
  std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions in program order
  int n_stages() const { return spec.pp * spec.v; }
  static int rank_of_stage(const ScheduleSpec& spec, int stage) { return stage % spec.pp; }
};

Result<Schedule> generate(const ScheduleSpec& spec);

// Each forward precedes its backward on the same rank; every receive has exactly one matching send;
// the cross-rank dependency graph (program order + send->receive + forward(s)->forward(s+1) data flow)
// has no cycle. Returns the number of micro-batches whose activations each rank holds at its peak
// (a forward of (m, s) acquires, its backward releases).
struct CheckResult {
  std::vector<int> peak_inflight;  // per rank, counted in (micro-batch, chunk) pairs
};
Result<CheckResult> check(const Schedule& schedule);

// L transformer layers over PP*V virtual stages. With lighter_ends, the first and the last virtual
// stage each hold one layer fewer than an even split would give them (the embedding and the output
// projection + loss take their place), as Llama 3 does; otherwise layers are split as evenly as
// possible. layers[s] lists the global layer indices of virtual stage s.
struct LayerAssignment {
  std::vector<std::vector<int>> layers;
  // The embedding sits on virtual stage 0, the output projection and loss on the last one.
};
Result<LayerAssignment> assign_layers(int n_layers, int pp, int v, bool lighter_ends = true);

}  // namespace herd::schedule

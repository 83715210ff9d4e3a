// A schedule spec from its degrees, for tests that walk many of them.
#pragma once

#include "herd/schedule/schedule.h"

namespace herd::testing {

inline schedule::ScheduleSpec spec_of(schedule::ScheduleKind kind, int pp, int v, int m, int n) {
  schedule::ScheduleSpec s;
  s.kind = kind;
  s.pp = pp;
  s.v = v;
  s.microbatches = m;
  s.n = n;
  return s;
}

}  // namespace herd::testing

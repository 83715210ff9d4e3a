// A parity run of the tests: cfg at tp x dp (cp = pp = 1, the parity micro-batches kept) trained as
// threads on the parity documents (dist_harness.h); a failure to run is a test failure.
#pragma once

#include <gtest/gtest.h>

#include "train/dist_harness.h"

namespace herd::train::testing {

template <typename T>
JobResult<T> run_parity_layout(TrainConfig c, std::int64_t tp, std::int64_t dp, std::int64_t stop_after = 0) {
  set_layout(c, tp, 1, 1, dp);
  JobResult<T> out;
  Status s = run_local_job<T>(c, parity_model(), {parity_docs(80, 7), nullptr}, &out, stop_after);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return out;
}

}  // namespace herd::train::testing

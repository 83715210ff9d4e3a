// FlatUnit across steps (parallel/fsdp/flat_unit.h): release() ends the use of the gathered weights
// and wait_grads() ends the step's gradient buffer, but both buffers are kept for the next step (a
// buffer freed and allocated again every step came back as fresh pages, zeroed by the kernel on first
// touch). What must not carry over: last step's weights (the next gather brings the updated shards) and
// last step's gradients (the next step's buffer starts from zero). A unit resharded after forward frees
// them instead (keep_buffers = false) and must behave the same.
#include "herd/parallel/fsdp/flat_unit.h"

#include <gtest/gtest.h>

#include "comm/comm_test_util.h"

namespace herd::parallel::fsdp {
namespace {

using comm::testing::run_ranks;

TEST(FlatUnit, KeptBuffersCarryNeitherLastStepsWeightsNorItsGradients) {
  for (bool keep : {true, false}) {
    SCOPED_TRACE(keep);
    run_ranks(4, [keep](comm::Communicator& dp) -> Status {
      FlatUnit<float> unit("u", 37, dp, /*gather_bf16=*/false, keep);  // padded to 40, shards of 10
      const std::int64_t S = unit.shard_size(), P = unit.padded();
      auto set_shard = [&](float base) {
        for (std::int64_t i = 0; i < S; ++i) {
          const std::int64_t j = unit.shard_begin() + i;
          unit.shard_params()[i] = j < unit.count() ? base + static_cast<float>(j) : 0.0f;
        }
      };
      set_shard(100.0f);
      HERD_RETURN_IF_ERROR(unit.wait_gather());
      COMM_EXPECT(unit.gathered());
      const float* first = unit.full_params();
      for (std::int64_t j = 0; j < unit.count(); ++j) COMM_EXPECT(first[j] == 100.0f + static_cast<float>(j), j);
      unit.release();
      COMM_EXPECT(!unit.gathered() && unit.full_params() == nullptr, "released weights are not readable");

      // Step 1's gradients: every rank adds r + 1 to every element; the shard gets the sum, 10.
      unit.zero_grads();
      float* g = unit.full_grads();
      for (std::int64_t j = 0; j < P; ++j) g[j] += static_cast<float>(dp.rank() + 1);
      unit.begin_reduce_scatter_grads();
      HERD_RETURN_IF_ERROR(unit.wait_grads());
      for (std::int64_t i = 0; i < S; ++i) COMM_EXPECT(unit.shard_grads()[i] == 10.0f, "step 1, element ", i);

      // The optimizer moves the shard; the next gather brings the new weights, into the same buffer.
      set_shard(200.0f);
      unit.params_updated();
      HERD_RETURN_IF_ERROR(unit.wait_gather());
      const float* second = unit.full_params();
      COMM_EXPECT(!keep || second == first, "the gathered buffer is reused");
      for (std::int64_t j = 0; j < unit.count(); ++j) COMM_EXPECT(second[j] == 200.0f + static_cast<float>(j), j);
      unit.release();

      // Step 2 without zero_grads(): the kept buffer starts from zero all the same.
      g = unit.full_grads();
      for (std::int64_t j = 0; j < P; ++j) COMM_EXPECT(g[j] == 0.0f, "step 2 starts from zero, element ", j);
      for (std::int64_t j = 0; j < P; ++j) g[j] += 1.0f;
      COMM_EXPECT(unit.full_grads()[0] == 1.0f, "within a step the buffer accumulates");
      unit.zero_grads();
      g = unit.full_grads();
      for (std::int64_t j = 0; j < P; ++j) g[j] += 2.0f * static_cast<float>(dp.rank() + 1);
      unit.begin_reduce_scatter_grads();
      HERD_RETURN_IF_ERROR(unit.wait_grads());
      for (std::int64_t i = 0; i < S; ++i) COMM_EXPECT(unit.shard_grads()[i] == 20.0f, "step 2, element ", i);
      return Status::Ok();
    });
  }
}

}  // namespace
}  // namespace herd::parallel::fsdp

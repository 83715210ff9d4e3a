// A rank's model on a device, on any machine: HostDeviceOps (host_device_ops.h) is a device whose
// memory is host memory underneath and whose kernels are the CPU's, registered as Device::kCuda for the
// test. Training a layout on it takes every path a GPU run takes (device buffers, inputs copied in, the
// communicators' device path, checkpoint pieces and full weights through host copies), so
//   - the losses and final weights must be bit-identical to the same layout on the CPU (same kernels,
//     same reduction order), and
//   - no kernel may be handed host memory (the call a GPU would fault on; the device records it).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/comm_test_util.h"
#include "herd/comm/local/local_world.h"
#include "herd/model/shard.h"
#include "herd/parallel/device_memory.h"
#include "parallel/host_device_ops.h"
#include "parallel/model_test_util.h"

namespace herd::parallel {
namespace {

using kernels::testing::DeviceRegistration;
using kernels::testing::HostDeviceOps;
using testing::Batch;
using testing::make_batch;
using testing::rank_model;
using testing::small_gqa_model;

constexpr std::int64_t kDeviceSeqs = 4, kDeviceT = 16;

kernels::AdamWConfig device_adamw() {
  kernels::AdamWConfig c;
  c.weight_decay = 0.1;
  return c;
}

struct DeviceRun {
  std::vector<double> losses;
  std::vector<float> weights;     // gather_full, rank 0
  std::vector<float> piece_sums;  // per rank: sum of its checkpoint pieces' params, m and v
};

// Rank `rank`'s load-balanced CP chunks (model::CpSplit) of every sequence of `b`.
Batch cp_slice(const Batch& b, std::int64_t cp, std::int64_t rank) {
  if (cp == 1) return b;
  const model::CpSplit split = *model::make_cp_split(b.t, cp, rank);
  Batch out;
  out.seqs = b.seqs;
  out.t = split.local_len();
  for (std::int64_t s = 0; s < b.seqs; ++s) {
    for (std::int64_t t = 0; t < out.t; ++t) {
      const auto i = static_cast<std::size_t>(s * b.t + split.global_index(t));
      out.tokens.push_back(b.tokens[i]);
      out.targets.push_back(b.targets[i]);
      out.positions.push_back(b.positions[i]);
      out.doc_ids.push_back(b.doc_ids[i]);
    }
  }
  return out;
}

// `steps` steps of a tp x cp x dp layout (pp = 1) on `device`, with its communicators given the device's
// memory where it is not the CPU.
DeviceRun train_layout(std::int64_t tp, std::int64_t cp, std::int64_t dp, kernels::Device device, int steps) {
  const model::LlamaConfig cfg = small_gqa_model();
  const topology::ParallelDims dims = *topology::ParallelDims::make(tp, cp, 1, dp);
  comm::CommOptions o = comm::testing::test_options(60);
  if (device != kernels::Device::kCpu) o.device_memory = make_device_memory(kernels::ops_for(device));
  comm::LocalWorld world(static_cast<int>(dims.world()), o);
  DeviceRun run;
  run.piece_sums.assign(static_cast<std::size_t>(dims.world()), 0.0f);
  const Status s = comm::first_error(world.run([&](comm::Communicator& w) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(w, dims));
    ParallelContext ctx = groups->context(/*sp=*/tp > 1, /*reshard=*/true);
    ctx.device = device;
    const std::int64_t per_rank = kDeviceSeqs / dp;
    HERD_ASSIGN_OR_RETURN(
        auto model, rank_model<float>(ctx, cfg, model::Recompute::kSelective, 1, kDeviceT, static_cast<int>(per_rank)));
    model->init_weights(9);
    for (int step = 0; step < steps; ++step) {
      const Batch full = make_batch(kDeviceSeqs, kDeviceT, cfg.vocab, 300 + static_cast<std::uint32_t>(step));
      const Batch b = cp_slice(full, cp, ctx.cp_rank());  // this CP rank's chunks of every sequence
      std::vector<nn::MicroBatch> mbs;
      for (std::int64_t m = 0; m < per_rank; ++m) mbs.push_back(b.rows(ctx.dp_rank() * per_rank + m, 1));
      model->zero_grads();
      HERD_ASSIGN_OR_RETURN(auto l, model->forward_backward_step(mbs, 1.0f / static_cast<float>(full.real_tokens())));
      double loss = l.loss_sum;
      HERD_RETURN_IF_ERROR(ctx.fsdp()->all_reduce<double>(&loss, 1, comm::ReduceOp::kSum));
      HERD_ASSIGN_OR_RETURN(const double norm, model->step(device_adamw(), 1e-3, 1.0));
      COMM_EXPECT(std::isfinite(norm));
      if (w.rank() == 0) run.losses.push_back(loss);
    }
    // The checkpoint's view: host pointers on every device.
    float sum = 0;
    for (const ShardPiece<float>& p : model->shard_pieces()) {
      for (std::int64_t i = 0; i < p.count(); ++i) sum += p.param[i] + p.m[i] + p.v[i];
    }
    run.piece_sums[static_cast<std::size_t>(w.rank())] = sum;
    // A load through the pieces reaches the shards: halve every parameter, then read it back.
    std::vector<ShardPiece<float>> load = model->load_pieces();
    std::vector<float> want;
    for (ShardPiece<float>& p : load) {
      for (std::int64_t i = 0; i < p.count(); ++i) want.push_back(p.param[i] *= 0.5f);
    }
    model->after_load();
    std::size_t k = 0;
    for (const ShardPiece<float>& p : model->load_pieces()) {  // the same pieces, read from the device again
      for (std::int64_t i = 0; i < p.count(); ++i, ++k) {
        COMM_EXPECT(p.param[i] == want[k], p.name, " element ", i, ": ", p.param[i], " after loading ", want[k]);
      }
    }
    COMM_EXPECT(k == want.size());
    HERD_ASSIGN_OR_RETURN(auto full, model->gather_full(false));
    if (w.rank() == 0) run.weights = std::move(full);
    return Status::Ok();
  }));
  EXPECT_TRUE(s.ok()) << s.error().message();
  return run;
}

void expect_device_matches_cpu(std::int64_t tp, std::int64_t cp, std::int64_t dp) {
  SCOPED_TRACE("tp" + std::to_string(tp) + " cp" + std::to_string(cp) + " dp" + std::to_string(dp));
  const DeviceRun cpu = train_layout(tp, cp, dp, kernels::Device::kCpu, 3);
  HostDeviceOps device;
  DeviceRun gpu;
  {
    DeviceRegistration registered(&device);
    gpu = train_layout(tp, cp, dp, kernels::Device::kCuda, 3);
  }
  EXPECT_EQ(device.violations(), std::vector<std::string>{});
  EXPECT_GT(device.peak_allocated_bytes(), 0);
  ASSERT_EQ(gpu.losses.size(), 3u);
  EXPECT_EQ(gpu.losses, cpu.losses);
  EXPECT_EQ(gpu.piece_sums, cpu.piece_sums);
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size());
  for (std::size_t i = 0; i < cpu.weights.size(); ++i) ASSERT_EQ(gpu.weights[i], cpu.weights[i]) << "weight " << i;
}

TEST(DeviceRun, TensorAndDataParallelOnADeviceMatchTheCpuBitForBit) { expect_device_matches_cpu(2, 1, 2); }
TEST(DeviceRun, ContextParallelOnADeviceMatchesTheCpuBitForBit) { expect_device_matches_cpu(1, 2, 2); }

}  // namespace
}  // namespace herd::parallel

// herd's job on a device, on any machine: train.device=cuda with HostDeviceOps (tests/parallel/
// host_device_ops.h: host memory underneath, the CPU's kernels, every pointer a kernel gets checked to be
// the device's) registered as the CUDA interface. The job takes every path of a GPU run: its communicators
// carry the device's memory (the local backend's device path, pipeline sends of device activations),
// checkpoints are written and resumed through host copies of the device shards, and the full weights
// gathered through them. Against the same job on the CPU: bit-identical losses and weights, and a job
// stopped and resumed from its checkpoint on the device ends where the uninterrupted CPU job ends.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "herd/kernels/ops.h"
#include "herd/train/job/job.h"
#include "parallel/host_device_ops.h"
#include "train/dist_harness.h"

namespace herd::train {
namespace {

using herd::testing::ScratchDir;
using kernels::testing::DeviceRegistration;

Result<JobResult<float>> run_device_job(const TrainConfig& c, std::int64_t stop_after = 0) {
  JobResult<float> out;
  out.quiet = true;
  HERD_RETURN_IF_ERROR(run_local_job<float>(c, testing::parity_model(),
                                            {testing::parity_docs(40, 1), testing::parity_docs(10, 2)}, &out,
                                            stop_after, /*gather=*/true));
  return out;
}

void expect_device_job_matches_cpu(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp,
                                   const std::string& precision) {
  SCOPED_TRACE("tp" + std::to_string(tp) + " cp" + std::to_string(cp) + " pp" + std::to_string(pp) + " dp" +
               std::to_string(dp) + " " + precision);
  TrainConfig c = testing::parity_config(6);
  testing::set_layout(c, tp, cp, pp, dp);
  c.eval.every = 0;
  c.parallel.comm_timeout_s = 30;
  c.train.precision = *precision_from_name(precision);
  const Result<JobResult<float>> cpu = run_device_job(c);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message();

  kernels::testing::HostDeviceOps device;
  ScratchDir dir("herd_device_job");
  c.train.device = "cuda";
  c.checkpoint.dir = dir.path.string();
  c.checkpoint.every = 3;
  Result<JobResult<float>> first = make_error("not run"), second = make_error("not run");
  {
    DeviceRegistration registered(&device);
    first = run_device_job(c, /*stop_after=*/4);  // saves at step 3, stops after 4 with a save
    second = run_device_job(c);                   // resumes from step 4
  }
  ASSERT_TRUE(first.ok()) << first.error().message();
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(device.violations(), std::vector<std::string>{});
  EXPECT_EQ(second->resumed_from, 4);
  for (const StepRecord& r : first->history) {
    EXPECT_EQ(r.loss, cpu->history[static_cast<std::size_t>(r.step - 1)].loss) << "step " << r.step;
  }
  ASSERT_EQ(second->history.size(), 2u);
  for (const StepRecord& r : second->history) {
    EXPECT_EQ(r.loss, cpu->history[static_cast<std::size_t>(r.step - 1)].loss) << "resumed step " << r.step;
  }
  ASSERT_EQ(second->weights.size(), cpu->weights.size());
  for (std::size_t i = 0; i < cpu->weights.size(); ++i) {
    EXPECT_EQ(second->weights[i].second, cpu->weights[i].second) << cpu->weights[i].first;
  }
}

TEST(DeviceJob, Tp2Dp2ResumedOnADeviceMatchesTheCpuJobBitForBit) { expect_device_job_matches_cpu(2, 1, 1, 2, "fp32"); }
TEST(DeviceJob, PipelineSendsOfDeviceActivationsMatchTheCpuJob) { expect_device_job_matches_cpu(1, 2, 2, 1, "fp32"); }
TEST(DeviceJob, Bf16OnADeviceMatchesTheCpuJob) { expect_device_job_matches_cpu(2, 1, 2, 1, "bf16"); }

}  // namespace
}  // namespace herd::train

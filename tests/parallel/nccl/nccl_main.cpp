// The NCCL backend on real GPUs: one rank per visible GPU (up to 4) as threads of a local world, the
// NCCL communicator bootstrapped over it. Data with a closed-form result, as in the other backends'
// tests. Without a usable GPU it prints why and exits with 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "herd/comm/device_memory.h"
#include "herd/comm/local/local_world.h"
#include "herd/comm/nccl/nccl_communicator.h"
#include "herd/comm/reduce.h"
#if HERD_HAVE_CUDA_KERNELS
#include "herd/kernels/device.h"
#include "herd/kernels/ops.h"
#include "herd/parallel/device_memory.h"
#endif

namespace herd::comm {
namespace {

#define EXPECT_OR_FAIL(cond, ...)                                                                \
  do {                                                                                           \
    if (!(cond)) return make_error("expectation failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

Status rank_body(Communicator& boot) {
  const int r = boot.rank(), n = boot.size();
  CommOptions o;
  o.timeout_s = 60;
  o.deterministic = false;
  HERD_ASSIGN_OR_RETURN(auto c, nccl::make_communicator(boot, r, o));
  const std::size_t count = 1 << 16;
  float *d_send = nullptr, *d_recv = nullptr;
  if (cudaMalloc(&d_send, count * n * sizeof(float)) != cudaSuccess) return make_error("cudaMalloc");
  if (cudaMalloc(&d_recv, count * n * sizeof(float)) != cudaSuccess) return make_error("cudaMalloc");
  std::vector<float> h(count * n), out(count * n);
  for (std::size_t i = 0; i < count * n; ++i) h[i] = static_cast<float>(r * 1000 + i % 1000);
  cudaMemcpy(d_send, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  // all_reduce: sum_r (r * 1000 + i % 1000) = 1000 n (n - 1) / 2 + n (i % 1000), exact in fp32.
  HERD_RETURN_IF_ERROR(c->all_reduce(d_send, d_recv, count, DType::kF32, ReduceOp::kSum));
  cudaMemcpy(out.data(), d_recv, count * sizeof(float), cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_OR_FAIL(out[i] == 1000.0f * n * (n - 1) / 2 + n * static_cast<float>(i % 1000), "all_reduce ", i);
  }
  HERD_RETURN_IF_ERROR(c->all_gather(d_send, d_recv, count, DType::kF32));
  cudaMemcpy(out.data(), d_recv, count * n * sizeof(float), cudaMemcpyDeviceToHost);
  for (std::size_t k = 0; k < count * n; ++k) {
    EXPECT_OR_FAIL(out[k] == static_cast<float>((k / count) * 1000 + (k % count) % 1000), "all_gather ", k);
  }
  HERD_RETURN_IF_ERROR(c->broadcast(d_send, count, DType::kF32, 0));
  cudaMemcpy(out.data(), d_send, count * sizeof(float), cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(out[i] == static_cast<float>(i % 1000), "broadcast ", i);
  HERD_RETURN_IF_ERROR(c->barrier());
  // Without the rank's device memory the deterministic contract is refused rather than broken.
  CommOptions det = o;
  det.deterministic = true;
  HERD_ASSIGN_OR_RETURN(auto cd, nccl::make_communicator(boot, r, det));
  const Status s = cd->all_reduce(d_send, count, DType::kF32, ReduceOp::kSum);
  EXPECT_OR_FAIL(!s.ok() && s.error().message().find("comm.deterministic=false") != std::string::npos);
#if HERD_HAVE_CUDA_KERNELS
  // With it: reductions in rank order, bit for bit the host's ((a0 + a1) + a2) ..., on values whose sum
  // depends on the order; host buffers go through the bootstrap communicator.
  kernels::device_backend(kernels::Device::kCuda)->bind_thread(r);
  det.device_memory = parallel::make_device_memory(kernels::ops_for(kernels::Device::kCuda));
  HERD_ASSIGN_OR_RETURN(auto cm, nccl::make_communicator(boot, r, det));
  const std::size_t odd = count + 3;  // chunks of unequal size
  auto value = [](int rank, std::size_t i) {
    return 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i % 977);
  };
  std::vector<float> mine(odd * n);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = value(r, i);
  float *d_a = nullptr, *d_b = nullptr;
  if (cudaMalloc(&d_a, odd * n * sizeof(float)) != cudaSuccess) return make_error("cudaMalloc");
  if (cudaMalloc(&d_b, odd * n * sizeof(float)) != cudaSuccess) return make_error("cudaMalloc");
  auto expected = [&](std::size_t i) {
    std::vector<float> v(n);
    for (int j = 0; j < n; ++j) v[j] = value(j, i);
    return reduce_reference(ReduceOp::kSum, v.data(), n);
  };
  cudaMemcpy(d_a, mine.data(), odd * sizeof(float), cudaMemcpyHostToDevice);
  HERD_RETURN_IF_ERROR(cm->all_reduce(d_a, odd, DType::kF32, ReduceOp::kSum));  // in place
  std::vector<float> got(odd * n);
  cudaMemcpy(got.data(), d_a, odd * sizeof(float), cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < odd; ++i) EXPECT_OR_FAIL(got[i] == expected(i), "rank-order all_reduce ", i);
  cudaMemcpy(d_a, mine.data(), odd * n * sizeof(float), cudaMemcpyHostToDevice);
  HERD_RETURN_IF_ERROR(cm->reduce_scatter(d_a, d_b, odd, DType::kF32, ReduceOp::kSum));
  cudaMemcpy(got.data(), d_b, odd * sizeof(float), cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < odd; ++i) {
    EXPECT_OR_FAIL(got[i] == expected(static_cast<std::size_t>(r) * odd + i), "rank-order reduce_scatter ", i);
  }
  double host = r + 0.5;
  HERD_RETURN_IF_ERROR(cm->all_reduce(&host, 1, DType::kF64, ReduceOp::kMax));
  EXPECT_OR_FAIL(host == n - 0.5, "host all_reduce through the bootstrap");
  cudaFree(d_a);
  cudaFree(d_b);
#endif
  cudaFree(d_send);
  cudaFree(d_recv);
  return Status::Ok();
}

}  // namespace
}  // namespace herd::comm

int main() {
  std::string why;
  if (!herd::comm::nccl::gpu_available(&why)) {
    std::printf("SKIPPED: no usable GPU (%s)\n", why.c_str());
    return 77;
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  const int n = devices < 4 ? devices : 4;
  herd::comm::LocalWorld world(n, herd::comm::CommOptions{});
  const herd::Status s = herd::comm::first_error(world.run(herd::comm::rank_body));
  if (!s.ok()) {
    std::printf("FAILED: %s\n", s.error().message().c_str());
    return 1;
  }
  std::printf("PASSED: NCCL collectives on %d GPU(s)\n", n);
  return 0;
}

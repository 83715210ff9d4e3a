// Signals handled while oneDNN's sgemm runs must leave the heap and the result intact. oneDNN's JIT GEMM
// kernels point rsp into the heap while they run (Debian 12's oneDNN 2.6.3), so a
// handler's frame landed in the heap: a SIGTERM or SIGUSR2 to a training rank aborted it in a later
// malloc or free. gemm holds the thread's asynchronous signals around each oneDNN call; without that,
// this test aborted every time (glibc: "corrupted size vs. prev_size while consolidating").
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "herd/kernels/gemm.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

std::atomic<int> g_handled{0};
void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

TEST(GemmSignals, SignalsHandledDuringOneDnnKernelsLeaveHeapAndResultIntact) {
  if (!have_onednn()) GTEST_SKIP() << "built without oneDNN";
  struct sigaction sa {
  }, previous{};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &previous), 0);
  const GemmPolicy policy = gemm_policy();
  const int threads = num_threads();
  set_gemm_policy(GemmPolicy::kOneDNN);
  set_num_threads(1);  // every call on this thread, the one the signals are sent to

  const std::int64_t m = 128, n = 512, k = 256;  // smaller shapes took another kernel path
  const auto a = testing::random_vec<float>(m * k, 1);
  const auto b = testing::random_vec<float>(k * n, 2);
  std::vector<float> want(m * n), got(m * n);
  gemm<float>(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, want.data(), n);

  // Signals until 3000 were handled here (a count, not a clock, ends it), every GEMM beside heap traffic
  // of the sizes that exposed the corruption; one signal about every 0.3 ms, a few per GEMM.
  g_handled = 0;
  std::atomic<bool> done{false};
  const pthread_t target = pthread_self();
  std::thread sender([&] {
    while (!done.load()) {
      pthread_kill(target, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  int differing = 0;
  for (int i = 0; g_handled.load() < 3000 && i < 1000000; ++i) {
    std::vector<char> traffic(1000 + i % 5000);
    gemm<float>(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(), n);
    if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) ++differing;
  }
  done = true;
  sender.join();
  sigaction(SIGUSR1, &previous, nullptr);
  set_gemm_policy(policy);
  set_num_threads(threads);
  EXPECT_GE(g_handled.load(), 3000);
  EXPECT_EQ(differing, 0);
}

}  // namespace
}  // namespace herd::kernels

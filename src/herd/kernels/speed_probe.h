// How fast this host's cores run herd's fp32 GEMM right now, each core on its own clock.
//
// `threads` threads of one OpenMP team start together and each runs `repeats` single-threaded fp32
// GEMMs of edge `n` (as every block of herd's split GEMM runs: gemm.h), timed on its own thread's CPU
// clock. That clock does not run while the operating system's scheduler has the thread off its core, so other
// jobs the host can see (measured apart, from /proc: measure/host.h) do not count; what does count
// is everything that makes the same instructions take longer on the core: a slower clock, a sibling
// hyperthread or a neighbouring virtual machine taking the core's caches and memory bandwidth, and a
// hypervisor that takes the core without the operating system knowing (no steal time reported).
// train/plan/host_speed.h compares it with the same probe taken by `herd calibrate`.
#pragma once

#include <cstdint>
#include <vector>

namespace herd::kernels {

// The GEMM rate (FLOP/s) of each thread's median GEMM, one entry per thread; empty when threads < 1,
// n < 1 or repeats < 1. Each thread warms up with one GEMM first (page faults, library buffers).
std::vector<double> gemm_rate_per_thread(int threads, std::int64_t n, int repeats);

}  // namespace herd::kernels

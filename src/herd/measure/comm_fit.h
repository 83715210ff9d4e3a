// The communicator measured and fitted: times of the local communicator's collectives on thread ranks,
// and the latency and bandwidth of the planner's collective model fitted to them (`herd calibrate`).
//
// Every sample carries the model's terms for its op (steps x latency + volume / bandwidth), taken from
// core/collective_bw.h (latency_steps, bus_factor), the formulas the planner and bench/comm use; so the
// fit and the table that shows the fitted model next to each measurement are the planner's model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::measure {

struct CommSample {
  std::string op;  // all_reduce, all_gather, reduce_scatter, send_recv
  int ranks = 0;
  double bytes = 0, seconds = 0;  // the whole tensor of the collective; rank 0's median time
  double steps = 0, volume = 0;   // the model: seconds = steps x latency + volume / bandwidth
};

// Times all-reduce, all-gather, reduce-scatter (fp32 tensors of count x ranks elements) and a
// send/recv of `count` elements between ranks 0 and 1, for each of `counts`, on `ranks` thread ranks
// of the local communicator: rank 0's median of `repeats` runs, each started after a barrier.
Result<std::vector<CommSample>> time_local_collectives(int ranks, const std::vector<std::int64_t>& counts, int repeats);

struct LinkFit {
  double latency_s = 0;    // per step
  double bytes_per_s = 0;  // bus bandwidth
};

// The link of the collective model fitted to `samples` (send_recv left out: one copy, not a
// collective). Bandwidth from the samples of at least `large_bytes` (the MB-sized tensors of training;
// smaller ones run from cache and copy faster), latency per step from those of at most `small_bytes`
// once their copy time is taken off; the two are alternated three times, each correcting the other.
LinkFit fit_link(const std::vector<CommSample>& samples, double small_bytes, double large_bytes);

}  // namespace herd::measure

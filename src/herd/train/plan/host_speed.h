// The host's speed now against its calibration: one number that scales every rate the planner took
// from `herd calibrate` for the run at hand.
//
// A calibration anchors the projection of herd's runs on its reference training steps; a shared
// virtual machine's cores can then run 20-35% slower or faster minutes later, with nothing on /proc to
// say so (docs/projection.md, "Host speed"). The probe is a short fixed workload, herd's fp32 GEMM on
// every core at once, each core on its own CPU clock (kernels/speed_probe.h), so jobs the operating system can see
// are left out (they are the background load, measured apart: measure/host.h) and what slows the
// core itself is in. `herd calibrate` takes it just before and just after its reference steps and
// records the mean (calibration.host_speed_probe_flops_per_s); `herd train` takes it before its first
// step and after its last, and plans the run at the ratio (train/plan/projection.h).
#pragma once

#include <string>

#include "herd/core/json.h"

namespace herd::train {

// The probe: the mean over `threads` cores (each core's median of its GEMMs) of the GEMM rate, in
// FLOP/s, about 0.1 s on this kind of machine. 0 when threads < 1.
double probe_host_flops(int threads);

// The calibration's probe rate from its record (a calibration file's "calibration" object); 0 when
// the file predates the probe.
double calibrated_probe_flops(const Json& record);

// The ratio of `now` to `calibrated`, clamped to [0.25, 4] (a ratio outside is a broken probe, not a
// host); 1 when either is not positive.
double host_speed_ratio(double now, double calibrated);

}  // namespace herd::train

// This machine's stored calibration: `herd calibrate` measures the machine once and files the result
// under its host name and CPU model; `herd train` (its "planned" lines, --layout auto) and the README's
// main job reuse it, printing how old it is and what load it saw, or say plainly that a plan is
// uncalibrated (the committed `local-cpu` preset) when this machine has none.
//
// Where: calibration/<host>--<cpu model>.json beside the herd executable (build/calibration/ for a
// source build), or in the directory `--calibration-dir` names (tests use their own). No environment
// variable is read. docs/projection.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/topology/cluster.h"

namespace herd::train {

// The host name and CPU model a calibration belongs to, and the file name they make.
struct MachineKey {
  std::string host;
  std::string cpu_model;
  // "<host>--<cpu model>.json", every character outside [A-Za-z0-9._-] as '_'.
  std::string file_name() const;
};
MachineKey this_machine();

// The store's directory: `dir` when not empty, else calibration/ beside the running executable.
std::string calibration_dir(const std::string& dir = "");
// The file of `key` in the store of `dir` (as calibration_dir).
std::string stored_calibration_path(const MachineKey& key, const std::string& dir = "");

// A calibration file read back: the cluster the planner uses and what the calibration recorded about
// itself (its "calibration" object: when, where, the load it saw, the measurements).
struct StoredCalibration {
  std::string path;
  topology::Cluster cluster;
  Json record;               // the file's "calibration" object ({} when absent)
  double taken_unix_s = -1;  // when it was taken (-1: not recorded, an older file)
  std::string taken_at;      // ISO 8601 UTC, "" when not recorded
  std::string loadavg;       // /proc/loadavg when it started
  int other_runnable = -1;   // other processes with a runnable thread then (-1: not recorded)
  double background_jobs = -1;
  bool disturbed = false;  // some measurement was disturbed in every take
  // The runtime fingerprint of the herd build that measured it ("" when not recorded, an older file).
  std::string runtime_fingerprint;
  // Whether this build of herd measured it: a calibration times herd's own kernels and steps, so one
  // made by another build (other sources, flags or compiler) describes a runtime that is not this one.
  bool measured_by_this_build() const;
};

// This build's runtime fingerprint: a hash of herd's sources, build files and compiler flags
// (cmake/runtime_fingerprint.cmake), 16 hex digits.
std::string runtime_fingerprint();
// "another build of herd (runtime 0123456789abcdef, this build 94c6e98af481b501)", or "(runtime not
// recorded, ...)" for a file older than the field.
std::string other_build_text(const StoredCalibration& c);

// Reads a calibration file (a `herd calibrate` output). Errors name the file and the field.
Result<StoredCalibration> read_calibration(const std::string& path);

// This machine's stored calibration in `dir` (as calibration_dir); nullopt when there is none.
// A malformed stored file is an error naming it (and the fix: run herd calibrate again).
Result<std::optional<StoredCalibration>> find_stored_calibration(const std::string& dir = "");

// "2026-12-01T08:40:12Z" for a Unix time.
std::string utc_iso(double unix_s);
double unix_now();

// "calibrated 2 h 05 min ago (2026-12-01T08:40:12Z; load average 1.27, 2 other runnable processes,
// 0.0 background jobs then): PATH"; the age from `now`. A calibration made by another build says so and
// how to refresh it.
std::string calibration_line(const StoredCalibration& c, double now);
// "uncalibrated: no calibration of this machine (HOST, CPU) in DIR; planning with the committed
// local-cpu preset, which may be far off here; run `herd calibrate` once to measure this machine"
std::string uncalibrated_line(const MachineKey& key, const std::string& dir);

}  // namespace herd::train

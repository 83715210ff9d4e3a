// This machine's stored calibration: where it lives, reading it back, the lines that describe it.
#include "herd/train/plan/calibration_store.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>

#include "herd/core/format.h"
#include "herd/measure/machine.h"
#include "herd/runtime_fingerprint.h"  // generated in the build tree (CMakeLists.txt)
#include "herd/train/job/supervisor.h"

namespace herd::train {

namespace fs = std::filesystem;

std::string MachineKey::file_name() const {
  std::string s = (host.empty() ? "unknown-host" : host) + "--" + (cpu_model.empty() ? "unknown-cpu" : cpu_model);
  for (char& c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return s + ".json";
}

MachineKey this_machine() { return {measure::host_name(), measure::cpu_model()}; }

std::string calibration_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  return (fs::path(self_executable()).parent_path() / "calibration").string();
}

std::string stored_calibration_path(const MachineKey& key, const std::string& dir) {
  return (fs::path(calibration_dir(dir)) / key.file_name()).string();
}

Result<StoredCalibration> read_calibration(const std::string& path) {
  StoredCalibration c;
  c.path = path;
  HERD_ASSIGN_OR_RETURN(c.cluster, topology::load_cluster(path));
  HERD_ASSIGN_OR_RETURN(const Json j, read_json_file(path));
  if (j.is_object() && j.contains("calibration") && j["calibration"].is_object()) c.record = j["calibration"];
  const Json& r = c.record;
  auto number = [&](const char* key, double fallback) {
    return r.contains(key) && r[key].is_number() ? r[key].get<double>() : fallback;
  };
  c.taken_unix_s = number("taken_unix_s", -1);
  c.background_jobs = number("background_jobs", -1);
  if (r.contains("taken_at") && r["taken_at"].is_string()) c.taken_at = r["taken_at"].get<std::string>();
  if (r.contains("loadavg") && r["loadavg"].is_string()) c.loadavg = r["loadavg"].get<std::string>();
  if (r.contains("other_runnable_processes") && r["other_runnable_processes"].is_array()) {
    c.other_runnable = static_cast<int>(r["other_runnable_processes"].size());
  }
  if (r.contains("disturbed") && r["disturbed"].is_boolean()) c.disturbed = r["disturbed"].get<bool>();
  if (r.contains("runtime_fingerprint") && r["runtime_fingerprint"].is_string()) {
    c.runtime_fingerprint = r["runtime_fingerprint"].get<std::string>();
  }
  return c;
}

std::string runtime_fingerprint() { return HERD_RUNTIME_FINGERPRINT; }

bool StoredCalibration::measured_by_this_build() const { return runtime_fingerprint == train::runtime_fingerprint(); }

std::string other_build_text(const StoredCalibration& c) {
  return "another build of herd (runtime " + (c.runtime_fingerprint.empty() ? "not recorded" : c.runtime_fingerprint) +
         ", this build " + runtime_fingerprint() + ")";
}

Result<std::optional<StoredCalibration>> find_stored_calibration(const std::string& dir) {
  const std::string path = stored_calibration_path(this_machine(), dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<StoredCalibration>();
  Result<StoredCalibration> c = read_calibration(path);
  if (!c.ok()) {
    return c.error().with_context("this machine's stored calibration " + path +
                                  " (run `herd calibrate` to measure the machine again)");
  }
  return std::optional<StoredCalibration>(std::move(*c));
}

std::string utc_iso(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

namespace {

std::string age_text(double s) {
  if (s < 0) return "at an unrecorded time";
  const long long m = std::llround(s / 60);
  if (m < 60) return std::to_string(m) + " min ago";
  if (m < 48 * 60)
    return std::to_string(m / 60) + " h " + (m % 60 < 10 ? "0" : "") + std::to_string(m % 60) + " min ago";
  return std::to_string(m / (24 * 60)) + " days ago";
}

}  // namespace

std::string calibration_line(const StoredCalibration& c, double now) {
  std::string load;
  if (!c.loadavg.empty()) load += "load average " + c.loadavg.substr(0, c.loadavg.find(' '));
  if (c.other_runnable >= 0) {
    load += std::string(load.empty() ? "" : ", ") + std::to_string(c.other_runnable) + " other runnable process" +
            (c.other_runnable == 1 ? "" : "es");
  }
  if (c.background_jobs >= 0) {
    load += std::string(load.empty() ? "" : ", ") + format_fixed(c.background_jobs, 1) + " background jobs";
  }
  std::string s = "calibrated " + age_text(c.taken_unix_s < 0 ? -1 : now - c.taken_unix_s);
  if (!c.taken_at.empty() || !load.empty()) {
    s += " (" + c.taken_at + (c.taken_at.empty() || load.empty() ? "" : "; ") + load + (load.empty() ? "" : " then") +
         ")";
  }
  if (c.disturbed) s += ", a disturbed calibration (herd calibrate said so)";
  s += ": " + c.path;
  if (!c.measured_by_this_build()) {
    s += "; measured by " + other_build_text(c) + ", so its plans may be off: run `herd calibrate` to measure this one";
  }
  return s;
}

std::string uncalibrated_line(const MachineKey& key, const std::string& dir) {
  return "uncalibrated: no calibration of this machine (" + key.host + ", " + key.cpu_model + ") in " +
         calibration_dir(dir) +
         "; planning with the committed local-cpu preset, measured on another machine and possibly far off "
         "here; run `herd calibrate` once to measure this one";
}

}  // namespace herd::train

// MetricsWriter and the progress line.
#include "herd/train/step/metrics.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "herd/core/file_write.h"
#include "herd/core/json_text.h"

namespace herd::train {

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<MetricsWriter> MetricsWriter::open(const std::string& path, std::int64_t resumed_from) {
  MetricsWriter w;
  if (resumed_from >= 0) {
    std::ifstream in(path);
    std::string kept, line;
    while (in && std::getline(in, line)) {
      const Result<Json> r = parse_json_text(line, path);
      if (!r.ok()) continue;
      const Json& j = *r;
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
      const std::int64_t step = j["step"].get<std::int64_t>();
      if (step <= resumed_from) {
        kept += line + "\n";
      } else {
        w.redone_until_ = std::max(w.redone_until_, step);
      }
    }
    in.close();
    const std::string tmp = path + ".tmp";
    if (Status s = write_file(tmp, kept); !s.ok()) {
      return make_error("train.metrics_file '", path, "': cannot rewrite it through ", s.error().message(),
                        "; check the directory and free space");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return make_error("train.metrics_file '", path, "': cannot replace it: ", ec.message());
  }
  w.out_.open(path, resumed_from >= 0 ? std::ios::app : std::ios::trunc);
  if (!w.out_) return make_error("train.metrics_file '", path, "': cannot open for writing; check the directory");
  w.path_ = path;
  return w;
}

Status MetricsWriter::write(const Json& record) {
  if (!out_.is_open()) return Status::Ok();
  errno = 0;
  out_ << json_text(record) << "\n";
  out_.flush();
  if (out_.good()) return Status::Ok();
  const int err = errno;
  out_.close();
  return make_error("train.metrics_file '", path_, "': cannot write (",
                    err != 0 ? std::strerror(err) : "the write failed", "); free space or choose another file");
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", s);
  }
  return buf;
}

std::string progress_line(std::int64_t step, std::int64_t steps, double loss, double lr, double tokens_per_s,
                          double mfu, double eta_s) {
  char tps[32];
  if (tokens_per_s >= 1e3) {
    std::snprintf(tps, sizeof tps, "%.1fk", tokens_per_s / 1e3);
  } else {
    std::snprintf(tps, sizeof tps, "%.0f", tokens_per_s);
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "step %6lld/%lld | loss %.4f | lr %.2e | %s tok/s | MFU %.1f%% | ETA %s",
                static_cast<long long>(step), static_cast<long long>(steps), loss, lr, tps, 100.0 * mfu,
                format_eta(eta_s).c_str());
  return buf;
}

}  // namespace herd::train

#include "herd/core/format.h"

#include <cmath>
#include <cstdio>

namespace herd {

std::string format_thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  int count = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (count > 0 && count % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++count;
  }
  return n < 0 ? "-" + out : out;
}

std::string format_fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string format_sci(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, x);
  return buf;
}

std::string format_count(double n) {
  const double a = std::fabs(n);
  if (a >= 1e12) return format_fixed(n / 1e12, 2) + "T";
  if (a >= 1e9) return format_fixed(n / 1e9, 2) + "B";
  if (a >= 1e6) return format_fixed(n / 1e6, 2) + "M";
  if (a >= 1e3) return format_fixed(n / 1e3, 2) + "K";
  return format_fixed(n, 0);
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return format_fixed(v, u == 0 ? 0 : (std::fabs(v) < 10 ? 2 : 1)) + " " + kUnits[u];
}

std::string format_seconds(double s) {
  const double a = std::fabs(s);
  if (a >= 86400.0 * 2) return format_fixed(s / 86400.0, 1) + " days";
  if (a >= 3600.0 * 2) return format_fixed(s / 3600.0, 1) + " h";
  if (a >= 120.0) return format_fixed(s / 60.0, 1) + " min";
  if (a >= 1.0) return format_fixed(s, 3) + " s";
  if (a >= 1e-3) return format_fixed(s * 1e3, 3) + " ms";
  if (a >= 1e-6) return format_fixed(s * 1e6, 2) + " us";
  return format_fixed(s * 1e9, 1) + " ns";
}

}  // namespace herd

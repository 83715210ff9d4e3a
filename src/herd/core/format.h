// Human-readable numbers for tables: 8,030,261,248; 8.03B; 75.3 GiB; 1.24 ms.
#pragma once

#include <cstdint>
#include <string>

namespace herd {

std::string format_thousands(std::int64_t n);      // 8030261248 -> "8,030,261,248"
std::string format_count(double n);                // 8.03e9 -> "8.03B", 1.2e6 -> "1.20M"
std::string format_bytes(double bytes);            // binary units: "75.3 GiB"
std::string format_seconds(double s);              // "1.24 ms", "3.2 s", "44.0 days"
std::string format_sci(double x, int digits = 3);  // "4.23e+11"
std::string format_fixed(double x, int decimals);

}  // namespace herd

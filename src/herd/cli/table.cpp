#include "herd/cli/table.h"

#include <algorithm>

namespace herd::cli {

void Table::print(std::ostream& os) const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line = "  ";
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      const std::string pad(width[i] - std::min(width[i], cell.size()), ' ');
      line += i == 0 ? cell + pad : pad + cell;
      if (i + 1 < width.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  };
  emit(header_);
  std::size_t total = 2;
  for (std::size_t w : width) total += w + 2;
  os << "  " << std::string(total - 4, '-') << "\n";
  for (const auto& r : rows_) emit(r);
}

}  // namespace herd::cli

// Plain-text tables for the terminal: left-aligned first column, right-aligned numbers.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace herd::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& os) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace herd::cli

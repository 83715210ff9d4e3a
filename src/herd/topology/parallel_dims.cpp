#include "herd/topology/parallel_dims.h"

#include <algorithm>

namespace herd::topology {

const char* dim_name(Dim d) {
  switch (d) {
    case Dim::kTP: return "tp";
    case Dim::kCP: return "cp";
    case Dim::kPP: return "pp";
    case Dim::kDP: return "dp";
  }
  return "?";
}

std::int64_t Coord::operator[](Dim d) const {
  switch (d) {
    case Dim::kTP: return tp;
    case Dim::kCP: return cp;
    case Dim::kPP: return pp;
    case Dim::kDP: return dp;
  }
  return 0;
}

Result<ParallelDims> ParallelDims::make(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp,
                                        std::int64_t world_size) {
  const std::int64_t sizes[4] = {tp, cp, pp, dp};
  for (Dim d : kAllDims) {
    const std::int64_t s = sizes[static_cast<int>(d)];
    if (s < 1) return make_error(dim_name(d), " (", s, ") must be at least 1");
  }
  ParallelDims p;
  p.size_ = {tp, cp, pp, dp};
  if (world_size > 0) HERD_RETURN_IF_ERROR(p.check_world(world_size));
  return p;
}

Status ParallelDims::check_world(std::int64_t world_size) const {
  if (world() == world_size) return Status::Ok();
  return make_error("tp (", tp(), ") x cp (", cp(), ") x pp (", pp(), ") x dp (", dp(), ") = ", world(),
                    " ranks, but the job has ", world_size, "; choose degrees whose product is ", world_size);
}

std::int64_t ParallelDims::stride(Dim d) const {
  std::int64_t s = 1;
  for (int i = 0; i < static_cast<int>(d); ++i) s *= size_[i];
  return s;
}

Coord ParallelDims::coord(std::int64_t rank) const {
  HERD_CHECK(rank >= 0 && rank < world(), "rank ", rank, " outside [0, ", world(), ")");
  Coord c;
  c.tp = rank % size_[0];
  rank /= size_[0];
  c.cp = rank % size_[1];
  rank /= size_[1];
  c.pp = rank % size_[2];
  c.dp = rank / size_[2];
  return c;
}

std::int64_t ParallelDims::rank(const Coord& c) const {
  HERD_CHECK(c.tp >= 0 && c.tp < size_[0] && c.cp >= 0 && c.cp < size_[1] && c.pp >= 0 && c.pp < size_[2] &&
                 c.dp >= 0 && c.dp < size_[3],
             "coordinate outside ", to_string());
  return c.tp + size_[0] * (c.cp + size_[1] * (c.pp + size_[2] * c.dp));
}

std::vector<std::int64_t> ParallelDims::group(std::int64_t r, std::initializer_list<Dim> dims) const {
  const Coord base = coord(r);
  std::vector<std::int64_t> out = {0};
  // Start from the rank with the group's coordinates zeroed, then add every combination of offsets.
  Coord zero = base;
  for (Dim d : dims) {
    switch (d) {
      case Dim::kTP: zero.tp = 0; break;
      case Dim::kCP: zero.cp = 0; break;
      case Dim::kPP: zero.pp = 0; break;
      case Dim::kDP: zero.dp = 0; break;
    }
  }
  out[0] = rank(zero);
  for (Dim d : dims) {
    std::vector<std::int64_t> next;
    next.reserve(out.size() * static_cast<std::size_t>(size(d)));
    for (std::int64_t i = 0; i < size(d); ++i) {
      for (std::int64_t b : out) next.push_back(b + i * stride(d));
    }
    out = std::move(next);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<std::int64_t>> ParallelDims::groups(std::initializer_list<Dim> dims) const {
  std::vector<std::vector<std::int64_t>> out;
  std::vector<bool> seen(static_cast<std::size_t>(world()), false);
  for (std::int64_t r = 0; r < world(); ++r) {
    if (seen[static_cast<std::size_t>(r)]) continue;
    std::vector<std::int64_t> g = group(r, dims);
    for (std::int64_t m : g) seen[static_cast<std::size_t>(m)] = true;
    out.push_back(std::move(g));
  }
  return out;
}

std::string ParallelDims::to_string() const {
  return "tp" + std::to_string(tp()) + " x cp" + std::to_string(cp()) + " x pp" + std::to_string(pp()) + " x dp" +
         std::to_string(dp()) + " (" + std::to_string(world()) + (world() == 1 ? " rank)" : " ranks)");
}

}  // namespace herd::topology

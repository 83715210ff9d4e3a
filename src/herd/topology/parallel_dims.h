// ParallelDims: the 4D mesh of one training job, in the Llama 3 order [TP, CP, PP, DP].
//
// Global rank r = tp + TP*(cp + CP*(pp + PP*dp)): TP varies fastest, so a TP group occupies
// consecutive ranks (one server's NVLink domain) and DP varies slowest (the outermost, latency-tolerant
// dimension). This one value type owns the degrees, their validation, rank <-> coordinates and every
// process group; it is passed explicitly, never global (as torchtitan's ParallelDims).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::topology {

enum class Dim { kTP = 0, kCP = 1, kPP = 2, kDP = 3 };
const char* dim_name(Dim d);  // "tp", "cp", "pp", "dp"
inline constexpr std::array<Dim, 4> kAllDims = {Dim::kTP, Dim::kCP, Dim::kPP, Dim::kDP};

struct Coord {
  std::int64_t tp = 0, cp = 0, pp = 0, dp = 0;
  std::int64_t operator[](Dim d) const;
  bool operator==(const Coord&) const = default;
};

class ParallelDims {
 public:
  // Validates the degrees (each >= 1) and, when world_size > 0, that their product equals it:
  // "tp (2) x cp (1) x pp (4) x dp (2) = 16 ranks, but the job has 8; ...".
  static Result<ParallelDims> make(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp,
                                   std::int64_t world_size = 0);

  std::int64_t tp() const { return size_[0]; }
  std::int64_t cp() const { return size_[1]; }
  std::int64_t pp() const { return size_[2]; }
  std::int64_t dp() const { return size_[3]; }
  std::int64_t size(Dim d) const { return size_[static_cast<int>(d)]; }
  std::int64_t world() const { return size_[0] * size_[1] * size_[2] * size_[3]; }
  // The product rule alone, for a mesh built before the world size is known; make() calls it.
  Status check_world(std::int64_t world_size) const;

  // Distance in global rank between neighbours along d: 1, TP, TP*CP, TP*CP*PP.
  std::int64_t stride(Dim d) const;

  Coord coord(std::int64_t rank) const;
  std::int64_t rank(const Coord& c) const;

  // The ranks that share every coordinate of `rank` except those in `dims`, in increasing order
  // (for one dim: ordered by that dim's coordinate, so position i holds coordinate i).
  std::vector<std::int64_t> group(std::int64_t rank, std::initializer_list<Dim> dims) const;
  std::vector<std::int64_t> group(std::int64_t rank, Dim d) const { return group(rank, {d}); }
  // Every group along `dims`, each listed once, ordered by its smallest rank.
  std::vector<std::vector<std::int64_t>> groups(std::initializer_list<Dim> dims) const;

  std::string to_string() const;  // "tp2 x cp1 x pp4 x dp2 (16 ranks)"

 private:
  ParallelDims() = default;
  std::array<std::int64_t, 4> size_{1, 1, 1, 1};
};

}  // namespace herd::topology

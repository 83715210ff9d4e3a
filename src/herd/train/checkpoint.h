// Checkpoints: one format for every layout, one shard file per rank plus a manifest, readable by any
// other layout of the same model (and by `herd generate`, which reads whole tensors).
//
//   DIR/step_00000100/manifest.json   {"format": "herd-dist-1", "step", "elem", "layout": {tp, cp, pp, dp,
//                                      world, layout}, "meta": {...}, "files": [{rank, file, bytes,
//                                      checksum, "pieces": [{name, rows, cols, r0, r1, c0, c1, e0, e1,
//                                      offset}]}]}
//   DIR/step_00000100/rank_00003.bin  for each piece: its parameters, then AdamW m, then v (offset is the
//                                      piece's first element in the file, counting elements of `elem`)
//
// Saving is collective over the world: rank 0 makes DIR/.tmp-step_..., every rank writes and fsyncs its
// shard and a small index, rank 0 merges the indexes into the manifest (written last), renames the
// directory into place, fsyncs DIR and prunes to the newest `keep`; a crash leaves no partial step
// directory. The ranks must share a filesystem (one machine, or a network filesystem).
//
// Loading checks the layout-independent facts (format, element type, every file's size and checksum,
// the manifest's field types) and then fills each of the reading rank's pieces from whatever pieces of
// the same named tensor the writer had: the writer's pieces are scattered into the full tensor (every
// element must be covered exactly once, else the file is refused), and the reader's block and range
// are cut from it. This is what makes 1 rank -> TP2 x DP2 -> TP2 x CP2 x PP2 work; the price is that a
// rank briefly holds full tensors of the names it needs, which is fine at the model sizes a CPU trains.
// The checksum is a 64-bit FNV-1a over 8-byte words (corruption detection, not security).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/train/rank_model.h"

namespace herd::train {

std::uint64_t checksum64(const void* data, std::size_t bytes);
std::string step_dir_name(std::int64_t step);  // "step_00000100"

// Step directories under dir, newest first (empty when dir does not exist).
std::vector<std::string> list_checkpoints(const std::string& dir);

template <typename T>
Status save_dist_checkpoint(const std::string& dir, std::int64_t step, const Json& meta, const Json& layout,
                            comm::Communicator& world, const std::vector<ShardPiece<T>>& pieces, std::int64_t keep);

struct DistCheckpoint {
  std::string path;  // the step directory
  std::int64_t step = 0;
  Json manifest;

  const Json& meta() const { return manifest["meta"]; }
  std::string elem() const { return manifest["elem"].get<std::string>(); }  // "fp32" or "fp64"
  // Fills every piece (parameters and both moments) from the checkpoint's shards.
  template <typename T>
  Status load_into(std::vector<ShardPiece<T>>& pieces) const;
};

// Reads the manifest of one step directory, checks its fields and verifies every shard file.
Result<DistCheckpoint> open_dist_checkpoint(const std::string& step_path);

// The newest checkpoint under dir that verifies; nullopt when dir holds none. A corrupt newest one is an
// error naming the file, unless `fallback`, in which case it is reported by log_warning and the next
// older one is tried.
Result<std::optional<DistCheckpoint>> open_latest_checkpoint(const std::string& dir, bool fallback);

// A step directory, or a run's checkpoint directory (its newest step that verifies): what `herd generate`
// and the tools take.
Result<DistCheckpoint> open_checkpoint(const std::string& dir);

}  // namespace herd::train

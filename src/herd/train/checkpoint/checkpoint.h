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
// Saving has three parts, so it can run on a background thread without any collective (the training
// communicators belong to the steps; checkpoint_writer.h): each rank copies its pieces into a host
// snapshot (snapshot_pieces); rank 0 makes DIR/.tmp-step_...; every rank writes and fsyncs its shard
// into it and publishes a small index (written under a temporary name and renamed, so it appears
// whole); rank 0 waits for every index, merges them into the manifest (written last), renames the
// directory into place, fsyncs DIR and prunes to the newest `keep` (commit_checkpoint). A crash at any
// moment leaves no partial step directory, only a .tmp-step_* one, which remove_stale_tmp deletes at
// the next start (and after a failed save, so a full disk does not stay full). The ranks must share a
// filesystem (one machine, or a network filesystem). save_dist_checkpoint is the collective form.
//
// Loading checks the layout-independent facts (format, element type, every file's size and checksum,
// the manifest's field types) and then fills each of the reading rank's pieces from whatever pieces of
// the same named tensor the writer had: the writer's pieces are scattered into the full tensor (every
// element must be covered exactly once, else the file is refused), and the reader's block and range
// are cut from it. This is what makes 1 rank -> TP2 x DP2 -> TP2 x CP2 x PP2 work; the price is that a
// rank briefly holds full tensors of the names it needs, which is fine at the model sizes a CPU trains.
// The checksum is a 64-bit FNV-1a over 8-byte words (corruption detection, not security).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/parallel/rank_model.h"

namespace herd::train {

std::uint64_t checksum64(const void* data, std::size_t bytes);
std::string step_dir_name(std::int64_t step);  // "step_00000100"

// Step directories under dir, newest first (empty when dir does not exist).
std::vector<std::string> list_checkpoints(const std::string& dir);

std::string tmp_dir_name(std::int64_t step);  // ".tmp-step_00000100"

// One rank's part of a checkpoint in host memory: its pieces' parameters, then AdamW m, then v, as the
// shard file holds them, and the index of the pieces.
struct ShardSnapshot {
  std::vector<char> bytes;
  Json pieces = Json::array();
  std::string elem;  // "fp32" or "fp64"
};
// Copies the pieces into `out`, reusing its buffer (one snapshot per save, no allocation after the first).
template <typename T>
void snapshot_pieces(const std::vector<parallel::ShardPiece<T>>& pieces, ShardSnapshot& out);

// Writes and fsyncs rank's shard into the temporary directory `tmp` (which must exist) and then publishes
// its index. Errors name the path and the errno text.
Status write_shard(const std::string& tmp, int rank, const ShardSnapshot& snap);

// A rank whose shard write failed removes its partial shard and publishes a note with the error in place
// of its index, so rank 0 learns of the failure at once instead of waiting for the timeout.
Status publish_shard_failure(const std::string& tmp, int rank, const Status& why);
// Waits (up to timeout_s, or until *cancel) for the index of every one of world_size ranks in tmp and
// returns them in rank order; a failure note is an error naming the rank and its message. skip_rank: a
// rank not waited for (rank 0 itself, when its own write failed).
Result<Json> await_shard_indexes(const std::string& tmp, int world_size, double timeout_s,
                                 const std::atomic<bool>* cancel = nullptr, int skip_rank = -1);

// Rank 0's part: waits for the index of every one of world_size ranks in DIR/.tmp-step_S (up to
// timeout_s; `cancel`, when set, ends the wait early), writes the manifest, renames the directory into
// place, fsyncs dir and keeps the newest `keep` checkpoints.
struct CommitSpec {
  std::string dir;
  std::int64_t step = 0;
  int world_size = 1;
  std::string elem;
  Json meta, layout;
  std::int64_t keep = 2;
  double timeout_s = 300;
};
Status commit_checkpoint(const CommitSpec& spec, const std::atomic<bool>* cancel = nullptr);

// Removes every .tmp-step_* directory under dir (left by a killed or failed save); returns how many.
int remove_stale_tmp(const std::string& dir);

// Whether checkpoints can be written under dir: creates it when missing and writes, fsyncs and removes a
// probe file. The error names checkpoint.dir, the path and the errno text.
Status check_checkpoint_dir(const std::string& dir);

template <typename T>
Status save_dist_checkpoint(const std::string& dir, std::int64_t step, const Json& meta, const Json& layout,
                            comm::Communicator& world, const std::vector<parallel::ShardPiece<T>>& pieces,
                            std::int64_t keep);

struct DistCheckpoint {
  std::string path;  // the step directory
  std::int64_t step = 0;
  Json manifest;

  const Json& meta() const { return manifest["meta"]; }
  std::string elem() const { return manifest["elem"].get<std::string>(); }  // "fp32" or "fp64"
  // Fills every piece (parameters and both moments) from the checkpoint's shards.
  template <typename T>
  Status load_into(std::vector<parallel::ShardPiece<T>>& pieces) const;
};

// Reads the manifest of one step directory, checks its fields and verifies every shard file.
Result<DistCheckpoint> open_dist_checkpoint(const std::string& step_path);

// The newest checkpoint under dir that verifies; nullopt when dir holds none. A corrupt newest one is an
// error naming the file, unless `fallback`, in which case it is reported by log_warning and the next
// older one is tried. A job's rank 0 calls it and tells the others the step (Trainer::resume).
Result<std::optional<DistCheckpoint>> open_latest_checkpoint(const std::string& dir, bool fallback);

// A step directory, or a run's checkpoint directory (its newest step that verifies): what `herd generate`
// and the tools take.
Result<DistCheckpoint> open_checkpoint(const std::string& dir);

}  // namespace herd::train

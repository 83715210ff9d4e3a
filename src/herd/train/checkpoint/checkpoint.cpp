// Checkpoints: per-rank shard files, a merged manifest, and resharding on load (checkpoint.h).
#include "herd/train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

#include "herd/core/json_text.h"
#include "herd/core/log.h"

namespace herd::train {

namespace fs = std::filesystem;

std::uint64_t checksum64(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull;
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * kPrime;
  return h ^ static_cast<std::uint64_t>(bytes);
}

std::string step_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08" PRId64, step);
  return buf;
}

namespace {

bool is_step_dir(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.size() == 13 && n.rfind("step_", 0) == 0 &&
         std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Makes a rename inside dir durable.
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && is_step_dir(e.path())) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

namespace {

constexpr const char* kFormat = "herd-dist-1";

template <typename T>
const char* elem_tag() {
  return sizeof(T) == 8 ? "fp64" : "fp32";
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string rank_file(int rank, const char* ext) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.%s", rank, ext);
  return buf;
}

Status write_synced(const std::string& path, const void* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return make_error(path, ": cannot create (", std::strerror(errno), "); check the directory");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return make_error(path, ": write failed (", std::strerror(err), "); check free disk space");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return make_error(path, ": fsync failed (", std::strerror(errno), ")");
  return Status::Ok();
}

Result<std::vector<char>> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot open; the checkpoint is incomplete");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A barrier whose failure still lets every rank return (the status carries the comm error).
Status barrier(comm::Communicator& world, const char* what) {
  Status s = world.barrier();
  if (!s.ok()) return s.error().with_context(std::string("checkpoint ") + what);
  return s;
}

}  // namespace

std::string tmp_dir_name(std::int64_t step) { return ".tmp-" + step_dir_name(step); }

template <typename T>
void snapshot_pieces(const std::vector<parallel::ShardPiece<T>>& pieces, ShardSnapshot& out) {
  std::size_t total = 0;
  for (const parallel::ShardPiece<T>& p : pieces) total += 3 * static_cast<std::size_t>(p.count());
  out.bytes.resize(total * sizeof(T));
  out.pieces = Json::array();
  out.elem = elem_tag<T>();
  T* dst = reinterpret_cast<T*>(out.bytes.data());
  std::int64_t offset = 0;
  for (const parallel::ShardPiece<T>& p : pieces) {
    out.pieces.push_back({{"name", p.name},
                          {"rows", p.rows},
                          {"cols", p.cols},
                          {"r0", p.r0},
                          {"r1", p.r1},
                          {"c0", p.c0},
                          {"c1", p.c1},
                          {"e0", p.e0},
                          {"e1", p.e1},
                          {"offset", offset}});
    const std::size_t n = static_cast<std::size_t>(p.count());
    std::memcpy(dst, p.param, n * sizeof(T));
    std::memcpy(dst + n, p.m, n * sizeof(T));
    std::memcpy(dst + 2 * n, p.v, n * sizeof(T));
    dst += 3 * n;
    offset += 3 * p.count();
  }
}

Status write_shard(const std::string& tmp, int rank, const ShardSnapshot& snap) {
  const std::string bin = rank_file(rank, "bin");
  HERD_RETURN_IF_ERROR(write_synced((fs::path(tmp) / bin).string(), snap.bytes.data(), snap.bytes.size()));
  const Json entry = {{"rank", rank},
                      {"file", bin},
                      {"bytes", static_cast<std::int64_t>(snap.bytes.size())},
                      {"checksum", hex64(checksum64(snap.bytes.data(), snap.bytes.size()))},
                      {"pieces", snap.pieces}};
  const std::string text = json_text(entry);
  // The index appears whole or not at all: rank 0 takes a present index as a finished shard.
  const std::string index = (fs::path(tmp) / rank_file(rank, "json")).string();
  HERD_RETURN_IF_ERROR(write_synced(index + ".part", text.data(), text.size()));
  if (::rename((index + ".part").c_str(), index.c_str()) != 0) {
    return make_error(index, ": rename failed (", std::strerror(errno), ")");
  }
  return Status::Ok();
}

Status publish_shard_failure(const std::string& tmp, int rank, const Status& why) {
  std::error_code ec;
  fs::remove(fs::path(tmp) / rank_file(rank, "bin"), ec);  // frees what the failed write took
  const Json note = {{"rank", rank}, {"error", why.ok() ? std::string("unknown") : why.error().message()}};
  const std::string text = json_text(note);
  const std::string index = (fs::path(tmp) / rank_file(rank, "json")).string();
  HERD_RETURN_IF_ERROR(write_synced(index + ".part", text.data(), text.size()));
  if (::rename((index + ".part").c_str(), index.c_str()) != 0) {
    return make_error(index, ": rename failed (", std::strerror(errno), ")");
  }
  return Status::Ok();
}

Result<Json> await_shard_indexes(const std::string& tmp_dir, int world_size, double timeout_s,
                                 const std::atomic<bool>* cancel, int skip_rank) {
  const fs::path tmp(tmp_dir);
  Json files = Json::array();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  Status failed = Status::Ok();
  for (int r = 0; r < world_size; ++r) {
    if (r == skip_rank) continue;
    const fs::path index = tmp / rank_file(r, "json");
    std::error_code ec;
    while (!fs::exists(index, ec)) {
      if (cancel != nullptr && cancel->load()) return make_error(tmp.string(), ": checkpoint write cancelled");
      if (std::chrono::steady_clock::now() > deadline) {
        return make_error(index.string(), ": rank ", r, " did not write its shard within ", timeout_s,
                          " s (parallel.comm_timeout_s)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    HERD_ASSIGN_OR_RETURN(Json e, read_json_file(index.string()));
    if (e.is_object() && e.contains("error") && failed.ok()) {
      failed =
          make_error("rank ", r, ": ", e["error"].is_string() ? e["error"].get<std::string>() : json_text(e["error"]));
    }
    files.push_back(std::move(e));
  }
  if (!failed.ok()) return failed.error();
  return files;
}

Status commit_checkpoint(const CommitSpec& spec, const std::atomic<bool>* cancel) {
  const std::string name = step_dir_name(spec.step);
  const fs::path tmp = fs::path(spec.dir) / tmp_dir_name(spec.step);
  HERD_ASSIGN_OR_RETURN(Json files, await_shard_indexes(tmp.string(), spec.world_size, spec.timeout_s, cancel));
  for (int r = 0; r < spec.world_size; ++r) fs::remove(tmp / rank_file(r, "json"));
  const Json manifest = {{"format", kFormat},     {"step", spec.step}, {"elem", spec.elem},
                         {"layout", spec.layout}, {"meta", spec.meta}, {"files", files}};
  const std::string text = json_text(manifest, 1);
  HERD_RETURN_IF_ERROR(write_synced((tmp / "manifest.json").string(), text.data(), text.size()));
  const fs::path final_path = fs::path(spec.dir) / name;
  std::error_code ec;
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return make_error(final_path.string(), ": rename failed (", ec.message(), ")");
  fsync_dir(spec.dir);
  std::vector<std::string> all = list_checkpoints(spec.dir);  // newest first
  for (std::size_t i = static_cast<std::size_t>(std::max<std::int64_t>(spec.keep, 1)); i < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  return Status::Ok();
}

int remove_stale_tmp(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-step_", 0) == 0) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  return static_cast<int>(stale.size());
}

Status check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return make_error("checkpoint.dir '", dir, "': cannot create it (", ec.message(), "); choose a writable directory");
  }
  const std::string probe = (fs::path(dir) / ".write-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return make_error("checkpoint.dir '", dir, "' is not writable (", std::strerror(errno),
                      "); choose a writable directory");
  }
  const char byte = 0;
  const bool ok = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) {
    return make_error("checkpoint.dir '", dir, "': a test write failed (", std::strerror(err),
                      "); free space or choose another directory");
  }
  return Status::Ok();
}

template <typename T>
Status save_dist_checkpoint(const std::string& dir, std::int64_t step, const Json& meta, const Json& layout,
                            comm::Communicator& world, const std::vector<parallel::ShardPiece<T>>& pieces,
                            std::int64_t keep) {
  const fs::path tmp = fs::path(dir) / tmp_dir_name(step);
  Status made = Status::Ok();
  if (world.rank() == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) made = make_error(tmp.string(), ": cannot create (", ec.message(), "); check checkpoint.dir");
  }
  // Rank 0's failure to create the directory must stop every rank, not only rank 0.
  int ok = made.ok() ? 1 : 0;
  HERD_RETURN_IF_ERROR(world.broadcast(&ok, 1, DType::kI32, 0));
  if (!ok) return made.ok() ? make_error(tmp.string(), ": rank 0 could not create the checkpoint directory") : made;

  ShardSnapshot snap;
  snapshot_pieces<T>(pieces, snap);
  const Status w = write_shard(tmp.string(), world.rank(), snap);
  int all_ok = w.ok() ? 1 : 0;
  HERD_RETURN_IF_ERROR(world.all_reduce(&all_ok, 1, DType::kI32, comm::ReduceOp::kMin));
  if (!all_ok) {
    if (world.rank() == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    return w.ok() ? make_error(tmp.string(), ": another rank failed to write its shard") : w;
  }
  Status merged = Status::Ok();
  if (world.rank() == 0) {
    CommitSpec spec{dir, step, world.size(), elem_tag<T>(), meta, layout, keep, 0.0};
    merged = commit_checkpoint(spec);
    if (!merged.ok()) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  int done = merged.ok() ? 1 : 0;
  HERD_RETURN_IF_ERROR(world.broadcast(&done, 1, DType::kI32, 0));
  HERD_RETURN_IF_ERROR(barrier(world, "commit"));
  if (!done) return merged.ok() ? make_error(dir, ": rank 0 failed to commit the checkpoint") : merged;
  return Status::Ok();
}

namespace {

// The manifest's shape, checked before anything is read through it: a wrong type or a piece outside its
// tensor is one line naming the field, never an exception or an out-of-bounds access later.
Status check_manifest(const Json& m, const std::string& mpath) {
  HERD_ASSIGN_OR_RETURN(std::int64_t step, json_int(m, mpath, "step"));
  if (step < 0) return make_error(mpath, ": step (", step, ") must be >= 0");
  HERD_ASSIGN_OR_RETURN(std::string elem, json_string(m, mpath, "elem"));
  if (elem != "fp32" && elem != "fp64") return make_error(mpath, ": elem '", elem, "' is not fp32 or fp64");
  if (!m.contains("layout") || !m["layout"].is_object()) return make_error(mpath, ": layout: expected an object");
  if (Result<std::string> l = json_string_or(m["layout"], mpath + ": layout", "layout", ""); !l.ok()) return l.error();
  if (!m.contains("meta") || !m["meta"].is_object()) return make_error(mpath, ": meta: expected an object");
  if (!m.contains("files") || !m["files"].is_array()) return make_error(mpath, ": files: expected an array");
  for (std::size_t i = 0; i < m["files"].size(); ++i) {
    const Json& f = m["files"][i];
    const std::string where = mpath + ": files[" + std::to_string(i) + "]";
    if (!f.is_object()) return make_error(where, ": expected an object");
    HERD_ASSIGN_OR_RETURN(std::string file, json_string(f, where, "file"));
    if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos) {
      return make_error(where, ".file: '", file, "' is not a file name inside the step directory");
    }
    HERD_ASSIGN_OR_RETURN(std::int64_t bytes, json_int(f, where, "bytes"));
    if (Result<std::string> c = json_string(f, where, "checksum"); !c.ok()) return c.error();
    if (!f.contains("pieces") || !f["pieces"].is_array()) return make_error(where, ".pieces: expected an array");
    const std::int64_t elems = bytes / (elem == "fp64" ? 8 : 4);
    for (std::size_t k = 0; k < f["pieces"].size(); ++k) {
      const Json& p = f["pieces"][k];
      const std::string pw = where + ".pieces[" + std::to_string(k) + "]";
      if (!p.is_object()) return make_error(pw, ": expected an object");
      if (Result<std::string> n = json_string(p, pw, "name"); !n.ok()) return n.error();
      std::int64_t v[9];
      const char* keys[9] = {"rows", "cols", "r0", "r1", "c0", "c1", "e0", "e1", "offset"};
      for (int j = 0; j < 9; ++j) {
        HERD_ASSIGN_OR_RETURN(v[j], json_int(p, pw, keys[j]));
      }
      const std::int64_t rows = v[0], cols = v[1], r0 = v[2], r1 = v[3], c0 = v[4], c1 = v[5], e0 = v[6], e1 = v[7],
                         off = v[8];
      // Ordered so that no product or sum can overflow: rows x cols must fit int64 before the block's
      // size is taken, and the offset must lie inside the file before the range is added to it.
      const bool ok = rows > 0 && cols > 0 && rows < (std::int64_t{1} << 40) && cols < (std::int64_t{1} << 40) &&
                      rows <= std::numeric_limits<std::int64_t>::max() / cols && 0 <= r0 && r0 < r1 && r1 <= rows &&
                      0 <= c0 && c0 < c1 && c1 <= cols && 0 <= e0 && e0 <= e1 && e1 <= (r1 - r0) * (c1 - c0) &&
                      off >= 0 && off <= elems && e1 - e0 <= (elems - off) / 3;
      if (!ok) {
        return make_error(pw, ": block [", r0, ", ", r1, ") x [", c0, ", ", c1, "), range [", e0, ", ", e1,
                          ") at offset ", off, " does not fit a ", rows, " x ", cols, " tensor and a file of ", elems,
                          " elements; the manifest is corrupt");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// The bytes read from a shard file against the manifest's entry for it: its size and its checksum.
Status check_shard_bytes(const std::string& path, const std::vector<char>& bytes, const Json& entry) {
  if (static_cast<std::int64_t>(bytes.size()) != entry["bytes"].get<std::int64_t>()) {
    return make_error(path, ": ", bytes.size(), " bytes, the manifest says ", entry["bytes"].get<std::int64_t>(),
                      "; the checkpoint is truncated");
  }
  const std::string got = hex64(checksum64(bytes.data(), bytes.size()));
  if (got != entry["checksum"].get<std::string>()) {
    return make_error(path, ": checksum mismatch (the manifest says ", entry["checksum"].get<std::string>(),
                      ", the file has ", got, "); the shard is corrupt");
  }
  return Status::Ok();
}

}  // namespace

Result<DistCheckpoint> open_dist_checkpoint(const std::string& step_path) {
  const std::string mpath = (fs::path(step_path) / "manifest.json").string();
  HERD_ASSIGN_OR_RETURN(Json m, read_json_file(mpath));
  if (!m.is_object() || !m.contains("format") || m["format"] != kFormat) {
    return make_error(mpath, ": not a herd checkpoint (format is not ", kFormat, ")");
  }
  HERD_RETURN_IF_ERROR(check_manifest(m, mpath));
  for (const Json& f : m["files"]) {
    const std::string path = (fs::path(step_path) / f["file"].get<std::string>()).string();
    HERD_ASSIGN_OR_RETURN(std::vector<char> bytes, read_all(path));
    HERD_RETURN_IF_ERROR(check_shard_bytes(path, bytes, f));
  }
  DistCheckpoint ck;
  ck.path = step_path;
  ck.step = m["step"].get<std::int64_t>();
  ck.manifest = std::move(m);
  const std::string name = fs::path(step_path).filename().string();
  if (is_step_dir(fs::path(step_path)) && name != step_dir_name(ck.step)) {
    return make_error(mpath, ": step ", ck.step, " does not match its directory ", name,
                      "; the checkpoint was moved or edited");
  }
  return ck;
}

Result<std::optional<DistCheckpoint>> open_latest_checkpoint(const std::string& dir, bool fallback) {
  const std::vector<std::string> all = list_checkpoints(dir);
  for (std::size_t i = 0; i < all.size(); ++i) {
    Result<DistCheckpoint> ck = open_dist_checkpoint(all[i]);
    if (ck.ok()) {
      if (i > 0) log_warning("checkpoint.fallback: resuming from ", all[i], " instead of the newest, ", all[0]);
      return std::optional<DistCheckpoint>(std::move(*ck));
    }
    if (!fallback) {
      return make_error(ck.error().message(), "; set checkpoint.fallback=true to resume from the previous good one");
    }
    log_warning("checkpoint.fallback: ", ck.error().message());
  }
  if (!all.empty()) return make_error(dir, ": none of the ", all.size(), " checkpoints verifies");
  return std::optional<DistCheckpoint>();
}

Result<DistCheckpoint> open_checkpoint(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "manifest.json")) return open_dist_checkpoint(dir);
  HERD_ASSIGN_OR_RETURN(std::optional<DistCheckpoint> ck, open_latest_checkpoint(dir, /*fallback=*/true));
  if (!ck) return make_error(dir, ": no checkpoint here (no manifest.json and no step_* directories)");
  return std::move(*ck);
}

template <typename T>
Status DistCheckpoint::load_into(std::vector<parallel::ShardPiece<T>>& pieces) const {
  if (manifest["elem"] != elem_tag<T>()) {
    return make_error(path, ": holds ", manifest["elem"].get<std::string>(), " tensors but this run trains in ",
                      elem_tag<T>(), "; train with the checkpoint's precision");
  }
  for (const parallel::ShardPiece<T>& dst : pieces) {
    const bool inside = (0 <= dst.r0) && (dst.r1 <= dst.rows) && (0 <= dst.c0) && (dst.c1 <= dst.cols) &&
                        (0 <= dst.e0) && (dst.e1 <= (dst.r1 - dst.r0) * (dst.c1 - dst.c0));
    if (!inside) {
      return make_error("checkpoint load: piece of '", dst.name,
                        "' is outside its tensor (a bug in the model's pieces)");
    }
  }
  // Where each named tensor's pieces are: (file index, piece json).
  std::map<std::string, std::vector<std::pair<std::size_t, const Json*>>> sources;
  const Json& files = manifest["files"];
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (const Json& p : files[f]["pieces"]) sources[p["name"].get<std::string>()].push_back({f, &p});
  }
  std::map<std::size_t, std::vector<char>> cache;  // file index -> bytes
  auto file_data = [&](std::size_t f) -> Result<const T*> {
    auto it = cache.find(f);
    if (it == cache.end()) {
      const std::string file = (fs::path(path) / files[f]["file"].get<std::string>()).string();
      HERD_ASSIGN_OR_RETURN(std::vector<char> b, read_all(file));
      // The bytes used are the bytes checked: the file may have changed since the checkpoint was opened.
      HERD_RETURN_IF_ERROR(check_shard_bytes(file, b, files[f]));
      it = cache.emplace(f, std::move(b)).first;
    }
    return reinterpret_cast<const T*>(it->second.data());
  };
  for (parallel::ShardPiece<T>& dst : pieces) {
    auto src_it = sources.find(dst.name);
    if (src_it == sources.end())
      return make_error(path, ": has no tensor '", dst.name, "'; it was saved by another model");
    const std::int64_t n = dst.rows * dst.cols;
    std::vector<T> full[3] = {std::vector<T>(static_cast<std::size_t>(n)), std::vector<T>(static_cast<std::size_t>(n)),
                              std::vector<T>(static_cast<std::size_t>(n))};
    std::vector<int> covered(static_cast<std::size_t>(n), 0);
    for (const auto& [f, pj] : src_it->second) {
      const Json& p = *pj;
      if (p["rows"].get<std::int64_t>() != dst.rows || p["cols"].get<std::int64_t>() != dst.cols) {
        return make_error(path, ": tensor '", dst.name, "' is ", p["rows"].get<std::int64_t>(), " x ",
                          p["cols"].get<std::int64_t>(), " but the model has ", dst.rows, " x ", dst.cols);
      }
      HERD_ASSIGN_OR_RETURN(const T* data, file_data(f));
      const std::int64_t r0 = p["r0"], c0 = p["c0"], c1 = p["c1"], e0 = p["e0"], e1 = p["e1"];
      const std::int64_t off = p["offset"], cnt = e1 - e0, bw = c1 - c0;
      for (std::int64_t e = e0; e < e1; ++e) {
        const std::int64_t full_i = (r0 + e / bw) * dst.cols + (c0 + e % bw);
        const std::int64_t k = off + (e - e0);
        for (int w = 0; w < 3; ++w) full[w][static_cast<std::size_t>(full_i)] = data[k + w * cnt];
        ++covered[static_cast<std::size_t>(full_i)];
      }
    }
    const std::int64_t bw = dst.c1 - dst.c0;
    for (std::int64_t e = dst.e0; e < dst.e1; ++e) {
      const std::int64_t full_i = (dst.r0 + e / bw) * dst.cols + (dst.c0 + e % bw);
      if (covered[static_cast<std::size_t>(full_i)] != 1) {
        return make_error(path, ": element ", full_i, " of '", dst.name, "' is stored ",
                          covered[static_cast<std::size_t>(full_i)], " times (expected once); the manifest is corrupt");
      }
      const std::int64_t k = e - dst.e0;
      dst.param[k] = full[0][static_cast<std::size_t>(full_i)];
      dst.m[k] = full[1][static_cast<std::size_t>(full_i)];
      dst.v[k] = full[2][static_cast<std::size_t>(full_i)];
    }
  }
  return Status::Ok();
}

template Status save_dist_checkpoint<float>(const std::string&, std::int64_t, const Json&, const Json&,
                                            comm::Communicator&, const std::vector<parallel::ShardPiece<float>>&,
                                            std::int64_t);
template Status save_dist_checkpoint<double>(const std::string&, std::int64_t, const Json&, const Json&,
                                             comm::Communicator&, const std::vector<parallel::ShardPiece<double>>&,
                                             std::int64_t);
template void snapshot_pieces<float>(const std::vector<parallel::ShardPiece<float>>&, ShardSnapshot&);
template void snapshot_pieces<double>(const std::vector<parallel::ShardPiece<double>>&, ShardSnapshot&);
template Status DistCheckpoint::load_into<float>(std::vector<parallel::ShardPiece<float>>&) const;
template Status DistCheckpoint::load_into<double>(std::vector<parallel::ShardPiece<double>>&) const;

}  // namespace herd::train

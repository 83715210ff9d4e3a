// Checkpoint directories: atomic write (temporary name, fsync, rename), verified read, pruning.
#include "herd/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

Status write_file_synced(const std::string& path, const void* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return make_error(path, ": cannot create (", std::strerror(errno), "); check the directory");
  const char* p = static_cast<const char*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return make_error(path, ": write failed (", std::strerror(err), "); check free disk space");
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return make_error(path, ": fsync failed (", std::strerror(errno), ")");
  return Status::Ok();
}

void fsync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool is_step_dir(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.size() == 13 && n.rfind("step_", 0) == 0 &&
         std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Status save_checkpoint(const std::string& dir, std::int64_t step, const Json& meta, const std::vector<Blob>& blobs,
                       std::int64_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("checkpoint.dir '", dir, "': cannot create (", ec.message(), ")");
  const std::string name = step_dir_name(step);
  const fs::path final_path = fs::path(dir) / name;
  const fs::path tmp = fs::path(dir) / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return make_error(tmp.string(), ": cannot create (", ec.message(), ")");

  Json files = Json::array();
  for (const Blob& b : blobs) {
    const std::string file = b.name + ".bin";
    HERD_RETURN_IF_ERROR(write_file_synced((tmp / file).string(), b.data, b.bytes));
    files.push_back(
        {{"name", b.name}, {"file", file}, {"bytes", b.bytes}, {"checksum", hex64(checksum64(b.data, b.bytes))}});
  }
  Json manifest = {{"format", "herd checkpoint v1"}, {"step", step}, {"meta", meta}, {"files", files}};
  const std::string text = manifest.dump(1) + "\n";
  HERD_RETURN_IF_ERROR(write_file_synced((tmp / "manifest.json").string(), text.data(), text.size()));
  fsync_dir(tmp.string());

  // Replacing the same step (a re-run after resume) moves the old one aside first, so at every moment
  // a complete checkpoint of this step exists under some name.
  const fs::path old = fs::path(dir) / (".old-" + name + "-" + std::to_string(::getpid()));
  const bool had = fs::exists(final_path);
  if (had) fs::rename(final_path, old, ec);
  if (ec) return make_error(final_path.string(), ": cannot move aside (", ec.message(), ")");
  fs::rename(tmp, final_path, ec);
  if (ec) return make_error(final_path.string(), ": rename failed (", ec.message(), ")");
  fsync_dir(dir);
  if (had) fs::remove_all(old, ec);

  const std::vector<std::string> all = list_checkpoints(dir);
  for (std::size_t i = static_cast<std::size_t>(std::max<std::int64_t>(keep, 1)); i < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  return Status::Ok();
}

Result<const std::vector<char>*> LoadedCheckpoint::get(const std::string& name, std::size_t expected_bytes) const {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] != name) continue;
    if (data[i].size() != expected_bytes) {
      return make_error(path, "/", name, ".bin: holds ", data[i].size(), " bytes but this model needs ", expected_bytes,
                        "; the checkpoint is of another model or configuration");
    }
    return &data[i];
  }
  return make_error(path, "/manifest.json: no blob '", name, "'; the checkpoint is of another format");
}

Result<LoadedCheckpoint> load_checkpoint(const std::string& step_path) {
  const std::string mpath = (fs::path(step_path) / "manifest.json").string();
  HERD_ASSIGN_OR_RETURN(Json m, read_json_file(mpath));
  if (!m.is_object() || m.value("format", "") != "herd checkpoint v1" || !m.contains("files") ||
      !m["files"].is_array() || !m.contains("step")) {
    return make_error(mpath, ": not a herd checkpoint v1 manifest");
  }
  LoadedCheckpoint ck;
  ck.path = step_path;
  ck.step = m["step"].get<std::int64_t>();
  ck.meta = m.value("meta", Json::object());
  for (const Json& f : m["files"]) {
    const std::string file = f.value("file", "");
    const std::string fpath = (fs::path(step_path) / file).string();
    std::ifstream in(fpath, std::ios::binary);
    if (!in) return make_error(fpath, ": missing; the checkpoint is incomplete");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t expected = f.value("bytes", std::size_t{0});
    if (bytes.size() != expected) {
      return make_error(fpath, ": truncated (", bytes.size(), " of ", expected, " bytes); the checkpoint is corrupt");
    }
    if (hex64(checksum64(bytes.data(), bytes.size())) != f.value("checksum", "")) {
      return make_error(fpath, ": checksum mismatch; the checkpoint is corrupt");
    }
    ck.names.push_back(f.value("name", ""));
    ck.data.push_back(std::move(bytes));
  }
  return ck;
}

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

Result<LoadedCheckpoint> load_latest(const std::string& dir, bool fallback) {
  const std::vector<std::string> all = list_checkpoints(dir);
  if (all.empty()) return make_error(dir, ": no checkpoints (no step_* directories)");
  Error first = make_error("");
  for (std::size_t i = 0; i < all.size(); ++i) {
    Result<LoadedCheckpoint> ck = load_checkpoint(all[i]);
    if (ck.ok()) return ck;
    if (!fallback) {
      return make_error(ck.error().message(), "; set checkpoint.fallback=true to resume from the previous good one");
    }
    log_warning("skipping corrupt checkpoint: ", ck.error().message());
    if (i == 0) first = ck.error();
  }
  return make_error(first.message(), "; and no older checkpoint in ", dir, " verifies");
}

}  // namespace herd::train

#include "herd/core/file_write.h"

#include <cerrno>
#include <cstring>

namespace herd {

Status close_written(std::ofstream& out, const std::string& path) {
  const bool failed_before = !out.good();
  int err = failed_before ? errno : 0;
  if (out.is_open()) {
    errno = 0;
    out.flush();
    if (!out.good() && err == 0) err = errno;
    errno = 0;
    out.close();
    if (out.fail() && err == 0) err = errno;
  }
  if (failed_before || out.fail()) {
    return make_error(path, ": cannot write (", err != 0 ? std::strerror(err) : "the write failed", ")");
  }
  return Status::Ok();
}

Status write_file(const std::string& path, std::string_view bytes, bool append) {
  std::ofstream out(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
  if (out) out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return close_written(out, path);
}

}  // namespace herd

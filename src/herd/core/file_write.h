// Writing files with every error seen. A stream buffers what it is given, so a full disk (or a lost
// device, or a quota) often shows only when the buffer is flushed, at close: a check of the stream
// right after `<<` misses it and leaves a short file behind without a word. Every file herd writes
// through an ofstream ends through close_written, which flushes and closes before it looks.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

#include "herd/core/error.h"

namespace herd {

// Flushes and closes `out`, opened on `path`: an error "PATH: cannot write (REASON)" when opening, any
// write, the flush or the close failed (REASON: the system's, e.g. "No space left on device").
Status close_written(std::ofstream& out, const std::string& path);

// Writes `bytes` to `path` (truncated first, or appended to), checked as close_written.
Status write_file(const std::string& path, std::string_view bytes, bool append = false);

}  // namespace herd

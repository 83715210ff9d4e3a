// safetensors: the tensor file format of Hugging Face checkpoints, read through mmap and written in one
// streaming pass. herd's own code rather than a library: the format is an 8-byte little-endian header
// length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
// and the raw little-endian data, so a reader is a header parse plus bounds checks, and owning it lets
// every malformed file be a one-line error naming the file and the tensor (a library would throw).
//
// Reading maps the file and converts only the elements asked for (a rank of a sharded model touches
// the pages of its own rows). open() refuses what would let a read go wrong later: a header longer
// than the file, a tensor whose byte range is outside the data, does not match its shape and dtype, or
// overlaps another tensor, a dtype other than F32, F16, BF16 and F64.
//
// Writing takes the list of tensors up front (the header needs every shape) and asks a callback for
// each tensor's values in order, so a converter never holds more than one tensor; values are rounded
// to the file's dtype (round to nearest even for bf16 and fp16).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/bf16.h"
#include "herd/core/dtype.h"
#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd {

// "F32" <-> kF32, "F16" <-> kF16, "BF16" <-> kBF16, "F64" <-> kF64.
const char* safetensors_dtype_name(DType t);
Result<DType> parse_safetensors_dtype(const std::string& s);

// fp32 <-> fp16 bit patterns (round to nearest even; NaN stays NaN, overflow is infinity). The bf16
// pair, bf16_to_float and float_to_bf16, is core/bf16.h's: the runtime's bf16 path rounds with it too.
float fp16_to_float(std::uint16_t h);
std::uint16_t float_to_fp16(float f);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte range inside the data section
  std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and checks the file; errors name the file (and the tensor) and say what is wrong.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  const Json& metadata() const { return metadata_; }

  // Elements [first, first + count) of e (row-major), converted to T. The range must be inside e.
  template <typename T>
  void read(const SafetensorsEntry& e, std::int64_t first, std::int64_t count, T* out) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;  // the data section
  std::vector<SafetensorsEntry> entries_;
  Json metadata_;
};

struct SafetensorsOut {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::int64_t numel() const;
};

// Writes `tensors` to path (created or truncated) in the given order. fill(i, values) must resize
// `values` to tensors[i].numel() and fill it; its error stops the write. metadata: string values only.
using SafetensorsFill = std::function<Status(std::size_t, std::vector<double>&)>;
Status write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                         const SafetensorsFill& fill, const Json& metadata = Json::object());

}  // namespace herd

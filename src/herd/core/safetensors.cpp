// safetensors reading (mmap, checked header) and streaming writing (safetensors.h).
#include "herd/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "herd/core/file_write.h"
#include "herd/core/json_text.h"

namespace herd {

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    default: return "?";
  }
}

Result<DType> parse_safetensors_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F64") return DType::kF64;
  return make_error("dtype \"", s,
                    "\" is not supported (F32, F16, BF16 or F64); convert the checkpoint to one of them");
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf or NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal: value = man x 2^-24, exact in fp32.
    const float v = static_cast<float>(man) * 0x1.0p-24f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t float_to_fp16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, rounded to nearest even in units of 2^-24.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 0x1.0p24f;  // exact
    float r = std::nearbyint(scaled);    // the default rounding mode is to nearest, ties to even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r));
  }
  // Normal: rebias the exponent, round the 23-bit mantissa to 10 bits (a carry into the exponent is right).
  std::uint32_t h = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3ffu);
  const std::uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::int64_t SafetensorsOut::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

namespace {

std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The header's entry for one tensor, checked against the data section of data_bytes bytes.
Result<SafetensorsEntry> parse_entry(const std::string& name, const Json& j, std::uint64_t data_bytes) {
  if (!j.is_object()) return make_error("tensor '", name, "': expected an object, got ", json_preview(j));
  SafetensorsEntry e;
  e.name = name;
  HERD_ASSIGN_OR_RETURN(const std::string dt, json_string(j, "tensor '" + name + "'", "dtype"));
  Result<DType> d = parse_safetensors_dtype(dt);
  if (!d.ok()) return d.error().with_context("tensor '" + name + "'");
  e.dtype = *d;
  if (!j.contains("shape") || !j["shape"].is_array()) return make_error("tensor '", name, "': shape must be an array");
  std::int64_t numel = 1;
  for (const Json& s : j["shape"]) {
    if (!s.is_number_integer() || s.get<std::int64_t>() < 0 || s.get<std::int64_t>() > (std::int64_t{1} << 40)) {
      return make_error("tensor '", name, "': shape entry ", json_preview(s), " is not a size");
    }
    e.shape.push_back(s.get<std::int64_t>());
    if (numel > 0 && e.shape.back() > (std::int64_t{1} << 50) / numel) {
      return make_error("tensor '", name, "': shape is too large");
    }
    numel *= e.shape.back();
  }
  if (!j.contains("data_offsets") || !j["data_offsets"].is_array() || j["data_offsets"].size() != 2 ||
      !j["data_offsets"][0].is_number_unsigned() || !j["data_offsets"][1].is_number_unsigned()) {
    return make_error("tensor '", name, "': data_offsets must be two non-negative integers [begin, end]");
  }
  e.begin = j["data_offsets"][0].get<std::uint64_t>();
  e.end = j["data_offsets"][1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_bytes) {
    return make_error("tensor '", name, "': bytes [", e.begin, ", ", e.end, ") are outside the data section of ",
                      data_bytes, " bytes; the file is truncated or corrupt, download it again");
  }
  const std::uint64_t want = static_cast<std::uint64_t>(numel) * dtype_bytes(e.dtype);
  if (e.end - e.begin != want) {
    return make_error("tensor '", name, "': holds ", e.end - e.begin, " bytes but its shape and dtype ",
                      safetensors_dtype_name(e.dtype), " need ", want, "; the file is corrupt");
  }
  return e;
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return make_error(path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(path, ": cannot stat (", std::strerror(err), ")");
  }
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (size < 8) {
    ::close(fd);
    return make_error(path, ": ", size, " bytes, shorter than the 8-byte header length; the file is truncated");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) return make_error(path, ": mmap failed (", std::strerror(err), ")");
  f->map_ = static_cast<const unsigned char*>(m);
  f->map_bytes_ = size;
  const std::uint64_t header = read_le64(f->map_);
  if (header > size - 8) {
    return make_error(path, ": the header length (", header, " bytes) exceeds the file (", size,
                      " bytes); the file is truncated or not a safetensors file");
  }
  const std::string text(reinterpret_cast<const char*>(f->map_ + 8), static_cast<std::size_t>(header));
  Result<Json> j = parse_json_text(text, path + " (safetensors header)");
  if (!j.ok()) return j.error();
  if (!j->is_object()) return make_error(path, ": the header is not a JSON object; not a safetensors file");
  f->data_ = f->map_ + 8 + header;
  const std::uint64_t data_bytes = size - 8 - header;
  for (auto it = j->begin(); it != j->end(); ++it) {
    if (it.key() == "__metadata__") {
      f->metadata_ = it.value();
      continue;
    }
    Result<SafetensorsEntry> e = parse_entry(it.key(), it.value(), data_bytes);
    if (!e.ok()) return e.error().with_context(path);
    f->entries_.push_back(std::move(*e));
  }
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : f->entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& a = *by_offset[i - 1];
    const SafetensorsEntry& b = *by_offset[i];
    if (b.begin < a.end) {
      return make_error(path, ": tensors '", a.name, "' [", a.begin, ", ", a.end, ") and '", b.name, "' [", b.begin,
                        ", ", b.end, ") overlap; the file is corrupt, download or write it again");
    }
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

template <typename T>
void SafetensorsFile::read(const SafetensorsEntry& e, std::int64_t first, std::int64_t count, T* out) const {
  HERD_CHECK(first >= 0 && count >= 0 && first + count <= e.numel(), "safetensors read [", first, ", ", first + count,
             ") outside ", e.name);
  const unsigned char* p = data_ + e.begin + static_cast<std::uint64_t>(first) * dtype_bytes(e.dtype);
  for (std::int64_t i = 0; i < count; ++i) {
    switch (e.dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<T>(v);
        break;
      }
      case DType::kF64: {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<T>(v);
        break;
      }
      case DType::kBF16:
      case DType::kF16: {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = static_cast<T>(e.dtype == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h));
        break;
      }
      default: HERD_CHECK(false, "unreachable dtype");
    }
  }
}

template void SafetensorsFile::read<float>(const SafetensorsEntry&, std::int64_t, std::int64_t, float*) const;
template void SafetensorsFile::read<double>(const SafetensorsEntry&, std::int64_t, std::int64_t, double*) const;

Status write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                         const SafetensorsFill& fill, const Json& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    HERD_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kF64 || t.dtype == DType::kBF16 || t.dtype == DType::kF16,
               "safetensors: dtype ", dtype_name(t.dtype), " of ", t.name);
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * dtype_bytes(t.dtype);
    header[t.name] = {
        {"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = json_text(header);
  while ((text.size() % 8) != 0) text.push_back(' ');  // the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(path, ": cannot create (", std::strerror(errno), "); check the directory");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<double> values;
  std::vector<unsigned char> buf;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsOut& t = tensors[i];
    HERD_RETURN_IF_ERROR(fill(i, values));
    HERD_CHECK(static_cast<std::int64_t>(values.size()) == t.numel(), "safetensors fill of ", t.name, " gave ",
               values.size(), " values, expected ", t.numel());
    const std::size_t eb = dtype_bytes(t.dtype);
    buf.resize(values.size() * eb);
    for (std::size_t k = 0; k < values.size(); ++k) {
      unsigned char* p = buf.data() + k * eb;
      if (t.dtype == DType::kF64) {
        std::memcpy(p, &values[k], 8);
      } else if (t.dtype == DType::kF32) {
        const float v = static_cast<float>(values[k]);
        std::memcpy(p, &v, 4);
      } else {
        const float v = static_cast<float>(values[k]);
        const std::uint16_t h = t.dtype == DType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
        std::memcpy(p, &h, 2);
      }
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  if (Status s = close_written(out, path); !s.ok()) return make_error(s.error().message(), "; check free disk space");
  return Status::Ok();
}

}  // namespace herd

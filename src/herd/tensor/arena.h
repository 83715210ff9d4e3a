// Arena: a bump allocator over one aligned block, so a training step allocates nothing.
//
// The runtime sizes an arena once (from model/ math) and carves every activation, gradient and
// scratch buffer of a step out of it. `mark()` / `reset(mark)` free everything allocated after a mark
// in LIFO order (a layer's scratch after its backward, a whole step at its end). The arena records the
// high-water mark overall and per tag (the name a caller gives an allocation, e.g. "layer3.attn.q"),
// so the memory test can compare the measured peak with the planner's prediction. Every allocation
// is rounded up to 64 bytes (one cache line, one AVX-512 vector); the rounding is part of `used()`.
// Not thread-safe: one arena per rank thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "herd/core/aligned.h"

namespace herd::tensor {

class Arena {
 public:
  struct Mark {
    std::size_t offset = 0;
    std::size_t records = 0;
  };
  struct TagStats {
    std::size_t current = 0;  // bytes held now under this tag
    std::size_t peak = 0;     // most bytes ever held at once under this tag
  };

  explicit Arena(std::size_t capacity_bytes);
  // Over `block` (capacity_bytes, 64-byte aligned), owned by the caller and outliving the arena: memory
  // of any device (kernels/ops.h's Buffer), since the arena only hands out offsets into it and never
  // reads or writes it.
  Arena(void* block, std::size_t capacity_bytes);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Raw bytes, 64-byte aligned, uninitialised. Exceeding the capacity is a sizing bug (HERD_CHECK with
  // the tag, the request and the capacity).
  void* allocate(std::size_t bytes, const std::string& tag = "");
  template <typename T>
  T* allocate_array(std::int64_t count, const std::string& tag = "") {
    return static_cast<T*>(allocate(static_cast<std::size_t>(count) * sizeof(T), tag));
  }

  Mark mark() const { return Mark{used_, records_.size()}; }
  void reset(const Mark& m);  // frees everything allocated after m
  void reset() { reset(Mark{}); }

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  std::size_t peak() const { return peak_; }
  void reset_peak();  // peak := used, for every tag too (e.g. after warm-up)
  const std::map<std::string, TagStats>& tags() const { return tags_; }
  std::size_t tag_peak(const std::string& tag) const;

  static constexpr std::size_t round_up(std::size_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

 private:
  struct Record {
    std::size_t bytes;
    TagStats* tag;
  };
  AlignedPtr<char> owned_;  // the block when the arena allocated it
  char* block_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
  std::vector<Record> records_;
  std::map<std::string, TagStats> tags_;  // node-based: TagStats pointers stay valid
};

}  // namespace herd::tensor

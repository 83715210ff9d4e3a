// Arena bookkeeping: bump pointer, LIFO reset and per-tag high-water marks.
#include "herd/tensor/arena.h"

#include <algorithm>
#include <cstring>

#include "herd/core/check.h"

namespace herd::tensor {

Arena::Arena(std::size_t capacity_bytes)
    : owned_(aligned_array<char>(round_up(capacity_bytes))), block_(owned_.get()), capacity_(round_up(capacity_bytes)) {
  records_.reserve(4096);
}

Arena::Arena(void* block, std::size_t capacity_bytes) : block_(static_cast<char*>(block)), capacity_(capacity_bytes) {
  HERD_CHECK(block != nullptr || capacity_bytes == 0, "an arena over no memory");
  HERD_CHECK(reinterpret_cast<std::uintptr_t>(block) % kAlignment == 0, "an arena's block must be ", kAlignment,
             "-byte aligned");
  records_.reserve(4096);
}

void* Arena::allocate(std::size_t bytes, const std::string& tag) {
  const std::size_t rounded = round_up(bytes);
  HERD_CHECK(used_ + rounded <= capacity_, "arena full: '", tag, "' asks ", bytes, " bytes with ", used_, " of ",
             capacity_, " in use");
  void* p = block_ + used_;
  used_ += rounded;
  peak_ = std::max(peak_, used_);
  TagStats& s = tags_[tag];
  s.current += rounded;
  s.peak = std::max(s.peak, s.current);
  records_.push_back(Record{rounded, &s});
  return p;
}

void Arena::reset(const Mark& m) {
  HERD_CHECK(m.offset <= used_ && m.records <= records_.size(), "reset to a mark that was already freed");
  while (records_.size() > m.records) {
    records_.back().tag->current -= records_.back().bytes;
    records_.pop_back();
  }
  used_ = m.offset;
}

void Arena::reset_peak() {
  peak_ = used_;
  for (auto& [name, s] : tags_) s.peak = s.current;
}

std::size_t Arena::tag_peak(const std::string& tag) const {
  auto it = tags_.find(tag);
  return it == tags_.end() ? 0 : it->second.peak;
}

}  // namespace herd::tensor

// The view of one micro-batch that the layers read: (B, T) int32 arrays from the packing loader.
//
// Positions restart at every document and doc ids number the documents of a row, so attention sees
// key j from query i iff doc[j] == doc[i] and pos[j] <= pos[i] (the Llama 3 document mask). A target of
// -1 (kernels::kIgnoreIndex) is not a real token and does not count in the loss.
#pragma once

#include <cstdint>

namespace herd::nn {

struct MicroBatch {
  std::int64_t batch = 0;                   // B
  std::int64_t seq_len = 0;                 // T
  const std::int32_t* tokens = nullptr;     // (B, T)
  const std::int32_t* targets = nullptr;    // (B, T); -1 ignored
  const std::int32_t* positions = nullptr;  // (B, T)
  const std::int32_t* doc_ids = nullptr;    // (B, T)

  std::int64_t rows() const { return batch * seq_len; }  // N = B x T
};

}  // namespace herd::nn

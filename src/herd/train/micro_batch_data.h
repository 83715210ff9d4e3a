// A loader batch with the int32 document ids the attention kernel takes.
//
// The kernel compares document ids for equality only, so each row's ids are rebased to its first
// document (padding keeps -1); the loader's int64 ids (epoch x documents + index) would not fit int32.
// Shared by the single-rank and the distributed trainer.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/data/loader.h"
#include "herd/nn/batch.h"

namespace herd::train {

struct MicroBatchData {
  data::Batch batch;
  std::vector<std::int32_t> doc32;

  explicit MicroBatchData(data::Batch b) : batch(std::move(b)) {
    doc32.resize(batch.doc_ids.size());
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      std::int64_t base = -1;
      for (std::int64_t t = 0; t < batch.seq_len; ++t) {
        const auto i = static_cast<std::size_t>(r * batch.seq_len + t);
        const std::int64_t d = batch.doc_ids[i];
        if (d >= 0 && base < 0) base = d;
        doc32[i] = d < 0 ? -1 : static_cast<std::int32_t>(d - base);
      }
    }
  }
  nn::MicroBatch view() const {
    return {batch.rows, batch.seq_len, batch.tokens.data(), batch.targets.data(), batch.positions.data(), doc32.data()};
  }
};

}  // namespace herd::train

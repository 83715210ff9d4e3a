// A loader batch with the int32 document ids the attention kernel takes.
//
// The kernel compares document ids for equality only, so the loader's int64 ids (epoch x documents +
// index) are taken modulo 2^31 (padding keeps -1): two documents of one row never differ by a multiple
// of 2^31. The map depends on the id alone, not on the row's contents, so the CP ranks of a sequence
// (which hold different chunks of its row, data::slice_batch) agree on every token's id; rebasing to
// the slice's first document would not.
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
    for (std::size_t i = 0; i < doc32.size(); ++i) {
      const std::int64_t d = batch.doc_ids[i];
      doc32[i] = d < 0 ? -1 : static_cast<std::int32_t>(d % (std::int64_t{1} << 31));
    }
  }
  nn::MicroBatch view() const {
    return {batch.rows, batch.seq_len, batch.tokens.data(), batch.targets.data(), batch.positions.data(), doc32.data()};
  }
};

}  // namespace herd::train

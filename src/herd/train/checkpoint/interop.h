// Starting from other weights and converting into herd's format (docs/interop.md).
//
// load_initial_weights is `herd train --init.from DIR`: after the rank's model initialised itself, its
// checkpoint pieces are overwritten from DIR, a Hugging Face directory (hf_checkpoint.h: each rank reads
// the byte ranges of its own shards) or a herd checkpoint of any layout (checkpoint.h), weights only:
// the AdamW moments are zero and the optimizer's step count stays 0, as for a fresh run. The source's
// model must be the run's (same sizes, RoPE and norm settings): a mismatch is one line naming both.
//
// convert_from_hf is `herd convert --from-hf HF_DIR --out DIR --tp T --cp C --pp P --dp D`: the ranks
// of that layout run as threads of this process, each builds the model of its coordinate (the
// trainer's parallel::RankModel) and fills its pieces from the mapped Hugging Face files, and they
// save one checkpoint of step 0 collectively, exactly as a training run of that layout would (AdamW
// moments zero). No rank holds more than its shard. The directory is checked whole before any rank
// starts, and the output is written as DIR.tmp-convert and renamed at the end: a failure leaves nothing.
#pragma once

#include <cstdint>
#include <string>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/parallel/rank_model.h"

namespace herd::train {

template <typename T>
Status load_initial_weights(const std::string& dir, const model::LlamaConfig& model_cfg, parallel::RankModel<T>& model);

// The model settings two configurations must share for weights to move between them; empty when they do,
// else "field: a vs b".
std::string model_mismatch(const model::LlamaConfig& a, const model::LlamaConfig& b);

struct ConvertLayout {
  std::int64_t tp = 1, cp = 1, pp = 1, dp = 1;
};
Status convert_from_hf(const std::string& hf_dir, const std::string& out_dir, const ConvertLayout& layout);

}  // namespace herd::train

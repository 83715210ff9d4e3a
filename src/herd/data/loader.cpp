// Sequence packing, per-epoch shuffling, resumable state and (dp, cp) slicing (contract in the header).
#include "herd/data/loader.h"

#include <numeric>

#include "herd/data/shuffle.h"
#include "herd/model/shard.h"

namespace herd::data {

namespace {
constexpr std::uint64_t kEpochStream = 2;  // derive_seed stream of the epoch orders (1: held-out split)
}

std::int64_t Batch::n_targets() const {
  std::int64_t n = 0;
  for (const std::int32_t t : targets) n += t >= 0;
  return n;
}

Json LoaderState::to_json() const {
  return Json{{"seed", seed},     {"epoch", epoch},     {"cursor", cursor},
              {"offset", offset}, {"batches", batches}, {"finished", finished}};
}

Result<LoaderState> LoaderState::from_json(const Json& j) {
  LoaderState s;
  if (!j.is_object()) return make_error("loader state: expected a JSON object, got ", json_preview(j));
  if (!j.contains("seed") || !j["seed"].is_number_unsigned()) {
    return make_error("loader state.seed: expected a non-negative integer");
  }
  s.seed = j["seed"].get<std::uint64_t>();
  HERD_ASSIGN_OR_RETURN(s.epoch, json_int(j, "loader state", "epoch"));
  HERD_ASSIGN_OR_RETURN(s.cursor, json_int(j, "loader state", "cursor"));
  HERD_ASSIGN_OR_RETURN(s.offset, json_int(j, "loader state", "offset"));
  HERD_ASSIGN_OR_RETURN(s.batches, json_int(j, "loader state", "batches"));
  HERD_ASSIGN_OR_RETURN(s.finished, json_bool_or(j, "loader state", "finished", false));
  return s;
}

Result<Loader> Loader::make(std::shared_ptr<const TokenDocuments> docs, const LoaderConfig& config) {
  HERD_CHECK(docs != nullptr);
  if (config.seq_len <= 0) return make_error("seq_len: must be positive, got ", config.seq_len);
  if (config.batch_size <= 0) return make_error("batch_size: must be positive, got ", config.batch_size);
  if (config.max_seq_len > 0 && config.seq_len > config.max_seq_len) {
    return make_error("seq_len (", config.seq_len, ") exceeds the model's max_seq_len (", config.max_seq_len,
                      "); lower seq_len or use a model with a longer context");
  }
  if (config.vocab_size > 0 && docs->vocab_size > config.vocab_size) {
    return make_error("the shards' vocab size (", docs->vocab_size, ") exceeds the model's vocab (", config.vocab_size,
                      "); tokenize the corpus with the model's tokenizer");
  }
  if (docs->n_tokens() == 0) return make_error("the dataset has no tokens; check the herd data output");
  Loader l;
  l.docs_ = std::move(docs);
  l.config_ = config;
  l.state_.seed = config.seed;
  return l;
}

std::int64_t Loader::doc_at(std::int64_t epoch, std::int64_t cursor) {
  if (order_epoch_ != epoch) {
    if (config_.shuffle) {
      order_ = permutation(docs_->n_docs(), derive_seed(config_.seed, kEpochStream, static_cast<std::uint64_t>(epoch)));
    } else {
      order_.resize(static_cast<std::size_t>(docs_->n_docs()));
      std::iota(order_.begin(), order_.end(), 0);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<std::size_t>(cursor)];
}

Batch Batch::padding(std::int64_t rows, std::int64_t seq_len, std::int32_t pad_id) {
  Batch b;
  b.rows = rows;
  b.seq_len = seq_len;
  const auto n = static_cast<std::size_t>(rows * seq_len);
  b.tokens.assign(n, pad_id);
  b.targets.assign(n, -1);
  b.positions.assign(n, 0);
  b.doc_ids.assign(n, -1);
  b.seq_index.resize(n);
  for (std::size_t i = 0; i < n; ++i) b.seq_index[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(seq_len));
  return b;
}

std::optional<Batch> Loader::next() {
  if (state_.finished) return std::nullopt;
  const std::int64_t B = config_.batch_size, T = config_.seq_len, n_docs = docs_->n_docs();
  Batch b = Batch::padding(B, T, config_.pad_id);
  LoaderState& s = state_;
  for (std::int64_t r = 0; r < B; ++r) {
    std::int64_t segment_start = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      const auto i = static_cast<std::size_t>(r * T + t);
      if (!config_.loop && s.epoch > 0) continue;  // one pass done: padding
      std::int64_t d = doc_at(s.epoch, s.cursor);
      while (docs_->doc_size(d) == 0) {  // empty documents hold no tokens; skip them
        if (++s.cursor == n_docs) s.cursor = 0, ++s.epoch;
        d = doc_at(s.epoch, s.cursor);
      }
      const std::span<const std::int32_t> doc = docs_->doc(d);
      if (s.offset == 0) segment_start = t;
      b.tokens[i] = doc[static_cast<std::size_t>(s.offset)];
      if (s.offset + 1 < static_cast<std::int64_t>(doc.size()))
        b.targets[i] = doc[static_cast<std::size_t>(s.offset + 1)];
      b.positions[i] = static_cast<std::int32_t>(t - segment_start);
      b.doc_ids[i] = s.epoch * n_docs + d;
      if (++s.offset == static_cast<std::int64_t>(doc.size())) {
        s.offset = 0;
        if (++s.cursor == n_docs) s.cursor = 0, ++s.epoch;
      }
    }
  }
  ++s.batches;
  if (!config_.loop && s.epoch > 0) s.finished = true;
  return b;
}

Status Loader::restore(const LoaderState& st) {
  if (st.seed != config_.seed) {
    return make_error("loader state: seed ", st.seed, " differs from the configured seed ", config_.seed,
                      "; resume with the seed of the saved run");
  }
  if (st.epoch < 0 || st.cursor < 0 || st.cursor >= docs_->n_docs() || st.batches < 0) {
    return make_error("loader state: cursor ", st.cursor, " (epoch ", st.epoch, ") is outside this dataset of ",
                      docs_->n_docs(), " documents; it belongs to another dataset");
  }
  const std::int64_t size = docs_->doc_size(doc_at(st.epoch, st.cursor));
  if (st.offset < 0 || (st.offset >= size && !(st.offset == 0 && size == 0))) {
    return make_error("loader state: offset ", st.offset, " is outside document ", st.cursor, " of ", size,
                      " tokens; it belongs to another dataset");
  }
  state_ = st;
  return {};
}

Result<Batch> slice_batch(const Batch& g, std::int64_t dp, std::int64_t dp_rank, std::int64_t cp,
                          std::int64_t cp_rank) {
  if (dp < 1 || dp_rank < 0 || dp_rank >= dp) return make_error("dp rank ", dp_rank, " is outside dp (", dp, ")");
  HERD_ASSIGN_OR_RETURN(const model::CpSplit split, model::make_cp_split(g.seq_len, cp, cp_rank));
  HERD_RETURN_IF_ERROR(model::check_dp_divides_batch(g.rows, dp));
  const std::int64_t rows = g.rows / dp, chunk = split.chunk();
  Batch s;
  s.rows = rows;
  s.seq_len = split.local_len();
  const auto n = static_cast<std::size_t>(rows * s.seq_len);
  s.tokens.reserve(n);
  s.targets.reserve(n);
  s.positions.reserve(n);
  s.doc_ids.reserve(n);
  s.seq_index.reserve(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t row = dp_rank * rows + r;
    for (const std::int64_t c : {split.chunk_of(0), split.chunk_of(1)}) {
      const auto begin = static_cast<std::ptrdiff_t>(row * g.seq_len + c * chunk);
      const auto end = begin + static_cast<std::ptrdiff_t>(chunk);
      s.tokens.insert(s.tokens.end(), g.tokens.begin() + begin, g.tokens.begin() + end);
      s.targets.insert(s.targets.end(), g.targets.begin() + begin, g.targets.begin() + end);
      s.positions.insert(s.positions.end(), g.positions.begin() + begin, g.positions.begin() + end);
      s.doc_ids.insert(s.doc_ids.end(), g.doc_ids.begin() + begin, g.doc_ids.begin() + end);
      s.seq_index.insert(s.seq_index.end(), g.seq_index.begin() + begin, g.seq_index.begin() + end);
    }
  }
  return s;
}

Result<Batch> slice_batch(const Batch& global, const topology::ParallelDims& dims, std::int64_t rank) {
  if (rank < 0 || rank >= dims.world()) {
    return make_error("rank ", rank, " is outside the mesh ", dims.to_string());
  }
  const topology::Coord c = dims.coord(rank);
  return slice_batch(global, dims.dp(), c.dp, dims.cp(), c.cp);
}

}  // namespace herd::data

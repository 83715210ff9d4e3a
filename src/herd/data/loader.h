// The loader: packs documents into fixed-length sequences and serves global batches.
//
// The token stream is epoch 0's documents, then epoch 1's, and so on; each epoch visits every document
// once, in an order shuffled from (seed, epoch) (or file order when shuffle is off). The stream is cut
// into sequences of seq_len tokens, so a document may continue into the next sequence. For every token:
//   - doc_id: the document instance, epoch x n_docs + document index (so that the same document in two
//     consecutive epochs is two documents); a continuation keeps its id.
//   - position: the distance from the start of the document's segment in this sequence: 0 at a
//     document start and at the start of a continuation, so positions stay below seq_len (RoPE).
//   - target: the next token of the same document, or -1 (ignored) when there is none. Documents are
//     stored as BOS text EOS, so the last text token predicts EOS and EOS itself predicts nothing:
//     no target crosses a document boundary, matching Llama 3's document mask (a token attends only to
//     earlier tokens with the same doc_id).
// A global batch is batch_size sequences, identical whatever the parallel layout; slice_batch() cuts
// it for one (dp, cp) rank as a pure function. The loader's position is a small state (epoch, cursor,
// offset) that serialises to JSON; restoring it reproduces exactly the batches that would have followed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/data/shard.h"
#include "herd/topology/parallel_dims.h"

namespace herd::data {

struct LoaderConfig {
  std::int64_t seq_len = 0;      // T, tokens per sequence
  std::int64_t batch_size = 0;   // B, sequences per global batch
  std::uint64_t seed = 0;        // document order of every epoch
  bool shuffle = true;           // false: file order (evaluation)
  bool loop = true;              // false: one pass, the last batch padded, then no more batches
  std::int32_t pad_id = 0;       // token of padding positions (one pass only); their target is -1
  std::int64_t max_seq_len = 0;  // the model's limit on seq_len; 0: unchecked
  std::int64_t vocab_size = 0;   // the model's vocabulary; 0: unchecked
};

// Row-major (rows, seq_len) arrays. For a global batch rows = B and seq_index is 0..T-1 in every row;
// a (dp, cp) slice keeps the global seq_index of each token (the causal mask needs it across chunks).
struct Batch {
  std::int64_t rows = 0;
  std::int64_t seq_len = 0;
  std::vector<std::int32_t> tokens;     // (rows, seq_len)
  std::vector<std::int32_t> targets;    // (rows, seq_len), -1 = no loss
  std::vector<std::int32_t> positions;  // (rows, seq_len)
  std::vector<std::int64_t> doc_ids;    // (rows, seq_len), -1 = padding
  std::vector<std::int32_t> seq_index;  // (rows, seq_len)

  std::int64_t n_targets() const;  // tokens that carry a loss
  bool operator==(const Batch&) const = default;

  // (rows, seq_len) of padding: pad_id tokens carrying no loss, in no document. The loader fills such a
  // batch; a one-pass loader's last batch keeps what it could not fill.
  static Batch padding(std::int64_t rows, std::int64_t seq_len, std::int32_t pad_id = 0);
};

struct LoaderState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t cursor = 0;   // index into this epoch's document order
  std::int64_t offset = 0;   // tokens of that document already served
  std::int64_t batches = 0;  // global batches served so far
  bool finished = false;     // one-pass mode: the stream is exhausted

  Json to_json() const;
  static Result<LoaderState> from_json(const Json& j);
  bool operator==(const LoaderState&) const = default;
};

class Loader {
 public:
  // Errors: seq_len or batch_size not positive, seq_len above the model's max_seq_len, shards whose
  // vocabulary is larger than the model's, an empty dataset.
  static Result<Loader> make(std::shared_ptr<const TokenDocuments> docs, const LoaderConfig& config);

  // The next global batch, or nullopt once a one-pass loader is exhausted.
  std::optional<Batch> next();
  const LoaderState& state() const { return state_; }
  // Continues from a saved state; error when it belongs to another seed or dataset.
  Status restore(const LoaderState& state);

  const LoaderConfig& config() const { return config_; }
  const TokenDocuments& documents() const { return *docs_; }

 private:
  Loader() = default;
  std::int64_t doc_at(std::int64_t epoch, std::int64_t cursor);  // document index of a cursor

  std::shared_ptr<const TokenDocuments> docs_;
  LoaderConfig config_;
  LoaderState state_;
  std::int64_t order_epoch_ = -1;
  std::vector<std::int64_t> order_;  // this epoch's document order
};

// The part of a global batch that one rank computes: rows [dp_rank x B/dp, (dp_rank+1) x B/dp), and of
// each row the chunks cp_rank and 2 x cp - 1 - cp_rank of 2 x cp equal chunks (load-balanced causal
// context parallelism, Llama 3 section 3.3.2), concatenated in that order: model::CpSplit, the split
// CP attention uses. Errors: B not divisible by dp, T not divisible by 2 x cp (model::check_cp_divides_seq's
// wording), a rank outside its degree.
Result<Batch> slice_batch(const Batch& global, std::int64_t dp, std::int64_t dp_rank, std::int64_t cp,
                          std::int64_t cp_rank);
// The same, for a global rank of a mesh (TP and PP ranks of one (dp, cp) get the same slice).
Result<Batch> slice_batch(const Batch& global, const topology::ParallelDims& dims, std::int64_t rank);

}  // namespace herd::data

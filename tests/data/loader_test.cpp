// The loader against a naive reference stream (documents concatenated epoch by epoch), packing
// invariants, determinism, exact resume, the one-pass evaluation mode and (dp, cp) slicing.
#include "herd/data/loader.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "herd/data/shuffle.h"

namespace herd::data {
namespace {

// Documents of lengths 1..n_docs-ish with distinct token values, so every token names its document.
std::shared_ptr<TokenDocuments> make_docs(std::int64_t n_docs) {
  auto d = std::make_shared<TokenDocuments>();
  d->vocab_size = 100000;
  for (std::int64_t i = 0; i < n_docs; ++i) {
    std::vector<std::int32_t> ids;
    for (std::int64_t k = 0; k < 1 + (i * 7) % 23; ++k) ids.push_back(static_cast<std::int32_t>(i * 100 + k));
    d->add_doc(ids);
  }
  return d;
}

Loader make_loader(std::shared_ptr<TokenDocuments> docs, std::int64_t T, std::int64_t B, std::uint64_t seed,
                   bool shuffle = true, bool loop = true) {
  LoaderConfig c;
  c.seq_len = T;
  c.batch_size = B;
  c.seed = seed;
  c.shuffle = shuffle;
  c.loop = loop;
  auto l = Loader::make(std::move(docs), c);
  HERD_CHECK(l.ok(), l.error().message());
  return std::move(l).value();
}

TEST(Loader, PacksTheReferenceStreamWithCorrectTargetsPositionsAndDocIds) {
  auto docs = make_docs(17);
  const std::int64_t T = 16, B = 3, n_batches = 12;
  Loader loader = make_loader(docs, T, B, 5);
  // Reference: whole epochs laid end to end, in the order the loader's contract defines.
  std::vector<std::int32_t> stream;
  std::vector<std::int64_t> doc_of;
  for (std::int64_t e = 0; static_cast<std::int64_t>(stream.size()) < n_batches * B * T + 1; ++e) {
    const auto order = permutation(docs->n_docs(), derive_seed(5, 2, static_cast<std::uint64_t>(e)));
    for (const std::int64_t d : order) {
      for (const std::int32_t t : docs->doc(d)) stream.push_back(t), doc_of.push_back(e * docs->n_docs() + d);
    }
  }
  std::size_t p = 0;
  for (std::int64_t k = 0; k < n_batches; ++k) {
    const auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    for (std::int64_t r = 0; r < B; ++r) {
      for (std::int64_t t = 0; t < T; ++t, ++p) {
        const auto i = static_cast<std::size_t>(r * T + t);
        ASSERT_EQ(b->tokens[i], stream[p]) << "stream position " << p;
        ASSERT_EQ(b->doc_ids[i], doc_of[p]);
        ASSERT_EQ(b->targets[i], doc_of[p + 1] == doc_of[p] ? stream[p + 1] : -1);
        const bool segment_start = t == 0 || doc_of[p - 1] != doc_of[p];
        ASSERT_EQ(b->positions[i], segment_start ? 0 : b->positions[i - 1] + 1);
        ASSERT_EQ(b->seq_index[i], t);
      }
    }
  }
  EXPECT_EQ(loader.state().batches, n_batches);
}

TEST(Loader, EveryEpochVisitsEveryDocumentOnceInADifferentOrder) {
  auto docs = make_docs(11);
  Loader loader = make_loader(docs, 8, 2, 9);
  std::map<std::int64_t, std::int64_t> tokens_of;  // doc instance -> tokens seen
  std::vector<std::int64_t> first_seen;
  while (loader.state().epoch < 2) {
    const auto b = loader.next();
    for (const std::int64_t id : b->doc_ids) {
      if (tokens_of[id]++ == 0) first_seen.push_back(id);
    }
  }
  for (std::int64_t id = 0; id < 2 * docs->n_docs(); ++id) {
    EXPECT_EQ(tokens_of[id], docs->doc_size(id % docs->n_docs())) << id;
  }
  std::vector<std::int64_t> e0(first_seen.begin(), first_seen.begin() + 11),
      e1(first_seen.begin() + 11, first_seen.begin() + 22);
  for (auto& x : e1) x -= 11;
  EXPECT_NE(e0, e1);
}

TEST(Loader, IsDeterministicFromTheSeedAndResumesExactly) {
  auto docs = make_docs(29);
  Loader a = make_loader(docs, 32, 4, 123), b = make_loader(docs, 32, 4, 123), c = make_loader(docs, 32, 4, 124);
  std::vector<Batch> seq_a;
  for (int k = 0; k < 7; ++k) seq_a.push_back(*a.next());
  for (int k = 0; k < 7; ++k) EXPECT_EQ(*b.next(), seq_a[k]);
  EXPECT_NE(*c.next(), seq_a[0]);
  // Save after 7 batches (mid-document, mid-epoch), round-trip through JSON, restore in a new loader.
  const Json saved = Json::parse(a.state().to_json().dump());
  auto state = LoaderState::from_json(saved);
  ASSERT_TRUE(state.ok()) << state.error().message();
  EXPECT_EQ(*state, a.state());
  Loader resumed = make_loader(docs, 32, 4, 123);
  ASSERT_TRUE(resumed.restore(*state).ok());
  for (int k = 0; k < 9; ++k) EXPECT_EQ(*resumed.next(), *a.next()) << "batch " << 7 + k;
  EXPECT_EQ(resumed.state(), a.state());
  // A state from another run is refused with the reason.
  LoaderState wrong = *state;
  wrong.seed = 5;
  EXPECT_EQ(resumed.restore(wrong).error().message(),
            "loader state: seed 5 differs from the configured seed 123; resume with the seed of the saved run");
  wrong = *state;
  wrong.cursor = 1000;
  EXPECT_NE(resumed.restore(wrong).error().message().find("belongs to another dataset"), std::string::npos);
  EXPECT_FALSE(LoaderState::from_json(Json{{"seed", 1}}).ok());
}

TEST(Loader, OnePassServesEveryTokenOnceThenStops) {
  auto docs = make_docs(13);
  Loader loader = make_loader(docs, 10, 3, 0, /*shuffle=*/false, /*loop=*/false);
  std::vector<std::int32_t> seen;
  std::int64_t targets = 0, batches = 0;
  while (auto b = loader.next()) {
    ++batches;
    targets += b->n_targets();
    for (std::size_t i = 0; i < b->tokens.size(); ++i) {
      if (b->doc_ids[i] >= 0)
        seen.push_back(b->tokens[i]);
      else
        EXPECT_EQ(b->targets[i], -1);
    }
  }
  EXPECT_EQ(seen, docs->tokens);                          // file order, each token once
  EXPECT_EQ(targets, docs->n_tokens() - docs->n_docs());  // every token but each document's last
  EXPECT_EQ(batches, (docs->n_tokens() + 29) / 30);
  EXPECT_FALSE(loader.next().has_value());
}

TEST(Loader, RejectsSequencesLongerThanTheModelAllows) {
  LoaderConfig c;
  c.seq_len = 2048;
  c.batch_size = 1;
  c.max_seq_len = 1024;
  auto l = Loader::make(make_docs(3), c);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().message(),
            "seq_len (2048) exceeds the model's max_seq_len (1024); lower seq_len or use a model with a longer "
            "context");
  c.seq_len = 512;
  c.vocab_size = 8192;
  EXPECT_EQ(Loader::make(make_docs(3), c).error().message(),
            "the shards' vocab size (100000) exceeds the model's vocab (8192); tokenize the corpus with the model's "
            "tokenizer");
  c.vocab_size = 0;
  c.batch_size = 0;
  EXPECT_EQ(Loader::make(make_docs(3), c).error().message(), "batch_size: must be positive, got 0");
}

// Reassembles the global batch from every (dp, cp) slice: each token must come back exactly once, in
// place, and CP rank i must hold chunks i and 2cp-1-i.
TEST(SliceBatch, SlicesTileTheGlobalBatchExactlyOnce) {
  Loader loader = make_loader(make_docs(31), 24, 4, 3);
  const Batch g = *loader.next();
  for (const auto& [dp, cp] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 3}, {4, 6}, {4, 2}}) {
    Batch re = g;
    std::fill(re.tokens.begin(), re.tokens.end(), -7);
    std::vector<int> hits(g.tokens.size(), 0);
    const std::int64_t chunk = g.seq_len / (2 * cp);
    for (std::int64_t d = 0; d < dp; ++d) {
      for (std::int64_t c = 0; c < cp; ++c) {
        auto s = slice_batch(g, dp, d, cp, c);
        ASSERT_TRUE(s.ok()) << s.error().message();
        ASSERT_EQ(s->rows, g.rows / dp);
        ASSERT_EQ(s->seq_len, 2 * chunk);
        for (std::int64_t r = 0; r < s->rows; ++r) {
          for (std::int64_t t = 0; t < s->seq_len; ++t) {
            const auto li = static_cast<std::size_t>(r * s->seq_len + t);
            const std::int64_t gt = s->seq_index[li];
            ASSERT_EQ(gt / chunk, t < chunk ? c : 2 * cp - 1 - c);
            const auto gi = static_cast<std::size_t>((d * s->rows + r) * g.seq_len + gt);
            ++hits[gi];
            re.tokens[gi] = s->tokens[li];
            ASSERT_EQ(s->targets[li], g.targets[gi]);
            ASSERT_EQ(s->positions[li], g.positions[gi]);
            ASSERT_EQ(s->doc_ids[li], g.doc_ids[gi]);
          }
        }
      }
    }
    EXPECT_EQ(re.tokens, g.tokens) << "dp " << dp << " cp " << cp;
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
}

TEST(SliceBatch, MeshRanksOfOneDpCpCoordinateShareTheirSlice) {
  Loader loader = make_loader(make_docs(31), 8, 4, 3);
  const Batch g = *loader.next();
  auto dims = topology::ParallelDims::make(/*tp=*/2, /*cp=*/2, /*pp=*/2, /*dp=*/2);
  ASSERT_TRUE(dims.ok());
  for (std::int64_t rank = 0; rank < dims->world(); ++rank) {
    const topology::Coord c = dims->coord(rank);
    auto s = slice_batch(g, *dims, rank);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, *slice_batch(g, 2, c.dp, 2, c.cp));
  }
  EXPECT_FALSE(slice_batch(g, *dims, 16).ok());
}

TEST(SliceBatch, IndivisibleLayoutsAreErrorsNamingTheNumbers) {
  Loader loader = make_loader(make_docs(5), 12, 3, 3);
  const Batch g = *loader.next();
  EXPECT_EQ(slice_batch(g, 2, 0, 1, 0).error().message(),
            "global batch (3 sequences) is not divisible by dp (2): every data-parallel rank needs a whole number of "
            "sequences; use a multiple of 2");
  EXPECT_EQ(slice_batch(g, 1, 0, 4, 0).error().message(),
            "seq_len (12) is not divisible by 2 x cp (8): context parallelism cuts each sequence into 2 x cp chunks; "
            "use a multiple of 8");
  EXPECT_FALSE(slice_batch(g, 1, 1, 1, 0).ok());
}

}  // namespace
}  // namespace herd::data

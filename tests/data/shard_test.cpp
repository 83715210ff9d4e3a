// Token shards: round trip in both widths, the held-out split, and one-line errors for every kind of
// corruption (flipped payload byte, flipped header byte, truncation, foreign file, missing file).
#include "herd/data/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/test_paths.h"
#include "herd/data/shuffle.h"

namespace herd::data {
namespace {

TokenDocuments sample(std::int64_t vocab) {
  TokenDocuments d;
  d.vocab_size = vocab;
  d.add_doc(std::vector<std::int32_t>{1, 2, 3});
  d.add_doc(std::vector<std::int32_t>{});
  d.add_doc(std::vector<std::int32_t>{static_cast<std::int32_t>(vocab - 1), 0});
  return d;
}

void flip_byte(const std::string& path, std::size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(Shard, RoundTripsBothTokenWidths) {
  const auto dir = testing::temp_dir("shard_rt");
  for (const std::int64_t vocab : {8192, 65536, 128256}) {
    const std::string path = (dir / detail::concat("s", vocab, ".bin")).string();
    const TokenDocuments d = sample(vocab);
    ASSERT_TRUE(write_shard(path, d).ok());
    auto back = read_shard(path);
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(back->vocab_size, vocab);
    EXPECT_EQ(back->offsets, d.offsets);
    EXPECT_EQ(back->tokens, d.tokens);
    const std::size_t width = vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + 4 * 8 + 5 * width);
  }
}

TEST(Shard, CorruptionIsOneLineNamingTheFile) {
  const auto dir = testing::temp_dir("shard_bad");
  const std::string path = (dir / "train-00000.bin").string();
  const auto fresh = [&] { ASSERT_TRUE(write_shard(path, sample(8192)).ok()); };
  const auto error_of = [&] {
    auto r = read_shard(path);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error().message();
  };
  fresh();
  flip_byte(path, kShardHeaderBytes + 4 * 8 + 1);  // a token
  std::string e = error_of();
  EXPECT_EQ(e.rfind(detail::concat(path, ": payload checksum mismatch"), 0), 0u) << e;
  EXPECT_NE(e.find("regenerate it with herd data"), std::string::npos);
  EXPECT_EQ(e.find('\n'), std::string::npos);
  fresh();
  flip_byte(path, 24);  // the token count
  EXPECT_EQ(error_of(),
            detail::concat(path, ": header checksum mismatch; the shard is corrupt, regenerate it with herd data"));
  fresh();
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 2);
  EXPECT_NE(error_of().find("(truncated?)"), std::string::npos);
  std::ofstream(path, std::ios::trunc) << "this is not a shard at all, just some text of more than 64 bytes....";
  EXPECT_NE(error_of().find("magic is not HERDTOKS"), std::string::npos);
  std::filesystem::remove(path);
  EXPECT_EQ(error_of(), detail::concat(path, ": cannot open shard; run herd data to create it"));
}

TEST(Shard, ReadsASplitAcrossShardsInOrder) {
  const auto dir = testing::temp_dir("shard_split");
  TokenDocuments a = sample(100), b;
  b.vocab_size = 100;
  b.add_doc(std::vector<std::int32_t>{7, 8});
  ASSERT_TRUE(write_shard((dir / "train-00001.bin").string(), b).ok());
  ASSERT_TRUE(write_shard((dir / "train-00000.bin").string(), a).ok());
  auto all = read_split(dir.string(), "train");
  ASSERT_TRUE(all.ok()) << all.error().message();
  EXPECT_EQ(all->n_docs(), 4);
  EXPECT_EQ(all->tokens, (std::vector<std::int32_t>{1, 2, 3, 99, 0, 7, 8}));
  EXPECT_EQ(all->doc(3).size(), 2u);
  auto none = read_split(dir.string(), "val");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("has no val-*.bin shards"), std::string::npos);
}

TEST(Shard, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32/IEEE check value
}

TEST(HeldOut, IsDeterministicAndSizedByTheFraction) {
  const auto m1 = heldout_mask(233, 0.05, 7);
  EXPECT_EQ(m1, heldout_mask(233, 0.05, 7));
  EXPECT_NE(m1, heldout_mask(233, 0.05, 8));
  EXPECT_EQ(std::count(m1.begin(), m1.end(), true), 12);  // round(0.05 x 233)
  const auto small = heldout_mask(3, 0.01, 1);
  EXPECT_EQ(std::count(small.begin(), small.end(), true), 1);
  const auto none = heldout_mask(10, 0.0, 1);
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
}

TEST(Permutation, IsAPermutationAndPlatformIndependent) {
  const auto p = permutation(10, 42);
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[i], i);
  // SplitMix64's published first output for seed 0 (Vigna's reference implementation).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
}

}  // namespace
}  // namespace herd::data

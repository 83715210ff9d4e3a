// Incremental byte-level BPE training (algorithm and tie rule in the header).
#include "herd/data/bpe_trainer.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <unordered_map>

#include "herd/core/file_write.h"
#include "herd/data/pretokenize.h"
#include "herd/data/tokenizer.h"

namespace herd::data {

namespace {

using Pair = std::uint64_t;  // (left id << 32) | right id
inline Pair make_pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
}

struct Word {
  std::vector<std::int32_t> symbols;
  std::int64_t count = 0;
};

// Heap entry; the top is the largest count, then the smallest pair key.
struct Entry {
  std::int64_t count;
  Pair pair;
  bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

Result<std::vector<std::string>> train_bpe(const std::vector<std::string>& documents, const BpeTrainerConfig& config,
                                           BpeTrainerStats* stats) {
  constexpr std::int64_t kSpecial = 3;
  if (config.vocab_size < 256 + kSpecial + 1) {
    return make_error("vocab_size (", config.vocab_size, ") must be at least ", 256 + kSpecial + 1,
                      " (256 bytes, 3 special tokens and one merge)");
  }
  const std::int64_t target = config.vocab_size - kSpecial;

  // Distinct pieces with their frequencies, sorted so that word indices do not depend on hashing.
  const Pretokenizer pre;
  std::unordered_map<std::string, std::int64_t> freq;
  std::int64_t n_pieces = 0;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    if (find_invalid_utf8(documents[d]) != std::string::npos) {
      return make_error("document ", d, " is not valid UTF-8; re-encode the corpus as UTF-8");
    }
    pre.split(documents[d], [&](std::string_view p) {
      ++freq[std::string(p)];
      ++n_pieces;
    });
  }
  std::vector<std::pair<std::string, std::int64_t>> sorted(freq.begin(), freq.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words(sorted.size());
  for (std::size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char c : sorted[w].first) words[w].symbols.push_back(c);
    words[w].count = sorted[w].second;
  }

  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, std::int32_t> id_of;
  for (int b = 0; b < 256; ++b) id_of[tokens[b]] = b;

  std::unordered_map<Pair, std::int64_t> counts;
  std::unordered_map<Pair, std::vector<std::int32_t>> where;  // words that contain (or contained) a pair
  for (std::size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p = make_pair_key(s[i], s[i + 1]);
      counts[p] += words[w].count;
      auto& list = where[p];
      if (list.empty() || list.back() != static_cast<std::int32_t>(w)) list.push_back(static_cast<std::int32_t>(w));
    }
  }
  std::priority_queue<Entry> heap;
  for (const auto& [p, c] : counts) heap.push({c, p});

  std::int64_t merges = 0;
  std::unordered_map<Pair, std::int64_t> delta;
  while (static_cast<std::int64_t>(tokens.size()) < target) {
    if (heap.empty()) {
      return make_error("the corpus supplies only ", tokens.size() + kSpecial, " tokens, fewer than vocab_size (",
                        config.vocab_size, "); lower --vocab-size or use a larger corpus");
    }
    const Entry top = heap.top();
    heap.pop();
    const auto it = counts.find(top.pair);
    const std::int64_t current = it == counts.end() ? 0 : it->second;
    if (current != top.count) {  // stale entry: re-queue a decreased count, drop an outdated one
      if (current > 0 && current < top.count) heap.push({current, top.pair});
      continue;
    }
    if (current <= 0) continue;
    const auto a = static_cast<std::int32_t>(top.pair >> 32);
    const auto b = static_cast<std::int32_t>(top.pair & 0xFFFFFFFFu);
    const std::string merged = tokens[a] + tokens[b];
    std::int32_t t;
    if (auto found = id_of.find(merged); found != id_of.end()) {
      t = found->second;
    } else {
      t = static_cast<std::int32_t>(tokens.size());
      tokens.push_back(merged);
      id_of.emplace(merged, t);
    }
    ++merges;
    delta.clear();
    const std::vector<std::int32_t> affected = where[top.pair];
    for (const std::int32_t w : affected) {
      Word& word = words[w];
      auto& s = word.symbols;
      bool hit = false;
      for (std::size_t i = 0; i + 1 < s.size(); ++i) hit |= (s[i] == a && s[i + 1] == b);
      if (!hit) continue;
      for (std::size_t i = 0; i + 1 < s.size(); ++i) delta[make_pair_key(s[i], s[i + 1])] -= word.count;
      std::vector<std::int32_t> out;
      out.reserve(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(t);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = std::move(out);
      for (std::size_t i = 0; i + 1 < s.size(); ++i) {
        const Pair p = make_pair_key(s[i], s[i + 1]);
        delta[p] += word.count;
        if (s[i] == t || s[i + 1] == t) {
          auto& list = where[p];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    // Apply in key order so that heap pushes, and thus ties, never depend on hash iteration order.
    std::vector<std::pair<Pair, std::int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [p, dc] : changes) {
      if (dc == 0) continue;
      std::int64_t& c = counts[p];
      c += dc;
      if (dc > 0) heap.push({c, p});
      if (c == 0) counts.erase(p);
    }
  }
  if (stats) *stats = {n_pieces, static_cast<std::int64_t>(words.size()), merges};
  return tokens;
}

Status write_tiktoken_file(const std::string& path, const std::vector<std::string>& tokens) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(path, ": cannot create the tokenizer file; check that the directory exists");
  for (std::size_t r = 0; r < tokens.size(); ++r) out << base64_encode(tokens[r]) << ' ' << r << '\n';
  return close_written(out, path);
}

}  // namespace herd::data

// Tokenizer::load_hf_json: Hugging Face's tokenizer.json read into herd's byte-level BPE (tokenizer.h).
//
// A tiktoken vocabulary converted to tokenizer.json (transformers' TikTokenConverter, which is how
// Llama 3's tokenizer.json was made) keeps each token's id equal to its tiktoken rank, spells each byte
// with GPT-2's printable alphabet (bytes_to_unicode: the printable Latin-1 bytes stand for themselves,
// the other 68 bytes for U+0100 onwards), and lists the merges in the order of the tokens they make. So
// the ids and the byte strings are all herd's rank-based encoder needs; the merges are checked to be in
// that order, the pre-tokenizer to be Llama 3's regex, and the special tokens to be herd's, which is
// what makes encoding give the same ids as Hugging Face's `tokenizers` does.
#include <array>
#include <filesystem>
#include <map>

#include "herd/core/json.h"
#include "herd/data/pretokenize.h"
#include "herd/data/tokenizer.h"

namespace herd::data {

namespace {

// GPT-2's bytes_to_unicode, inverted: code point -> byte (-1: not a byte's character).
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> inv;
  inv.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    inv[static_cast<std::size_t>(printable ? b : 256 + extra++)] = b;
  }
  return inv;
}

// A vocabulary string (UTF-8 of byte characters) to its bytes; false on a character outside the alphabet.
bool to_bytes(const std::string& s, const std::array<int, 324>& inv, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = 0;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;  // every byte character is below U+0800
    }
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out.push_back(static_cast<char>(inv[cp]));
  }
  return true;
}

}  // namespace

Result<Tokenizer> Tokenizer::load_hf_json(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  const std::string where = "tokenizer file '" + path + "'";
  auto refuse = [&](const std::string& field, const std::string& what) {
    return make_error(where, ": ", field, ": ", what);
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return refuse("model", "missing; not a Hugging Face tokenizer.json");
  }
  const Json& m = j["model"];
  if (m.value("type", std::string()) != "BPE") {
    return refuse("model.type", "is " + json_preview(m.contains("type") ? m["type"] : Json()) +
                                    "; herd reads byte-level BPE tokenizers (\"BPE\") only");
  }
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>()) {
    return refuse("model.byte_fallback", "true is a SentencePiece-style vocabulary; herd reads byte-level BPE only");
  }
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    return refuse("normalizer", "is set; herd's tokenizers have none (Llama 3's is null)");
  }
  // Pre-tokenizer: Sequence[Split(Llama 3 regex, Isolated), ByteLevel(use_regex false)].
  {
    const Json& p = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
    bool ok = p.is_object() && p.value("type", std::string()) == "Sequence" && p.contains("pretokenizers") &&
              p["pretokenizers"].is_array() && p["pretokenizers"].size() == 2;
    std::string pattern;
    if (ok) {
      const Json& split = p["pretokenizers"][0];
      const Json& bl = p["pretokenizers"][1];
      ok = split.is_object() && split.value("type", std::string()) == "Split" && split.contains("pattern") &&
           split["pattern"].is_object() && split["pattern"].contains("Regex") &&
           split["pattern"]["Regex"].is_string() && split.value("behavior", std::string()) == "Isolated" &&
           !split.value("invert", false) && bl.is_object() && bl.value("type", std::string()) == "ByteLevel" &&
           !bl.value("use_regex", true) && !bl.value("add_prefix_space", false);
      if (ok) pattern = split["pattern"]["Regex"].get<std::string>();
    }
    if (!ok) {
      return refuse("pre_tokenizer",
                    "herd implements Llama 3's: Sequence of Split(its regex, Isolated) and ByteLevel(use_regex "
                    "false, add_prefix_space false); convert the tokenizer with that pre-tokenizer");
    }
    if (pattern != kLlama3Pattern) {  // pretokenize.h: the regex herd's pre-tokenizer implements
      return refuse("pre_tokenizer.pretokenizers[0].pattern.Regex",
                    "'" + pattern.substr(0, 60) + "...' is not Llama 3's regex, the one herd implements");
    }
  }
  // Vocabulary: ids 0..n-1, each a byte string.
  if (!m.contains("vocab") || !m["vocab"].is_object() || m["vocab"].empty()) {
    return refuse("model.vocab", "expected an object of token -> id");
  }
  const std::array<int, 324> inv = unicode_to_byte();
  const std::size_t n = m["vocab"].size();
  std::vector<std::string> tokens(n);
  std::vector<char> seen(n, 0);
  std::string bytes;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<std::int64_t>() < 0 ||
        it.value().get<std::int64_t>() >= static_cast<std::int64_t>(n)) {
      return refuse("model.vocab[\"" + it.key() + "\"]",
                    "id " + json_preview(it.value()) + " is not in [0, " + std::to_string(n) + ")");
    }
    const std::size_t id = static_cast<std::size_t>(it.value().get<std::int64_t>());
    if (seen[id]) return refuse("model.vocab", "id " + std::to_string(id) + " is given to two tokens");
    if (!to_bytes(it.key(), inv, bytes) || bytes.empty()) {
      return refuse("model.vocab[\"" + it.key() + "\"]",
                    "is not spelled in the byte-level alphabet (GPT-2's bytes_to_unicode)");
    }
    seen[id] = 1;
    tokens[id] = bytes;
  }
  // Merges, in the order of the tokens they make (tiktoken's ranks).
  if (!m.contains("merges") || !m["merges"].is_array()) return refuse("model.merges", "expected an array");
  std::int64_t last = -1;
  for (std::size_t i = 0; i < m["merges"].size(); ++i) {
    const Json& mg = m["merges"][i];
    std::string a, b;
    if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else if (mg.is_string() && mg.get<std::string>().find(' ') != std::string::npos) {
      const std::string s = mg.get<std::string>();
      a = s.substr(0, s.find(' '));
      b = s.substr(s.find(' ') + 1);
    } else {
      return refuse("model.merges[" + std::to_string(i) + "]", "expected [\"a\", \"b\"] or \"a b\"");
    }
    auto made = m["vocab"].find(a + b);
    if (!m["vocab"].contains(a) || !m["vocab"].contains(b) || made == m["vocab"].end()) {
      return refuse("model.merges[" + std::to_string(i) + "]",
                    "'" + a + "' + '" + b + "' are not tokens of the vocabulary; the file is corrupt");
    }
    const std::int64_t id = made->get<std::int64_t>();
    if (id < last) {
      return refuse("model.merges[" + std::to_string(i) + "]",
                    "makes token " + std::to_string(id) + " after a merge that made token " + std::to_string(last) +
                        "; herd needs merges in rank order (a tiktoken-converted vocabulary)");
    }
    last = id;
  }
  // Special tokens: herd's, right after the ordinary ones.
  const std::vector<std::string> specials = special_tokens_for(static_cast<std::int64_t>(n));
  std::map<std::int64_t, std::string> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const Json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        return refuse("added_tokens", "expected objects with an integer id and a string content");
      }
      added[t["id"].get<std::int64_t>()] = t["content"].get<std::string>();
    }
  }
  for (std::size_t k = 0; k < specials.size(); ++k) {
    const std::int64_t id = static_cast<std::int64_t>(n + k);
    auto it = added.find(id);
    if (it == added.end() || it->second != specials[k]) {
      return refuse("added_tokens", "id " + std::to_string(id) + " must be " + specials[k] +
                                        " (herd's special tokens after " + std::to_string(n) + " ordinary ones), got " +
                                        (it == added.end() ? std::string("none") : "'" + it->second + "'"));
    }
    added.erase(it);
  }
  if (!added.empty()) {
    return refuse("added_tokens", "id " + std::to_string(added.begin()->first) + " ('" + added.begin()->second +
                                      "') is not one of herd's special tokens");
  }
  return from_tokens(std::move(tokens), where);
}

}  // namespace herd::data

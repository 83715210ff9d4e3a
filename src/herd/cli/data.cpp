// herd data: corpus -> binary token shards (train and held-out val), and the tools around them:
//   herd data --input FILE... --output DIR [--tokenizer PATH] [--val-fraction F] [--seed S]
//   herd data train-tokenizer --input FILE... --output PATH [--vocab-size N]
//   herd data verify DIR
// Formats and conventions: docs/data.md.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/table.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json.h"
#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/core/timer.h"
#include "herd/data/bpe_trainer.h"
#include "herd/data/corpus.h"
#include "herd/data/shard.h"
#include "herd/data/shuffle.h"
#include "herd/data/tokenizer.h"
#include "herd/data/verify.h"

namespace herd::cli {

namespace {

struct CorpusArgs {
  std::vector<std::string> inputs;
  std::string field = "text";
  std::string format = "auto";
  std::string text_split = "file";
  double val_fraction = 0.05;
  std::uint64_t seed = 0;
};

struct DataOptions {
  CorpusArgs corpus;
  std::string tokenizer = "assets/tokenizer/llama3/tokenizer.model";
  std::string output;
  std::int64_t shard_tokens = 100'000'000;
  bool json = false;
};

struct TrainTokenizerOptions {
  CorpusArgs corpus;
  std::string output;
  std::int64_t vocab_size = 8192;
};

void add_corpus_options(CLI::App* app, CorpusArgs& c) {
  app->add_option("--input", c.inputs, "Corpus files: JSONL (.jsonl, .jsonl.xz) or text (.txt, .txt.xz, ...)")
      ->expected(1, -1);
  app->add_option("--field", c.field, "JSONL: the string field that holds each document")->capture_default_str();
  app->add_option("--format", c.format, "auto (by file name), jsonl or text")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "jsonl", "text"}));
  app->add_option("--text-split", c.text_split, "Text files: one document per file, or per blank-line paragraph")
      ->capture_default_str()
      ->check(CLI::IsMember({"file", "blank-lines"}));
  app->add_option("--val-fraction", c.val_fraction, "Share of documents held out for evaluation (by document)")
      ->capture_default_str()
      ->check(number_in(0.0, 0.5));
  app->add_option("--seed", c.seed, "Seed of the held-out choice")->capture_default_str();
}

// Every document of every input, in input order, with where each came from (for error messages).
struct Corpus {
  std::vector<std::string> docs;
  std::vector<std::string> origin;  // "PATH" (a whole text file) or "PATH, document K" (K from 1)
};

Result<Corpus> read_corpus(const CorpusArgs& c) {
  if (c.inputs.empty()) return make_error("--input: at least one corpus file is required");
  data::CorpusOptions o;
  o.field = c.field;
  o.format = c.format == "jsonl"  ? data::CorpusFormat::kJsonl
             : c.format == "text" ? data::CorpusFormat::kText
                                  : data::CorpusFormat::kAuto;
  o.text_split = c.text_split == "blank-lines" ? data::TextSplit::kBlankLines : data::TextSplit::kFile;
  Corpus all;
  for (const std::string& path : c.inputs) {
    HERD_ASSIGN_OR_RETURN(std::vector<std::string> docs, data::read_documents(path, o));
    if (docs.empty()) log_warning(path, ": no documents (the file is empty or blank); skipped");
    const bool one = docs.size() == 1;
    for (std::size_t k = 0; k < docs.size(); ++k) {
      all.docs.push_back(std::move(docs[k]));
      all.origin.push_back(one ? path : detail::concat(path, ", document ", k + 1));
    }
  }
  if (all.docs.empty()) return make_error("--input: the corpus has no documents; every input file is empty");
  return all;
}

// Writes one split as shards of at most `shard_tokens` tokens (whole documents; a longer document gets
// a shard of its own). Returns the shard file names.
Result<std::vector<std::string>> write_split(const std::string& dir, const std::string& split,
                                             const data::TokenDocuments& docs, std::int64_t shard_tokens) {
  std::vector<std::string> names;
  data::TokenDocuments cur;
  cur.vocab_size = docs.vocab_size;
  const auto flush = [&]() -> Status {
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05zu.bin", split.c_str(), names.size());
    HERD_RETURN_IF_ERROR(data::write_shard((std::filesystem::path(dir) / name).string(), cur));
    names.emplace_back(name);
    cur = data::TokenDocuments();
    cur.vocab_size = docs.vocab_size;
    return {};
  };
  for (std::int64_t d = 0; d < docs.n_docs(); ++d) {
    if (cur.n_docs() > 0 && cur.n_tokens() + docs.doc_size(d) > shard_tokens) HERD_RETURN_IF_ERROR(flush());
    cur.add_doc(docs.doc(d));
  }
  if (cur.n_docs() > 0 || names.empty()) HERD_RETURN_IF_ERROR(flush());
  return names;
}

int run_data(const DataOptions& o) {
  if (o.output.empty()) return report_error("data", make_error("--output: the output directory is required"));
  Timer timer;
  auto tok = data::Tokenizer::load(o.tokenizer);
  if (!tok.ok()) return report_error("data", tok.error());
  auto corpus = read_corpus(o.corpus);
  if (!corpus.ok()) return report_error("data", corpus.error());
  const std::vector<std::string>* docs = &corpus->docs;
  const std::vector<bool> held =
      data::heldout_mask(static_cast<std::int64_t>(docs->size()), o.corpus.val_fraction, o.corpus.seed);
  data::TokenDocuments split[2];  // train, val
  split[0].vocab_size = split[1].vocab_size = tok->vocab_size();
  std::int64_t bytes = 0;
  std::vector<std::int32_t> ids;
  for (std::size_t d = 0; d < docs->size(); ++d) {
    ids.clear();
    ids.push_back(tok->bos_id());
    const Status s = tok->encode_into((*docs)[d], ids);
    if (!s.ok()) return report_error("data", s.error().with_context(corpus->origin[d]));
    ids.push_back(tok->eos_id());
    split[held[d] ? 1 : 0].add_doc(ids);
    bytes += static_cast<std::int64_t>((*docs)[d].size());
  }
  std::error_code ec;
  std::filesystem::create_directories(o.output, ec);
  if (ec) return report_error("data", make_error("--output: cannot create '", o.output, "': ", ec.message()));
  Json meta;
  meta["format"] = "herd token shards, version 1 (docs/data.md)";
  meta["documents_stored_as"] = "<|begin_of_text|> text <|end_of_text|>";
  meta["tokenizer"] = o.tokenizer;
  if (auto crc = data::file_crc32(o.tokenizer); crc.ok()) meta["tokenizer_crc32"] = *crc;
  meta["vocab_size"] = tok->vocab_size();
  meta["bos_id"] = tok->bos_id();
  meta["eos_id"] = tok->eos_id();
  meta["pad_id"] = tok->pad_id();
  meta["inputs"] = o.corpus.inputs;
  meta["val_fraction"] = o.corpus.val_fraction;
  meta["seed"] = o.corpus.seed;
  const char* names[2] = {"train", "val"};
  for (int s = 0; s < 2; ++s) {
    if (split[s].n_docs() == 0 && s == 1) continue;
    auto shards = write_split(o.output, names[s], split[s], o.shard_tokens);
    if (!shards.ok()) return report_error("data", shards.error());
    meta["splits"][names[s]] = {{"documents", split[s].n_docs()}, {"tokens", split[s].n_tokens()}, {"shards", *shards}};
  }
  if (split[0].n_docs() == 0) return report_error("data", make_error("--val-fraction leaves no training documents"));
  if (Status w = write_file((std::filesystem::path(o.output) / "meta.json").string(), json_text(meta, 2) + "\n");
      !w.ok()) {
    return report_error("data", make_error("--output: ", w.error().message(), "; check free space"));
  }
  const double seconds = timer.seconds();
  meta["seconds"] = seconds;
  meta["text_bytes"] = bytes;
  if (o.json) {
    std::cout << json_text(meta, 2) << "\n";
    return 0;
  }
  std::cout << "Tokenized " << docs->size() << " documents (" << format_bytes(static_cast<double>(bytes)) << ") with "
            << o.tokenizer << " (vocab " << tok->vocab_size() << ") in " << format_fixed(seconds, 2) << " s\n";
  Table t({"split", "documents", "tokens", "shards"});
  for (int s = 0; s < 2; ++s) {
    if (!meta["splits"].contains(names[s])) continue;
    t.add({names[s], std::to_string(split[s].n_docs()), format_thousands(split[s].n_tokens()),
           std::to_string(meta["splits"][names[s]]["shards"].size())});
  }
  t.print(std::cout);
  std::cout << "Wrote " << o.output << "/{train,val}-*.bin and meta.json\n";
  return 0;
}

int run_train_tokenizer(const TrainTokenizerOptions& o) {
  const char* cmd = "data train-tokenizer";
  if (o.output.empty()) return report_error(cmd, make_error("--output: the tokenizer file to write is required"));
  Timer timer;
  auto corpus = read_corpus(o.corpus);
  if (!corpus.ok()) return report_error(cmd, corpus.error());
  std::vector<std::string>* docs = &corpus->docs;
  // Train on the training split only, so that held-out text never shapes the vocabulary.
  const std::vector<bool> held =
      data::heldout_mask(static_cast<std::int64_t>(docs->size()), o.corpus.val_fraction, o.corpus.seed);
  std::vector<std::string> train;
  for (std::size_t d = 0; d < docs->size(); ++d) {
    if (!held[d]) train.push_back(std::move((*docs)[d]));
  }
  data::BpeTrainerStats stats;
  auto tokens = data::train_bpe(train, {.vocab_size = o.vocab_size}, &stats);
  if (!tokens.ok()) return report_error(cmd, tokens.error());
  const Status w = data::write_tiktoken_file(o.output, *tokens);
  if (!w.ok()) return report_error(cmd, w.error());
  std::cout << "Trained a byte-level BPE vocabulary of " << o.vocab_size << " ids (" << tokens->size()
            << " ordinary + 3 special) on " << train.size() << " documents (" << format_thousands(stats.pieces)
            << " pieces, " << format_thousands(stats.unique_pieces) << " distinct) in "
            << format_fixed(timer.seconds(), 2) << " s\nWrote " << o.output << "\n";
  return 0;
}

int run_verify(const std::string& dir) {
  auto splits = data::verify_dataset(dir);
  if (!splits.ok()) return report_error("data verify", splits.error());
  Table t({"split", "shards", "documents", "tokens", "vocab"});
  for (const data::VerifiedSplit& s : *splits) {
    t.add({s.name, std::to_string(s.shards.size()), std::to_string(s.documents), format_thousands(s.tokens),
           std::to_string(s.vocab_size)});
  }
  t.print(std::cout);
  std::cout << "All checksums match. meta.json lists exactly these shards and counts.\n";
  return 0;
}

}  // namespace

Subcommand add_data_command(CLI::App& root) {
  auto data_opts = std::make_shared<DataOptions>();
  auto tok_opts = std::make_shared<TrainTokenizerOptions>();
  auto verify_dir = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand(
      "data", "Tokenize corpora into binary token shards with a held-out split (see also: train-tokenizer, verify)");
  app->require_subcommand(0, 1);
  add_corpus_options(app, data_opts->corpus);
  app->add_option("--tokenizer", data_opts->tokenizer, "tiktoken-format BPE file (Llama 3's or a trained one)")
      ->capture_default_str();
  app->add_option("--output", data_opts->output, "Directory for train-*.bin, val-*.bin and meta.json");
  app->add_option("--shard-tokens", data_opts->shard_tokens, "Most tokens per shard file (whole documents)")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_flag("--json", data_opts->json, "Print the summary as JSON");

  CLI::App* tok = app->add_subcommand("train-tokenizer", "Train a small byte-level BPE vocabulary (tiktoken format)");
  add_corpus_options(tok, tok_opts->corpus);
  tok->add_option("--output", tok_opts->output, "The tokenizer file to write");
  tok->add_option("--vocab-size", tok_opts->vocab_size, "Ids in all, including 3 special tokens at the end")
      ->capture_default_str()
      ->check(integer_in(260, 1 << 20));

  CLI::App* verify = app->add_subcommand("verify", "Check every shard of a herd data directory (checksums, ids)");
  verify->add_option("dir", *verify_dir, "The directory written by herd data")->required();

  return {app, [=] {
            if (tok->parsed()) return run_train_tokenizer(*tok_opts);
            if (verify->parsed()) return run_verify(*verify_dir);
            return run_data(*data_opts);
          }};
}

}  // namespace herd::cli

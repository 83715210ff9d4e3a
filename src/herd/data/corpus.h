// Corpus readers: the documents `herd data` tokenizes.
//
// Inputs are JSONL (one object per line; the document is one string field, "text" by default) or
// plain text (one document per file, or documents separated by blank lines). Either may be
// xz-compressed (`.xz`), decoded in memory with liblzma so that the vendored corpus needs no external
// tool. The format follows the file name: `*.jsonl`, `*.jsonl.xz`, `*.json.xz` are JSONL; anything else
// is text unless the caller says otherwise.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "herd/core/error.h"

namespace herd::data {

enum class CorpusFormat { kAuto, kJsonl, kText };
enum class TextSplit { kFile, kBlankLines };

struct CorpusOptions {
  CorpusFormat format = CorpusFormat::kAuto;
  std::string field = "text";               // JSONL: the string field holding the document
  TextSplit text_split = TextSplit::kFile;  // text: the whole file, or paragraphs between blank lines
};

// The file's bytes, xz-decoded when the name ends in ".xz". Errors name the file (a directory is one).
Result<std::string> read_file_bytes(const std::string& path);

// Decodes an .xz stream held in memory; `source` names it in errors.
Result<std::string> xz_decompress(std::string_view compressed, const std::string& source);

// The documents of one file, in file order. Empty documents are kept only for JSONL (so that line i
// stays document i); blank-line splitting drops empty paragraphs, and an empty or blank text file
// holds no document. A directory is an error (inputs are files).
Result<std::vector<std::string>> read_documents(const std::string& path, const CorpusOptions& options);

// JSONL content to documents: error "PATH:LINE: field 'text' missing" and the like.
Result<std::vector<std::string>> parse_jsonl_documents(std::string_view content, const std::string& field,
                                                       const std::string& source);

// Paragraphs separated by one or more blank lines (lines holding only white space), without the
// separating newlines.
std::vector<std::string> split_blank_lines(std::string_view content);

}  // namespace herd::data

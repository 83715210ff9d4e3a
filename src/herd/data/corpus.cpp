// JSONL and text corpus readers with in-memory xz decoding (liblzma).
#include "herd/data/corpus.h"

#include <lzma.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "herd/core/json.h"

namespace herd::data {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\f' && c != '\v') return false;
  }
  return true;
}

}  // namespace

Result<std::string> xz_decompress(std::string_view compressed, const std::string& source) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) {
    return make_error(source, ": liblzma could not start an xz decoder");
  }
  std::string out;
  std::string buf(1 << 20, '\0');
  strm.next_in = reinterpret_cast<const std::uint8_t*>(compressed.data());
  strm.avail_in = compressed.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    strm.next_out = reinterpret_cast<std::uint8_t*>(buf.data());
    strm.avail_out = buf.size();
    ret = lzma_code(&strm, strm.avail_in ? LZMA_RUN : LZMA_FINISH);
    out.append(buf.data(), buf.size() - strm.avail_out);
  }
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END) {
    const char* why = ret == LZMA_FORMAT_ERROR ? "not an xz file"
                      : ret == LZMA_DATA_ERROR ? "corrupt xz data"
                      : ret == LZMA_BUF_ERROR  ? "truncated xz data"
                                               : "xz decoding failed";
    return make_error(source, ": ", why, " (liblzma code ", static_cast<int>(ret), "); re-download the file");
  }
  return out;
}

Result<std::string> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return make_error(path, ": is a directory; pass the corpus files in it (e.g. ", path, "/*.jsonl)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot open file; check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!ends_with(path, ".xz")) return ss.str();
  return xz_decompress(ss.str(), path);
}

Result<std::vector<std::string>> parse_jsonl_documents(std::string_view content, const std::string& field,
                                                       const std::string& source) {
  std::vector<std::string> docs;
  std::size_t pos = 0;
  std::int64_t line_no = 0;
  while (pos < content.size()) {
    std::size_t eol = content.find('\n', pos);
    if (eol == std::string_view::npos) eol = content.size();
    const std::string_view line = content.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (blank(line)) continue;
    const std::string where = detail::concat(source, ":", line_no);
    Result<Json> parsed = parse_json_text(line, where);
    if (!parsed.ok()) return Error(parsed.error().message() + "; each line of a JSONL corpus must be one object");
    if (!parsed->is_object()) {
      return make_error(where, ": not a JSON object; each line of a JSONL corpus must be one object");
    }
    const Json& j = *parsed;
    auto it = j.find(field);
    if (it == j.end()) return make_error(where, ": field '", field, "' missing; choose the field with --field");
    if (!it->is_string()) {
      return make_error(where, ": field '", field, "' must be a string, got ", json_preview(*it));
    }
    docs.push_back(it->get<std::string>());
  }
  return docs;
}

std::vector<std::string> split_blank_lines(std::string_view content) {
  std::vector<std::string> docs;
  std::string cur;
  std::size_t pos = 0;
  bool pending_newline = false;
  while (pos < content.size()) {
    std::size_t eol = content.find('\n', pos);
    if (eol == std::string_view::npos) eol = content.size();
    const std::string_view line = content.substr(pos, eol - pos);
    pos = eol + 1;
    if (blank(line)) {
      if (!cur.empty()) docs.push_back(std::move(cur));
      cur.clear();
      pending_newline = false;
      continue;
    }
    if (pending_newline) cur += '\n';
    cur += line;
    pending_newline = true;
  }
  if (!cur.empty()) docs.push_back(std::move(cur));
  return docs;
}

Result<std::vector<std::string>> read_documents(const std::string& path, const CorpusOptions& options) {
  HERD_ASSIGN_OR_RETURN(std::string content, read_file_bytes(path));
  CorpusFormat format = options.format;
  if (format == CorpusFormat::kAuto) {
    const bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".jsonl.xz") || ends_with(path, ".json.xz") ||
                       ends_with(path, ".json");
    format = jsonl ? CorpusFormat::kJsonl : CorpusFormat::kText;
  }
  if (format == CorpusFormat::kJsonl) return parse_jsonl_documents(content, options.field, path);
  if (options.text_split == TextSplit::kBlankLines) return split_blank_lines(content);
  // An empty or blank text file holds no document (it would otherwise train as BOS EOS alone).
  if (content.find_first_not_of(" \t\r\n\f\v") == std::string::npos) return std::vector<std::string>();
  std::vector<std::string> one;
  one.push_back(std::move(content));
  return one;
}

}  // namespace herd::data

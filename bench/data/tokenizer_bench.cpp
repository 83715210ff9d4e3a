// Tokenizer encoding throughput (MB/s of UTF-8 text, one thread) on the whole vendored corpus:
// herd with its ASCII fast path, herd with PCRE2 alone, and tiktoken (PyPI) run by tiktoken_peer.py
// on the same file in the same run. Both encoders' ids are compared through a CRC-32 of every id.
//   herd_bench_tokenizer [--tokenizer PATH] [--corpus PATH] [--passes N] [--python python3] [--out FILE]
#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "common/bench_json.h"
#include "herd/core/timer.h"
#include "herd/data/corpus.h"
#include "herd/data/shard.h"
#include "herd/data/tokenizer.h"

namespace {

using herd::Json;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the calling thread: on a shared machine wall time mostly measures the neighbours.
double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Pass {
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;
  std::size_t tokens = 0;
  std::uint32_t crc = 0;
};

Pass run_herd(const herd::data::Tokenizer& tok, const std::vector<std::string>& docs, int passes) {
  Pass r;
  std::vector<std::int32_t> ids;
  for (int p = 0; p < passes; ++p) {
    herd::Timer t;
    const double cpu0 = thread_cpu_seconds();
    std::size_t tokens = 0;
    std::uint32_t crc = 0;
    for (const std::string& d : docs) {
      ids.clear();
      HERD_CHECK(tok.encode_into(d, ids).ok());
      tokens += ids.size();
      if (p == 0) crc = herd::data::crc32(ids.data(), ids.size() * sizeof(std::int32_t), crc);
    }
    r.seconds.push_back(t.seconds());
    r.cpu_seconds.push_back(thread_cpu_seconds() - cpu0);
    if (p == 0) r.tokens = tokens, r.crc = crc;
  }
  return r;
}

Json run_peer(const std::string& python, const std::string& tokenizer, const std::string& corpus, int passes) {
  const std::string script = std::string(HERD_SOURCE_DIR) + "/bench/data/tiktoken_peer.py";
  const std::string cmd = python + " " + script + " " + tokenizer + " " + corpus + " " + std::to_string(passes);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return Json{{"available", false}, {"reason", "cannot run " + python}};
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  pclose(p);
  Json j = Json::parse(out, nullptr, false);
  if (j.is_discarded()) return Json{{"available", false}, {"reason", "peer printed no JSON: " + out.substr(0, 200)}};
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = std::string(HERD_SOURCE_DIR) + "/assets/tokenizer/llama3/tokenizer.model";  // fetch-assets.sh
  std::string corpus = std::string(HERD_SOURCE_DIR) + "/corpus/sotu.jsonl.xz";
  std::string python = "python3", out_path;
  int passes = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokenizer")
      tokenizer = v;
    else if (k == "--corpus")
      corpus = v;
    else if (k == "--passes")
      passes = std::max(1, std::stoi(v));
    else if (k == "--python")
      python = v;
    else if (k == "--out")
      out_path = v;
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  auto tok = herd::data::Tokenizer::load(tokenizer);
  if (!tok.ok()) {
    std::cerr << "herd_bench_tokenizer: error: " << tok.error().message() << "\n";
    return 1;
  }
  auto docs = herd::data::read_documents(corpus, {});
  if (!docs.ok()) {
    std::cerr << "herd_bench_tokenizer: error: " << docs.error().message() << "\n";
    return 1;
  }
  std::size_t bytes = 0;
  for (const auto& d : *docs) bytes += d.size();
  const double mb = static_cast<double>(bytes) / 1e6;

  Json doc = herd::bench::envelope("tokenizer encode throughput, Llama 3 vocabulary, one thread");
  doc["corpus"] = {{"path", corpus}, {"documents", docs->size()}, {"bytes", bytes}};
  doc["passes"] = passes;
  const auto add = [&](const std::string& name, const std::vector<double>& s, const std::vector<double>& cpu,
                       std::size_t tokens, Json extra) {
    Json r = std::move(extra);
    r["name"] = name;
    r["wall_seconds_per_pass"] = s;
    r["cpu_seconds_per_pass"] = cpu;
    r["mb_per_s_wall_median"] = mb / median(s);
    r["mb_per_s_cpu_median"] = mb / median(cpu);
    r["tokens"] = tokens;
    doc["results"].push_back(r);
    std::cerr << name << ": " << mb / median(cpu) << " MB/s per CPU-second, " << mb / median(s)
              << " MB/s wall (medians of " << s.size() << "), " << tokens << " tokens\n";
  };
  const Pass fast = run_herd(*tok, *docs, passes);
  add("herd", fast.seconds, fast.cpu_seconds, fast.tokens,
      {{"ids_crc32", fast.crc}, {"pretokenizer", "ASCII fast path + PCRE2"}});
  // Same vocabulary, PCRE2 for every piece: what the fast path buys.
  tok->set_ascii_fast_path(false);
  const Pass pcre = run_herd(*tok, *docs, passes);
  tok->set_ascii_fast_path(true);
  add("herd (PCRE2 only)", pcre.seconds, pcre.cpu_seconds, pcre.tokens, {{"ids_crc32", pcre.crc}});

  const Json peer = run_peer(python, tokenizer, corpus, passes);
  if (peer.value("available", false)) {
    const auto s = peer["passes_s"].get<std::vector<double>>();
    const auto cpu = peer["cpu_passes_s"].get<std::vector<double>>();
    add("tiktoken " + peer["version"].get<std::string>(), s, cpu, peer["tokens"].get<std::size_t>(),
        {{"ids_crc32", peer["ids_crc32"]}, {"python", peer["python"]}});
    doc["ids_identical"] = peer["ids_crc32"].get<std::uint32_t>() == fast.crc && peer["tokens"] == fast.tokens;
    doc["herd_over_tiktoken_cpu"] = median(cpu) / median(fast.cpu_seconds);
    doc["herd_over_tiktoken_wall"] = median(s) / median(fast.seconds);
  } else {
    doc["peer_unavailable"] = peer.value("reason", std::string("unknown"));
  }
  herd::bench::write_result(doc, out_path);
  return 0;
}

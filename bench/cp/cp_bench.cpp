// Context-parallel load balance and communication volume (table in docs/cp.md).
//
// Balance: for each CP degree and mask (causal; packed documents), every rank's attention work under
// the Llama 3 split (chunks r and 2cp-1-r) and under a contiguous split (chunk r of cp): the exact
// count of unmasked (query, key) pairs, and the measured time of the rank's forward + backward
// attention kernel (its queries against all T gathered keys, fp32), median of --reps. The figure of
// merit is max/mean over ranks: the step waits for the slowest rank.
// Volume: for the Llama 3 models under TP = 8, the bytes one rank contributes to the per-layer K/V
// all-gather (bf16) against its local Q, from cp_comm_volume (the same function the test checks
// against the flight recorder).
//
//   OMP_NUM_THREADS=1 herd_bench_cp [--out file.json] [--seq 4096] [--reps 3] [--clock cpu|wall]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/library_env.h"
#include "herd/model/config.h"
#include "herd/parallel/cp/cp_attention.h"
#include "herd/parallel/cp/cp_balance.h"

namespace {

using namespace herd;
using namespace herd::parallel::cp;

bool g_cpu_clock = true;

double now_seconds() {
  if (g_cpu_clock) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_seconds(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_seconds();
    f();
    t.push_back(now_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double max_over_mean(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return *std::max_element(v.begin(), v.end()) / mean;
}

std::vector<float> filled(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// One sequence's positions and document ids: plain causal ("causal"), documents of random lengths in
// [64, T/2] ("documents"), or in [32, 256] ("short_documents"), seeded; positions restart at each
// document as the loader packs them.
void make_mask(std::int64_t T, const std::string& kind, std::vector<std::int32_t>& pos, std::vector<std::int32_t>& doc,
               std::uint32_t seed = 11) {
  pos.resize(static_cast<std::size_t>(T));
  doc.resize(static_cast<std::size_t>(T));
  std::mt19937 gen(seed);
  const bool shortd = kind == "short_documents";
  std::uniform_int_distribution<std::int64_t> len(shortd ? 32 : 64, shortd ? 256 : std::max<std::int64_t>(64, T / 2));
  std::int64_t start = 0, d = 0, next = kind == "causal" ? T : len(gen);
  for (std::int64_t t = 0; t < T; ++t) {
    if (t - start == next) start = t, ++d, next = len(gen);
    pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t - start);
    doc[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(d);
  }
}

// The attention one CP rank runs: its queries against every key, keys in the split's gathered order.
double rank_seconds(SplitKind kind, std::int64_t T, std::int64_t cp, std::int64_t rank,
                    const std::vector<std::int32_t>& pos, const std::vector<std::int32_t>& doc, std::int64_t hq,
                    std::int64_t hkv, std::int64_t D, int reps) {
  std::vector<std::int64_t> keys;
  for (std::int64_t r = 0; r < cp; ++r) {
    const auto idx = rank_token_indices(kind, T, cp, r);
    keys.insert(keys.end(), idx.begin(), idx.end());
  }
  const auto queries = rank_token_indices(kind, T, cp, rank);
  const auto tq = static_cast<std::int64_t>(queries.size());
  std::vector<std::int32_t> pq, dq, pk, dk;
  for (const auto i : queries)
    pq.push_back(pos[static_cast<std::size_t>(i)]), dq.push_back(doc[static_cast<std::size_t>(i)]);
  for (const auto j : keys)
    pk.push_back(pos[static_cast<std::size_t>(j)]), dk.push_back(doc[static_cast<std::size_t>(j)]);
  const kernels::AttentionDims d{1, tq, T, hq, hkv, D};
  const kernels::AttentionMask m{pq.data(), dq.data(), pk.data(), dk.data()};
  const auto q = filled(static_cast<std::size_t>(tq * hq * D), 1), k = filled(static_cast<std::size_t>(T * hkv * D), 2),
             v = filled(static_cast<std::size_t>(T * hkv * D), 3),
             dout = filled(static_cast<std::size_t>(tq * hq * D), 4);
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(hq * tq)), gq(q.size()), gk(k.size()), gv(v.size());
  return median_seconds(reps, [&] {
    kernels::attention_forward<float>(d, m, q.data(), k.data(), v.data(), out.data(), lse.data());
    kernels::attention_backward<float>(d, m, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                                       gq.data(), gk.data(), gv.data());
  });
}

}  // namespace

int main(int argc, char** argv) {
  herd::kernels::settle_library_env(argv);  // the OpenMP wait and OpenBLAS kernels herd itself runs with
  std::string out_path;
  std::int64_t T = 4096;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--out") out_path = argv[i + 1];
    if (a == "--seq") T = std::atoll(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
  }
  const std::int64_t hq = 8, hkv = 2, D = 64;  // the small preset's attention shape
  Json doc = bench::envelope("cp_load_balance");
  doc["config"] = {{"seq_len", T},   {"q_heads", hq}, {"kv_heads", hkv},
                   {"head_dim", D},  {"reps", reps},  {"clock", g_cpu_clock ? "process_cpu" : "wall"},
                   {"dtype", "fp32"}};
  for (const std::string mask : {"causal", "documents", "short_documents"}) {
    std::vector<std::int32_t> pos, dm;
    make_mask(T, mask, pos, dm);
    for (const std::int64_t cp : {2, 4, 8}) {
      for (const SplitKind kind : {SplitKind::kLoadBalanced, SplitKind::kContiguous}) {
        std::vector<double> pairs, secs;
        for (std::int64_t r = 0; r < cp; ++r) {
          pairs.push_back(static_cast<double>(visible_pairs(kind, T, cp, r, pos.data(), dm.data())));
          secs.push_back(rank_seconds(kind, T, cp, r, pos, dm, hq, hkv, D, reps));
        }
        Json row = {{"section", "balance"},
                    {"mask", mask},
                    {"cp", cp},
                    {"split", split_name(kind)},
                    {"pairs", pairs},
                    {"seconds", secs},
                    {"pairs_max_over_mean", max_over_mean(pairs)},
                    {"time_max_over_mean", max_over_mean(secs)}};
        std::fprintf(stderr, "%-15s cp=%-2lld %-13s pairs max/mean %.3f  time max/mean %.3f\n", mask.c_str(),
                     static_cast<long long>(cp), split_name(kind), max_over_mean(pairs), max_over_mean(secs));
        doc["results"].push_back(row);
      }
    }
  }
  // One document layout is one sample: the pair-count imbalance over many seeded layouts (exact counts, no timing).
  const int n_layouts = 64;
  for (const std::string mask : {"documents", "short_documents"}) {
    for (const std::int64_t cp : {2, 4, 8}) {
      for (const SplitKind kind : {SplitKind::kLoadBalanced, SplitKind::kContiguous}) {
        double sum = 0, worst = 0;
        for (int seed = 0; seed < n_layouts; ++seed) {
          std::vector<std::int32_t> pos, dm;
          make_mask(T, mask, pos, dm, static_cast<std::uint32_t>(1000 + seed));
          std::vector<double> pairs;
          for (std::int64_t r = 0; r < cp; ++r)
            pairs.push_back(static_cast<double>(visible_pairs(kind, T, cp, r, pos.data(), dm.data())));
          sum += max_over_mean(pairs);
          worst = std::max(worst, max_over_mean(pairs));
        }
        doc["results"].push_back({{"section", "layouts"},
                                  {"mask", mask},
                                  {"cp", cp},
                                  {"split", split_name(kind)},
                                  {"layouts", n_layouts},
                                  {"pairs_max_over_mean_avg", sum / n_layouts},
                                  {"pairs_max_over_mean_worst", worst}});
        std::fprintf(stderr, "%-15s cp=%-2lld %-13s over %d layouts: pairs max/mean avg %.3f worst %.3f\n",
                     mask.c_str(), static_cast<long long>(cp), split_name(kind), n_layouts, sum / n_layouts, worst);
      }
    }
  }
  // Per-layer K/V all-gather bytes against the local Q, Llama 3 models at 128K tokens under TP = 8.
  const std::int64_t tp = 8, long_seq = 131072;
  for (const std::string name : {"llama3-8b", "llama3-70b", "llama3-405b"}) {
    const auto cfg = model::preset(name);
    if (!cfg.ok()) continue;
    for (const std::int64_t cp : {2, 4, 8, 16}) {
      const CpSplit s{long_seq, cp, 0};
      const kernels::AttentionDims d{
          1, s.local_len(), 0, cfg->n_heads / tp, std::max<std::int64_t>(1, cfg->n_kv_heads / tp), cfg->head_dim};
      const CpCommVolume vol = cp_comm_volume(s, d);
      const std::int64_t bytes = 2;  // bf16
      doc["results"].push_back({{"section", "volume"},
                                {"model", name},
                                {"tp", tp},
                                {"cp", cp},
                                {"seq_len", long_seq},
                                {"local_q_heads", d.q_heads},
                                {"local_kv_heads", d.kv_heads},
                                {"kv_send_bytes", vol.kv_send * bytes},
                                {"q_local_bytes", vol.q_local * bytes},
                                {"kv_received_bytes_per_gather", (cp - 1) * vol.kv_send * bytes},
                                {"kv_over_q", static_cast<double>(vol.kv_send) / static_cast<double>(vol.q_local)}});
    }
  }
  bench::write_result(doc, out_path);
  return 0;
}

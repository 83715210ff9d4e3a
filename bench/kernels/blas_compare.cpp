// Compares the Debian BLAS candidates on this CPU: OpenBLAS (pthreads), oneDNN (OpenMP) and BLIS
// (OpenMP, and the pthread build when installed), SGEMM and DGEMM on the small model's GEMM shapes
// plus a large square, at 1 and 2 threads; median of several runs. Writes JSON (docs/blas.md).
//
//   herd_bench_blas_compare [--out file.json] [--reps N] [--threads 1,2]
//
// Each (library, threads) runs in a forked child that sets the libraries' thread variables before
// dlopen, measures, and sends its JSON back through a pipe; the parent merges. oneDNN has no DGEMM.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/kernels/library_env.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  char ta, tb;  // 'N' or 'T', row-major op(A) (m, k), op(B) (k, n)
  int m, n, k;
};

// The small preset (dim 512, FFN 1536, 8 heads / 2 KV heads of 64, vocab 8192), 8 x 512 tokens.
// Linear weights are (out, in): forward Y = X W^T (NT), dX = dY W (NN), dW = dY^T X (TN).
const Shape kShapes[] = {
    {"qkv_fwd 4096x768x512", 'N', 'T', 4096, 768, 512},
    {"gate_up_fwd 4096x3072x512", 'N', 'T', 4096, 3072, 512},
    {"down_fwd 4096x512x1536", 'N', 'T', 4096, 512, 1536},
    {"down_dx 4096x1536x512", 'N', 'N', 4096, 1536, 512},
    {"gate_up_dw 3072x512x4096", 'T', 'N', 3072, 512, 4096},
    {"lm_head_tile 128x8192x512", 'N', 'T', 128, 8192, 512},
    {"square 2048", 'N', 'N', 2048, 2048, 2048},
};

struct Lib {
  std::string name, path;
  bool dnnl;
};

using SgemmCblas = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DgemmCblas = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                            double*, int);
using SgemmDnnl = int (*)(char, char, long, long, long, float, const float*, long, const float*, long, float, float*,
                          long);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Median GFLOP/s by wall clock and by process CPU time. The machine is shared: with one thread the CPU
// time is what the library needs of a core (stable under contention, cache sharing aside); with two
// it adds both threads (spinning included), so GFLOP per CPU-second is a per-core efficiency.
struct Rate {
  double wall, cpu;
};

template <typename T, typename F>
Rate median_gflops(const Shape& s, int reps, F call) {
  const std::size_t a_sz = std::size_t(s.m) * s.k, b_sz = std::size_t(s.k) * s.n, c_sz = std::size_t(s.m) * s.n;
  std::vector<T> a(a_sz, T(0.5)), b(b_sz, T(0.25)), c(c_sz, T(0));
  for (std::size_t i = 0; i < a_sz; ++i) a[i] = T((i % 17) * 0.01);
  const int lda = s.ta == 'N' ? s.k : s.m, ldb = s.tb == 'N' ? s.n : s.k;
  call(a.data(), lda, b.data(), ldb, c.data());  // warm-up (thread pools, packing buffers)
  std::vector<double> g, gc;
  const double flop = 2.0 * s.m * s.n * s.k;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    call(a.data(), lda, b.data(), ldb, c.data());
    gc.push_back(flop / (process_cpu_seconds() - c0) * 1e-9);
    g.push_back(flop / std::chrono::duration<double>(Clock::now() - t0).count() * 1e-9);
  }
  std::sort(g.begin(), g.end());
  std::sort(gc.begin(), gc.end());
  return {g[g.size() / 2], gc[gc.size() / 2]};
}

herd::Json measure(const Lib& lib, int threads, int reps) {
  herd::Json out = herd::Json::array();
  const std::string t = std::to_string(threads);
  setenv("OMP_NUM_THREADS", t.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", t.c_str(), 1);
  setenv("BLIS_NUM_THREADS", t.c_str(), 1);
  void* h = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return out;
  auto sg = reinterpret_cast<SgemmCblas>(dlsym(h, "cblas_sgemm"));
  auto dg = reinterpret_cast<DgemmCblas>(dlsym(h, "cblas_dgemm"));
  auto sd = reinterpret_cast<SgemmDnnl>(dlsym(h, "dnnl_sgemm"));
  for (const Shape& s : kShapes) {
    const int ta = s.ta == 'N' ? kNoTrans : kTrans, tb = s.tb == 'N' ? kNoTrans : kTrans;
    herd::Json row{{"library", lib.name}, {"threads", threads}, {"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}};
    Rate sr{}, dr{};
    if (lib.dnnl) {
      sr = median_gflops<float>(s, reps, [&](const float* a, int lda, const float* b, int ldb, float* c) {
        sd(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, s.n);
      });
    } else {
      sr = median_gflops<float>(s, reps, [&](const float* a, int lda, const float* b, int ldb, float* c) {
        sg(kRowMajor, ta, tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, s.n);
      });
      dr = median_gflops<double>(s, reps, [&](const double* a, int lda, const double* b, int ldb, double* c) {
        dg(kRowMajor, ta, tb, s.m, s.n, s.k, 1.0, a, lda, b, ldb, 0.0, c, s.n);
      });
    }
    row["sgemm_gflops"] = sr.wall;
    row["sgemm_gflops_per_cpu_s"] = sr.cpu;
    if (!lib.dnnl) {
      row["dgemm_gflops"] = dr.wall;
      row["dgemm_gflops_per_cpu_s"] = dr.cpu;
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  herd::kernels::settle_library_env(argv);  // the OpenMP wait and OpenBLAS kernels herd itself runs with
  std::string out_path;
  int reps = 7;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--out") out_path = argv[i + 1];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--threads") {
      thread_counts.clear();
      for (const char* p = argv[i + 1]; *p;) {
        thread_counts.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    }
  }
  const std::string dir = "/usr/lib/x86_64-linux-gnu/";
  const std::vector<Lib> libs = {{"openblas-pthread", dir + "openblas-pthread/libopenblas.so.0", false},
                                 {"onednn-omp", dir + "libdnnl.so.2", true},
                                 {"blis-openmp", dir + "blis-openmp/libblis.so.4", false},
                                 {"blis-pthread", dir + "blis-pthread/libblis.so.4", false}};
  herd::Json doc = herd::bench::envelope("blas_compare");
  doc["reps"] = reps;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {  // how shared the machine was when the run began
    char buf[128] = {0};
    if (std::fgets(buf, sizeof buf, f)) doc["loadavg_at_start"] = std::string(buf, std::strlen(buf) - 1);
    std::fclose(f);
  }
  for (const Lib& lib : libs) {
    if (access(lib.path.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "skip %s: %s not installed\n", lib.name.c_str(), lib.path.c_str());
      continue;
    }
    for (int threads : thread_counts) {
      int fd[2];
      if (pipe(fd) != 0) return 1;
      const pid_t pid = fork();
      if (pid == 0) {
        close(fd[0]);
        const std::string s = measure(lib, threads, reps).dump();
        if (write(fd[1], s.data(), s.size()) < 0) _exit(1);
        _exit(0);
      }
      close(fd[1]);
      std::string text;
      char buf[4096];
      for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
      close(fd[0]);
      waitpid(pid, nullptr, 0);
      if (text.empty()) continue;
      for (const auto& row : herd::Json::parse(text)) {
        std::fprintf(stderr, "%-17s %d thr  %-28s sgemm %6.1f (cpu %6.1f)  dgemm %6.1f (cpu %6.1f) GFLOP/s\n",
                     lib.name.c_str(), threads, row["shape"].get<std::string>().c_str(),
                     row["sgemm_gflops"].get<double>(), row["sgemm_gflops_per_cpu_s"].get<double>(),
                     row.value("dgemm_gflops", 0.0), row.value("dgemm_gflops_per_cpu_s", 0.0));
        doc["results"].push_back(row);
      }
    }
  }
  herd::bench::write_result(doc, out_path);
  return 0;
}

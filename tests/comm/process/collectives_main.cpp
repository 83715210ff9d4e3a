// The tests of the backends that run one rank per process (tests/comm/process/CMakeLists.txt): mpi, run
// by mpirun with 2 and 4 ranks, and gloo (--backend=gloo), started by spawn_ranks.sh with torchrun's
// variables.
//
// Each rank runs every test; data with a closed-form result checks every collective in both modes
// (deterministic: herd's point-to-point algorithms; native: MPI's collectives, and on gloo the same
// algorithms again), and the deterministic mode must match the sequential rank-order sum bit for bit,
// as the local backend does. With --fault=stall or --fault=die the program instead plays a hung or
// dying rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "herd/comm/reduce.h"
#include "herd/comm/world.h"
#include "herd/core/launch_env.h"
#include "herd/topology/parallel_dims.h"

namespace herd::comm {
namespace {

std::unique_ptr<Communicator> g_det, g_native;  // world communicators in the two modes
Backend g_backend = Backend::kMpi;

CommOptions options(bool deterministic, double timeout_s = 120) {
  CommOptions o;
  o.deterministic = deterministic;
  o.timeout_s = timeout_s;
  return o;
}

void expect_ok(const Status& s) { ASSERT_TRUE(s.ok()) << s.error().message(); }

// This process's world on the backend under test; gloo's ranks meet in the temp dir under the job key
// spawn_ranks.sh's variables give.
Result<std::unique_ptr<Communicator>> make_world(const CommOptions& o) {
  if (g_backend == Backend::kMpi) return make_mpi_world(o);
  HERD_ASSIGN_OR_RETURN(const LaunchEnv env, read_launch_env(process_environment()));
  std::error_code ec;
  const std::string dir = (std::filesystem::temp_directory_path(ec) / "herd-rendezvous").string();
  return make_gloo_world(o, Rendezvous{env.rank, env.world_size, dir, env.job_key, env.socket_iface});
}

class ProcessBoth : public ::testing::TestWithParam<bool> {
 protected:
  Communicator& comm() { return GetParam() ? *g_det : *g_native; }
};

template <typename T>
void all_reduce_sum(Communicator& c, std::size_t count) {
  const std::size_t n = c.size();
  std::vector<T> buf(count), out(count);
  for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<T>(c.rank() * count + i);
  expect_ok(c.all_reduce(buf.data(), out.data(), count, dtype_of<T>(), ReduceOp::kSum));
  expect_ok(c.all_reduce(buf.data(), count, dtype_of<T>(), ReduceOp::kSum));
  for (std::size_t i = 0; i < count; ++i) {
    const T want = static_cast<T>(count * n * (n - 1) / 2 + n * i);
    ASSERT_EQ(out[i], want) << "element " << i;
    ASSERT_EQ(buf[i], want) << "in-place element " << i;
  }
}

TEST_P(ProcessBoth, AllReduceSumEveryType) {
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
    all_reduce_sum<float>(comm(), count);
    all_reduce_sum<double>(comm(), count);
    all_reduce_sum<std::int32_t>(comm(), count);
    all_reduce_sum<std::int64_t>(comm(), count);
  }
}

TEST_P(ProcessBoth, MaxMin) {
  Communicator& c = comm();
  std::vector<double> mx(50), mn(50);
  for (int i = 0; i < 50; ++i) mx[i] = mn[i] = (i % c.size() == c.rank()) ? 100.0 + i : -1.0 * c.rank();
  expect_ok(c.all_reduce(mx.data(), 50, ReduceOp::kMax));
  expect_ok(c.all_reduce(mn.data(), 50, ReduceOp::kMin));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(mx[i], 100.0 + i);
    const double smallest = (i % c.size() == c.size() - 1) ? -(c.size() - 2.0) : -(c.size() - 1.0);
    EXPECT_EQ(mn[i], c.size() == 1 ? 100.0 + i : smallest);
  }
}

TEST_P(ProcessBoth, AllGatherReduceScatterBroadcastBarrier) {
  Communicator& c = comm();
  const int n = c.size();
  const std::size_t count = 513;
  std::vector<float> mine(count), all(n * count), inplace(n * count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(c.rank() * count + i);
  expect_ok(c.all_gather(mine.data(), all.data(), count, DType::kF32));
  std::copy(mine.begin(), mine.end(), inplace.begin() + c.rank() * count);
  expect_ok(c.all_gather(inplace.data() + c.rank() * count, inplace.data(), count, DType::kF32));
  for (std::size_t k = 0; k < n * count; ++k) {
    ASSERT_EQ(all[k], static_cast<float>(k));
    ASSERT_EQ(inplace[k], static_cast<float>(k));
  }
  std::vector<double> send(n * count), out(count);
  for (std::size_t i = 0; i < n * count; ++i) send[i] = static_cast<double>(c.rank() * n * count + i);
  expect_ok(c.reduce_scatter(send.data(), out.data(), count, DType::kF64, ReduceOp::kSum));
  expect_ok(c.reduce_scatter(send.data(), send.data() + c.rank() * count, count, DType::kF64, ReduceOp::kSum));
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t g = c.rank() * count + i;
    const double want = static_cast<double>(n * count * n * (n - 1) / 2 + n * g);
    ASSERT_EQ(out[i], want);
    ASSERT_EQ(send[g], want);
  }
  for (int root = 0; root < n; ++root) {
    std::vector<std::int64_t> b(100, -1);
    if (c.rank() == root) {
      for (int i = 0; i < 100; ++i) b[i] = root * 1000 + i;
    }
    expect_ok(c.broadcast(b.data(), 100, DType::kI64, root));
    for (int i = 0; i < 100; ++i) ASSERT_EQ(b[i], root * 1000 + i);
  }
  expect_ok(c.barrier());
}

INSTANTIATE_TEST_SUITE_P(Modes, ProcessBoth, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "deterministic" : "native"; });

TEST(ProcessDeterminism, MatchesTheRankOrderSumBitForBit) {
  Communicator& c = *g_det;
  const int n = c.size();
  const std::size_t count = 4096;
  std::vector<std::vector<double>> in(n, std::vector<double>(count));
  for (int r = 0; r < n; ++r) {
    std::mt19937_64 gen(99 + r);
    std::uniform_real_distribution<double> m(-1, 1);
    std::uniform_int_distribution<int> e(-30, 30);
    for (double& x : in[r]) x = std::ldexp(m(gen), e(gen));
  }
  std::vector<double> ref(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<double> col(n);
    for (int r = 0; r < n; ++r) col[r] = in[r][i];
    ref[i] = reduce_reference(ReduceOp::kSum, col.data(), n);
  }
  std::vector<double> v = in[c.rank()];
  expect_ok(c.all_reduce(v.data(), count, ReduceOp::kSum));
  EXPECT_EQ(std::memcmp(v.data(), ref.data(), count * sizeof(double)), 0);
  std::vector<double> rs(count / n);
  expect_ok(c.reduce_scatter(in[c.rank()].data(), rs.data(), count / n, DType::kF64, ReduceOp::kSum));
  EXPECT_EQ(std::memcmp(rs.data(), ref.data() + c.rank() * (count / n), (count / n) * sizeof(double)), 0);
}

TEST(ProcessGroups, MeshGroupsPointToPointAndAsync) {
  Communicator& world = *g_det;
  const int n = world.size();
  const auto dims = *topology::ParallelDims::make(2, 1, 1, n / 2);
  auto tp = world.new_group(dims, {topology::Dim::kTP});
  auto dp = world.new_group(dims, {topology::Dim::kDP});
  ASSERT_TRUE(tp.ok() && dp.ok());
  EXPECT_EQ((*tp)->rank(), world.rank() % 2);
  std::int64_t a = std::int64_t{1} << world.rank(), b = a;
  std::vector<Handle> hs;
  hs.push_back((*dp)->iall_reduce(&b, &b, 1, DType::kI64, ReduceOp::kSum));
  hs.push_back((*tp)->iall_reduce(&a, &a, 1, DType::kI64, ReduceOp::kSum));
  // Pipeline-style ring on the world: receives posted first, tags per direction.
  const int next = (world.rank() + 1) % n, prev = (world.rank() + n - 1) % n;
  std::vector<float> fwd(64), bwd(64), out_f(64, world.rank() + 0.5f), out_b(64, -world.rank() - 0.5f);
  hs.push_back(world.irecv(bwd.data(), 64, DType::kF32, next, 1));
  hs.push_back(world.irecv(fwd.data(), 64, DType::kF32, prev, 0));
  hs.push_back(world.isend(out_f.data(), 64, DType::kF32, next, 0));
  hs.push_back(world.isend(out_b.data(), 64, DType::kF32, prev, 1));
  for (int k = static_cast<int>(hs.size()) - 1; k >= 0; --k) expect_ok(hs[k].wait());
  std::int64_t want_tp = 0, want_dp = 0;
  for (auto r : dims.group(world.rank(), topology::Dim::kTP)) want_tp += std::int64_t{1} << r;
  for (auto r : dims.group(world.rank(), topology::Dim::kDP)) want_dp += std::int64_t{1} << r;
  EXPECT_EQ(a, want_tp);
  EXPECT_EQ(b, want_dp);
  EXPECT_EQ(fwd[5], prev + 0.5f);
  EXPECT_EQ(bwd[5], -next - 0.5f);
  // Bad input is an error value, as on the local backend.
  float x = 0;
  const Status s = world.send(&x, 1, DType::kF32, world.rank(), 0);
  EXPECT_FALSE(s.ok());
  // The flight recorder saw the p2p ops of this test with their peers and tags.
  const auto entries = world.recorder().entries();
  int p2p = 0;
  for (const auto& e : entries)
    p2p += (e.op == OpKind::kSend || e.op == OpKind::kRecv) && e.state == OpState::kCompleted;
  EXPECT_GE(p2p, 4);
}

// --fault=stall: rank 1 sleeps before the second all-reduce; the others time out naming it.
// --fault=die: rank 1 exits mid-job; mpirun must end the job (gloo: the others' all-reduce fails naming
// the lost connection) rather than leave rank 0 waiting.
int run_fault(const std::string& mode) {
  auto world = make_world(options(true, mode == "stall" ? 3.0 : 60.0));
  if (!world.ok()) return 2;
  Communicator& c = **world;
  std::vector<double> v(1000, 1.0);
  if (!c.all_reduce(v.data(), v.size(), ReduceOp::kSum).ok()) return 2;
  if (c.rank() == 1) {
    if (mode == "die") _exit(7);
    // Past the others' 3 s timeout: mpirun aborts the job first; gloo's peers exit and this rank's
    // all-reduce then fails on the closed connection.
    std::this_thread::sleep_for(std::chrono::seconds(g_backend == Backend::kMpi ? 30 : 5));
  }
  const Status s = c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
  if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.error().message().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace herd::comm

int main(int argc, char** argv) {
  std::string fault;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--backend=gloo") herd::comm::g_backend = herd::comm::Backend::kGloo;
    if (arg.rfind("--fault=", 0) == 0) fault = arg.substr(8);
  }
  if (!fault.empty()) return herd::comm::run_fault(fault);
  ::testing::InitGoogleTest(&argc, argv);
  auto det = herd::comm::make_world(herd::comm::options(true));
  if (!det.ok()) {
    std::fprintf(stderr, "%s\n", det.error().message().c_str());
    return 2;
  }
  auto native = herd::comm::make_world(herd::comm::options(false));
  if (!native.ok()) return 2;
  herd::comm::g_det = std::move(*det);
  herd::comm::g_native = std::move(*native);
  int failed = RUN_ALL_TESTS();
  // Every rank agrees on the outcome, so mpirun's exit status reflects a failure on any rank.
  herd::comm::g_det->all_reduce(&failed, 1, herd::comm::ReduceOp::kMax).ok();
  herd::comm::g_det.reset();
  herd::comm::g_native.reset();
  return failed;
}

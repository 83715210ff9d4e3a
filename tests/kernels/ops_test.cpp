// kernels/ops.h through ops_for(Device::kCpu): every method of the interface against the CPU function
// of the same name called directly on the same inputs (the same bits: the interface changes no number),
// a few against the naive reference as well, and the memory methods and Buffer against plain loops.
#include "herd/kernels/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "herd/kernels/convert.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/embedding.h"
#include "herd/kernels/reference.h"
#include "herd/kernels/swiglu.h"
#include "herd/tensor/arena.h"
#include "test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;

const Ops& cpu() { return ops_for(Device::kCpu); }

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what;
}

std::vector<bf16> random_bf16(std::int64_t n, std::uint32_t seed) {
  const std::vector<float> f = random_vec<float>(n, seed);
  std::vector<bf16> out(f.size());
  kernels::to_bf16(f.data(), n, out.data());
  return out;
}

void expect_same_loss(const CrossEntropyLoss& a, const CrossEntropyLoss& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-12 * std::max(1.0, std::abs(b.loss_sum)));
}

TEST(Ops, CpuIsAlwaysThere) {
  EXPECT_TRUE(has_ops(Device::kCpu));
  EXPECT_EQ(cpu().device(), Device::kCpu);
  EXPECT_EQ(&cpu(), &cpu_ops());
}

TEST(Ops, BufferOwnsAlignedMemoryOfItsDevice) {
  Buffer empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.device(), Device::kCpu);
  Buffer b = zeroed_array<double>(cpu(), 1000);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.bytes(), 8000u);
  EXPECT_EQ(b.device(), Device::kCpu);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b.as<double>()[i], 0.0) << i;
  void* p = b.data();
  Buffer moved = std::move(b);
  EXPECT_EQ(moved.data(), p);
  EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move): the moved-from buffer is empty
  moved = array_of<float>(cpu(), 3);
  EXPECT_EQ(moved.bytes(), 12u);
  moved.reset();
  EXPECT_FALSE(moved);
}

TEST(Ops, HostCopiesCopiesFillsAndSums) {
  const std::int64_t n = 3000;
  const std::vector<float> host = random_vec<float>(n, 1);
  Buffer dev = array_of<float>(cpu(), n);
  cpu().copy_from_host(host.data(), dev.data(), sizeof(float) * n);
  std::vector<float> back(n);
  cpu().copy_to_host(dev.data(), back.data(), sizeof(float) * n);
  expect_same_bits(back, host, "host round trip");

  std::vector<float> copied(n, 7.0f);
  cpu().copy(host.data(), copied.data(), sizeof(float) * n);
  expect_same_bits(copied, host, "copy");
  cpu().zero(copied.data() + 1, sizeof(float) * (n - 2));
  EXPECT_EQ(copied[0], host[0]);
  EXPECT_EQ(copied[n - 1], host[n - 1]);
  for (std::int64_t i = 1; i + 1 < n; ++i) ASSERT_EQ(copied[i], 0.0f) << i;

  // y += x, each sum rounded once, as the loop it stands for.
  for (const std::int64_t len : {std::int64_t{0}, std::int64_t{1}, std::int64_t{17}, n}) {
    std::vector<float> y = random_vec<float>(n, 2), want = y;
    cpu().add(host.data(), len, y.data());
    for (std::int64_t i = 0; i < len; ++i) want[i] += host[i];
    expect_same_bits(y, want, "add<float>");
  }
  const std::vector<double> xd = random_vec<double>(n, 3);
  std::vector<double> yd = random_vec<double>(n, 4), wantd = yd;
  cpu().add(xd.data(), n, yd.data());
  for (std::int64_t i = 0; i < n; ++i) wantd[i] += xd[i];
  expect_same_bits(yd, wantd, "add<double>");
}

TEST(Ops, CopyRowsHonoursBothPitches) {
  // 5 rows of 3 ints from a 7-wide source to a 4-wide destination; the other elements stay.
  std::vector<std::int32_t> src(5 * 7), dst(5 * 4, -1);
  std::iota(src.begin(), src.end(), 0);
  cpu().copy_rows(src.data() + 2, 7 * sizeof(std::int32_t), dst.data() + 1, 4 * sizeof(std::int32_t),
                  3 * sizeof(std::int32_t), 5);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(dst[r * 4], -1) << r;
    for (int c = 0; c < 3; ++c) EXPECT_EQ(dst[r * 4 + 1 + c], src[r * 7 + 2 + c]) << r << "," << c;
  }
  cpu().copy_rows(src.data(), 0, dst.data(), 0, 0, 0);  // no rows: nothing happens
}

TEST(Ops, ArenaOverAnOpsBuffer) {
  Buffer block(cpu(), 4096);
  tensor::Arena arena(block.data(), block.bytes());
  EXPECT_EQ(arena.capacity(), 4096u);
  auto* a = arena.allocate_array<float>(10, "a");
  auto* b = arena.allocate_array<float>(10, "b");
  EXPECT_EQ(static_cast<void*>(a), block.data());
  EXPECT_EQ(reinterpret_cast<char*>(b) - reinterpret_cast<char*>(a), 64);
  EXPECT_EQ(arena.used(), 128u);
}

TEST(Ops, Conversions) {
  const std::int64_t n = 1001;
  const std::vector<float> x = random_vec<float>(n, 5, -100, 100);
  std::vector<bf16> a(n), b(n);
  kernels::to_bf16(x.data(), n, a.data());
  cpu().to_bf16(x.data(), n, b.data());
  expect_same_bits(a, b, "to_bf16");
  std::vector<float> fa(n), fb(n);
  kernels::to_float(a.data(), n, fa.data());
  cpu().to_float(a.data(), n, fb.data());
  expect_same_bits(fa, fb, "to_float");
  std::vector<float> ra = x, rb = x;
  kernels::round_to_bf16(ra.data(), n, a.data());
  cpu().round_to_bf16(rb.data(), n, b.data());
  expect_same_bits(ra, rb, "round_to_bf16 values");
  expect_same_bits(a, b, "round_to_bf16 copy");
}

template <typename T>
void gemm_case() {
  const std::int64_t m = 13, n = 11, k = 17;
  const std::vector<T> a = random_vec<T>(k * m, 6), b = random_vec<T>(n * k, 7), c0 = random_vec<T>(m * n, 8);
  std::vector<T> direct = c0, via = c0, ref = c0;
  // C = 0.5 A^T B^T + 1 C: both transposes, beta accumulating.
  kernels::gemm<T>(Trans::kYes, Trans::kYes, m, n, k, T(0.5), a.data(), m, b.data(), k, T(1), direct.data(), n);
  cpu().gemm(Trans::kYes, Trans::kYes, m, n, k, T(0.5), a.data(), m, b.data(), k, T(1), via.data(), n);
  expect_same_bits(via, direct, "gemm");
  gemm_reference<T>(Trans::kYes, Trans::kYes, m, n, k, T(0.5), a.data(), m, b.data(), k, T(1), ref.data(), n);
  EXPECT_LT(testing::rel_error(via, ref), sizeof(T) == 4 ? 1e-5 : 1e-13);
}

TEST(Ops, Gemm) {
  gemm_case<float>();
  gemm_case<double>();
  const std::int64_t m = 9, n = 10, k = 33;
  const std::vector<bf16> a = random_bf16(m * k, 9), b = random_bf16(n * k, 10);
  const std::vector<float> c0 = random_vec<float>(m * n, 11);
  std::vector<float> direct = c0, via = c0;
  kernels::gemm_bf16(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 1.0f, direct.data(), n);
  cpu().gemm_bf16(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 1.0f, via.data(), n);
  expect_same_bits(via, direct, "gemm_bf16");
  std::vector<bf16> rd(m * n), rv(m * n);
  kernels::gemm_bf16_rounded(Trans::kNo, Trans::kYes, m, n, k, a.data(), k, b.data(), k, rd.data(), n);
  cpu().gemm_bf16_rounded(Trans::kNo, Trans::kYes, m, n, k, a.data(), k, b.data(), k, rv.data(), n);
  expect_same_bits(rv, rd, "gemm_bf16_rounded");
}

struct AttnProblem {
  AttentionDims d;
  std::vector<std::int32_t> pos, doc;
  AttentionMask mask() const { return {pos.data(), doc.data(), pos.data(), doc.data()}; }
  AttnProblem() {
    d.batch = 2;
    d.tq = d.tk = 24;
    d.q_heads = 4;
    d.kv_heads = 2;
    d.head_dim = 16;
    for (std::int64_t b = 0; b < d.batch; ++b) {
      for (std::int32_t t = 0; t < d.tq; ++t) {  // two documents in the second sequence
        const bool second = b == 1 && t >= 10;
        pos.push_back(second ? t - 10 : t);
        doc.push_back(second ? 1 : 0);
      }
    }
  }
  std::int64_t q_elems() const { return d.batch * d.tq * d.q_heads * d.head_dim; }
  std::int64_t kv_elems() const { return d.batch * d.tk * d.kv_heads * d.head_dim; }
  std::int64_t lse_elems() const { return d.batch * d.q_heads * d.tq; }
};

template <typename T>
void attention_case() {
  const AttnProblem p;
  const std::vector<T> q = random_vec<T>(p.q_elems(), 12), k = random_vec<T>(p.kv_elems(), 13),
                       v = random_vec<T>(p.kv_elems(), 14), dout = random_vec<T>(p.q_elems(), 15);
  std::vector<T> out_d(p.q_elems()), lse_d(p.lse_elems()), out_v(p.q_elems()), lse_v(p.lse_elems());
  kernels::attention_forward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), out_d.data(), lse_d.data());
  cpu().attention_forward(p.d, p.mask(), q.data(), k.data(), v.data(), out_v.data(), lse_v.data());
  expect_same_bits(out_v, out_d, "attention out");
  expect_same_bits(lse_v, lse_d, "attention lse");
  std::vector<T> ref_out(p.q_elems()), ref_lse(p.lse_elems());
  ref::attention_forward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), ref_out.data(), ref_lse.data());
  EXPECT_LT(testing::rel_error(out_v, ref_out), sizeof(T) == 4 ? 1e-5 : 1e-12);

  std::vector<T> dq_d(p.q_elems()), dk_d(p.kv_elems()), dv_d(p.kv_elems());
  std::vector<T> dq_v(p.q_elems()), dk_v(p.kv_elems()), dv_v(p.kv_elems());
  kernels::attention_backward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), out_d.data(), lse_d.data(), dout.data(),
                                 dq_d.data(), dk_d.data(), dv_d.data());
  cpu().attention_backward(p.d, p.mask(), q.data(), k.data(), v.data(), out_d.data(), lse_d.data(), dout.data(),
                           dq_v.data(), dk_v.data(), dv_v.data());
  expect_same_bits(dq_v, dq_d, "attention dq");
  expect_same_bits(dk_v, dk_d, "attention dk");
  expect_same_bits(dv_v, dv_d, "attention dv");
}

TEST(Ops, Attention) {
  attention_case<float>();
  attention_case<double>();
  const AttnProblem p;
  const std::vector<bf16> q = random_bf16(p.q_elems(), 16), k = random_bf16(p.kv_elems(), 17),
                          v = random_bf16(p.kv_elems(), 18);
  std::vector<float> out_d(p.q_elems()), lse_d(p.lse_elems()), out_v(p.q_elems()), lse_v(p.lse_elems());
  kernels::attention_forward(p.d, p.mask(), q.data(), k.data(), v.data(), out_d.data(), lse_d.data());
  cpu().attention_forward(p.d, p.mask(), q.data(), k.data(), v.data(), out_v.data(), lse_v.data());
  expect_same_bits(out_v, out_d, "bf16 attention out");
  expect_same_bits(lse_v, lse_d, "bf16 attention lse");
  std::vector<bf16> out16(p.q_elems());
  kernels::to_bf16(out_d.data(), p.q_elems(), out16.data());
  const std::vector<float> dout = random_vec<float>(p.q_elems(), 19);
  std::vector<float> dq_d(p.q_elems()), dk_d(p.kv_elems()), dv_d(p.kv_elems());
  std::vector<float> dq_v(p.q_elems()), dk_v(p.kv_elems()), dv_v(p.kv_elems());
  kernels::attention_backward(p.d, p.mask(), q.data(), k.data(), v.data(), out16.data(), lse_d.data(), dout.data(),
                              dq_d.data(), dk_d.data(), dv_d.data());
  cpu().attention_backward(p.d, p.mask(), q.data(), k.data(), v.data(), out16.data(), lse_d.data(), dout.data(),
                           dq_v.data(), dk_v.data(), dv_v.data());
  expect_same_bits(dq_v, dq_d, "bf16 attention dq");
  expect_same_bits(dk_v, dk_d, "bf16 attention dk");
  expect_same_bits(dv_v, dv_d, "bf16 attention dv");
}

template <typename T>
void rmsnorm_case() {
  const std::int64_t n = 7, dim = 40, ld = 48;
  const std::vector<T> x = random_vec<T>(n * ld, 20), w = random_vec<T>(dim, 21), dy = random_vec<T>(n * ld, 22);
  std::vector<T> y_d(n * ld), y_v(n * ld), r_d(n), r_v(n);
  kernels::rmsnorm_forward<T>(x.data(), ld, w.data(), n, dim, 1e-5, y_d.data(), ld, r_d.data());
  cpu().rmsnorm_forward(x.data(), ld, w.data(), n, dim, 1e-5, y_v.data(), ld, r_v.data());
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(y_d.data() + i * ld, y_v.data() + i * ld, sizeof(T) * dim), 0) << i;
  }
  expect_same_bits(r_v, r_d, "rmsnorm rstd");
  for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
    std::vector<T> dx_d = random_vec<T>(n * ld, 23), dx_v = dx_d, dw_d = random_vec<T>(dim, 24), dw_v = dw_d;
    kernels::rmsnorm_backward<T>(dy.data(), ld, x.data(), ld, w.data(), r_d.data(), n, dim, dx_d.data(), ld, acc,
                                 dw_d.data());
    cpu().rmsnorm_backward(dy.data(), ld, x.data(), ld, w.data(), r_d.data(), n, dim, dx_v.data(), ld, acc,
                           dw_v.data());
    expect_same_bits(dx_v, dx_d, "rmsnorm dx");
    expect_same_bits(dw_v, dw_d, "rmsnorm dw");
  }
}

TEST(Ops, RmsNorm) {
  rmsnorm_case<float>();
  rmsnorm_case<double>();
  const std::int64_t n = 5, dim = 32;
  const std::vector<bf16> x = random_bf16(n * dim, 25);
  const std::vector<float> w = random_vec<float>(dim, 26), dy = random_vec<float>(n * dim, 27);
  std::vector<bf16> y_d(n * dim), y_v(n * dim);
  std::vector<float> r_d(n), r_v(n);
  kernels::rmsnorm_forward(x.data(), dim, w.data(), n, dim, 1e-6, y_d.data(), dim, r_d.data());
  cpu().rmsnorm_forward(x.data(), dim, w.data(), n, dim, 1e-6, y_v.data(), dim, r_v.data());
  expect_same_bits(y_v, y_d, "bf16 rmsnorm y");
  expect_same_bits(r_v, r_d, "bf16 rmsnorm rstd");
  std::vector<float> dx_d(n * dim), dx_v(n * dim), dw_d(dim, 0.5f), dw_v(dim, 0.5f);
  kernels::rmsnorm_backward(dy.data(), dim, x.data(), dim, w.data(), r_d.data(), n, dim, dx_d.data(), dim,
                            Accumulate::kOverwrite, dw_d.data());
  cpu().rmsnorm_backward(dy.data(), dim, x.data(), dim, w.data(), r_d.data(), n, dim, dx_v.data(), dim,
                         Accumulate::kOverwrite, dw_v.data());
  expect_same_bits(dx_v, dx_d, "bf16 rmsnorm dx");
  expect_same_bits(dw_v, dw_d, "bf16 rmsnorm dw");
}

template <typename T>
void rope_case() {
  RopeConfig cfg;
  cfg.head_dim = 16;
  const RopeTable<T> table(cfg, 64);
  const std::int64_t n = 9, heads = 3, ld = heads * cfg.head_dim + 8;
  std::vector<std::int32_t> pos(n);
  for (std::int64_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>((i * 7) % 64);
  const std::vector<T> x = random_vec<T>(n * ld, 28);
  std::vector<T> a = x, b = x;
  kernels::rope_forward<T>(table, pos.data(), n, heads, a.data(), ld);
  cpu().rope_forward(table, pos.data(), n, heads, b.data(), ld);
  expect_same_bits(b, a, "rope forward");
  kernels::rope_backward<T>(table, pos.data(), n, heads, a.data(), ld);
  cpu().rope_backward(table, pos.data(), n, heads, b.data(), ld);
  expect_same_bits(b, a, "rope backward");
  std::vector<T> ref = x;  // forward then backward is the identity up to rounding
  EXPECT_LT(testing::rel_error(b, ref), sizeof(T) == 4 ? 1e-6 : 1e-14);
}

TEST(Ops, Rope) {
  rope_case<float>();
  rope_case<double>();
  RopeConfig cfg;
  cfg.head_dim = 8;
  const RopeTable<float> table(cfg, 32);
  const std::int64_t n = 6, heads = 2, ld = heads * cfg.head_dim;
  std::vector<std::int32_t> pos = {0, 1, 5, 9, 30, 31};
  const std::vector<float> x = random_vec<float>(n * ld, 29);
  std::vector<bf16> a(n * ld), b(n * ld);
  kernels::rope_forward(table, pos.data(), n, heads, x.data(), ld, a.data());
  cpu().rope_forward(table, pos.data(), n, heads, x.data(), ld, b.data());
  expect_same_bits(b, a, "rope forward to bf16");
  kernels::rope_backward(table, pos.data(), n, heads, x.data(), ld, a.data());
  cpu().rope_backward(table, pos.data(), n, heads, x.data(), ld, b.data());
  expect_same_bits(b, a, "rope backward to bf16");
}

template <typename T>
void swiglu_case() {
  const std::int64_t n = 6, f = 20;
  const std::vector<T> gu = random_vec<T>(n * 2 * f, 30, -4, 4), dout = random_vec<T>(n * f, 31);
  std::vector<T> out_d(n * f), out_v(n * f), ref(n * f);
  kernels::swiglu_forward<T>(gu.data(), 2 * f, gu.data() + f, 2 * f, n, f, out_d.data(), f);
  cpu().swiglu_forward(gu.data(), 2 * f, gu.data() + f, 2 * f, n, f, out_v.data(), f);
  expect_same_bits(out_v, out_d, "swiglu out");
  std::vector<T> g(n * f), u(n * f);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < f; ++j) {
      g[i * f + j] = gu[i * 2 * f + j];
      u[i * f + j] = gu[i * 2 * f + f + j];
    }
  }
  ref::swiglu_forward<T>(g.data(), u.data(), n * f, ref.data());
  EXPECT_LT(testing::rel_error(out_v, ref), sizeof(T) == 4 ? 1e-6 : 1e-14);
  std::vector<T> d_d(n * 2 * f), d_v(n * 2 * f);
  kernels::swiglu_backward<T>(dout.data(), f, gu.data(), 2 * f, gu.data() + f, 2 * f, n, f, d_d.data(), 2 * f,
                              d_d.data() + f, 2 * f);
  cpu().swiglu_backward(dout.data(), f, gu.data(), 2 * f, gu.data() + f, 2 * f, n, f, d_v.data(), 2 * f, d_v.data() + f,
                        2 * f);
  expect_same_bits(d_v, d_d, "swiglu grads");
}

TEST(Ops, SwiGlu) {
  swiglu_case<float>();
  swiglu_case<double>();
  const std::int64_t n = 4, f = 24;
  const std::vector<bf16> g = random_bf16(n * f, 32), u = random_bf16(n * f, 33);
  const std::vector<float> dout = random_vec<float>(n * f, 34);
  std::vector<bf16> out_d(n * f), out_v(n * f);
  kernels::swiglu_forward(g.data(), f, u.data(), f, n, f, out_d.data(), f);
  cpu().swiglu_forward(g.data(), f, u.data(), f, n, f, out_v.data(), f);
  expect_same_bits(out_v, out_d, "bf16 swiglu out");
  std::vector<bf16> dg_d(n * f), du_d(n * f), dg_v(n * f), du_v(n * f);
  kernels::swiglu_backward(dout.data(), f, g.data(), f, u.data(), f, n, f, dg_d.data(), f, du_d.data(), f);
  cpu().swiglu_backward(dout.data(), f, g.data(), f, u.data(), f, n, f, dg_v.data(), f, du_v.data(), f);
  expect_same_bits(dg_v, dg_d, "bf16 swiglu dgate");
  expect_same_bits(du_v, du_d, "bf16 swiglu dup");
}

template <typename T>
void embedding_case() {
  const std::int64_t n = 8, dim = 12, begin = 4, rows = 6;
  const std::vector<std::int32_t> ids = {0, 4, 5, 9, 10, 4, 3, 7};  // some off the shard, one repeated
  const std::vector<T> table = random_vec<T>(rows * dim, 35), dout = random_vec<T>(n * dim, 36);
  std::vector<T> out_d(n * dim), out_v(n * dim);
  kernels::embedding_forward<T>(ids.data(), n, table.data(), begin, rows, dim, out_d.data());
  cpu().embedding_forward(ids.data(), n, table.data(), begin, rows, dim, out_v.data());
  expect_same_bits(out_v, out_d, "embedding forward");
  std::vector<T> dt_d = random_vec<T>(rows * dim, 37), dt_v = dt_d;
  kernels::embedding_backward<T>(ids.data(), n, dout.data(), begin, rows, dim, dt_d.data());
  cpu().embedding_backward(ids.data(), n, dout.data(), begin, rows, dim, dt_v.data());
  expect_same_bits(dt_v, dt_d, "embedding backward");
}

TEST(Ops, Embedding) {
  embedding_case<float>();
  embedding_case<double>();
  const std::vector<std::int32_t> ids = {1, 0, 3, 2};
  const std::vector<bf16> table = random_bf16(4 * 8, 38);
  std::vector<float> out_d(4 * 8), out_v(4 * 8);
  kernels::embedding_forward(ids.data(), 4, table.data(), 0, 4, 8, out_d.data());
  cpu().embedding_forward(ids.data(), 4, table.data(), 0, 4, 8, out_v.data());
  expect_same_bits(out_v, out_d, "bf16 embedding forward");
}

// h (n, dim), w (vocab, dim) in In, the stats and gradients at T; vocab split in two shards.
template <typename In, typename T>
void cross_entropy_case(const std::vector<In>& h, const std::vector<In>& w) {
  const std::int64_t n = 6, dim = 16, vocab = 20, half = vocab / 2;
  const std::vector<std::int32_t> targets = {3, kIgnoreIndex, 19, 0, 10, 9};
  const T scale = T(1) / T(5);
  // Per shard stats, shard-major, then combined.
  std::vector<T> stats_d(3 * 2 * n), stats_v(3 * 2 * n);
  for (int s = 0; s < 2; ++s) {
    T* d = stats_d.data();
    T* v = stats_v.data();
    const In* ws = w.data() + s * half * dim;
    kernels::ce_shard_stats(h.data(), n, dim, ws, s * half, half, targets.data(), d + s * n, d + (2 + s) * n,
                            d + (4 + s) * n);
    cpu().ce_shard_stats(h.data(), n, dim, ws, s * half, half, targets.data(), v + s * n, v + (2 + s) * n,
                         v + (4 + s) * n);
  }
  expect_same_bits(stats_v, stats_d, "ce_shard_stats");
  std::vector<T> lse_d(n), lse_v(n);
  const CrossEntropyLoss ld = kernels::ce_combine_stats<T>(n, 2, stats_d.data(), stats_d.data() + 2 * n,
                                                           stats_d.data() + 4 * n, targets.data(), lse_d.data());
  const CrossEntropyLoss lv = cpu().ce_combine_stats(n, 2, stats_v.data(), stats_v.data() + 2 * n,
                                                     stats_v.data() + 4 * n, targets.data(), lse_v.data());
  expect_same_loss(lv, ld);
  expect_same_bits(lse_v, lse_d, "ce_combine_stats lse");
  std::vector<T> dh_d(n * dim, T(0)), dh_v(n * dim, T(0)), dw_d(half * dim, T(0)), dw_v(half * dim, T(0));
  kernels::ce_shard_backward(h.data(), n, dim, w.data() + half * dim, half, half, targets.data(), lse_d.data(), scale,
                             dh_d.data(), dw_d.data());
  cpu().ce_shard_backward(h.data(), n, dim, w.data() + half * dim, half, half, targets.data(), lse_d.data(), scale,
                          dh_v.data(), dw_v.data());
  expect_same_bits(dh_v, dh_d, "ce_shard_backward dh");
  expect_same_bits(dw_v, dw_d, "ce_shard_backward dw");

  // The one-shard sweep.
  std::vector<T> fl_d(n), fl_v(n), fdh_d(n * dim, T(0)), fdh_v(n * dim, T(0)), fdw_d(vocab * dim, T(0)),
      fdw_v(vocab * dim, T(0));
  const CrossEntropyLoss fd = kernels::cross_entropy_forward_backward(h.data(), n, dim, w.data(), vocab, targets.data(),
                                                                      scale, fl_d.data(), fdh_d.data(), fdw_d.data());
  const CrossEntropyLoss fv = cpu().cross_entropy_forward_backward(h.data(), n, dim, w.data(), vocab, targets.data(),
                                                                   scale, fl_v.data(), fdh_v.data(), fdw_v.data());
  expect_same_loss(fv, fd);
  expect_same_bits(fl_v, fl_d, "cross_entropy_forward_backward lse");
  expect_same_bits(fdh_v, fdh_d, "cross_entropy_forward_backward dh");
  expect_same_bits(fdw_v, fdw_d, "cross_entropy_forward_backward dw");
  // The split and the sweep are the same loss.
  EXPECT_EQ(lv.count, 5);
  EXPECT_NEAR(lv.loss_sum, fv.loss_sum, 1e-4 * std::max(1.0, std::abs(fv.loss_sum)));
}

template <typename T>
void cross_entropy_forward_case() {
  const std::int64_t n = 6, dim = 16, vocab = 20;
  const std::vector<T> h = random_vec<T>(n * dim, 39), w = random_vec<T>(vocab * dim, 40);
  const std::vector<std::int32_t> targets = {3, kIgnoreIndex, 19, 0, 10, 9};
  std::vector<T> lse_d(n), lse_v(n);
  const CrossEntropyLoss d =
      kernels::cross_entropy_forward<T>(h.data(), n, dim, w.data(), vocab, targets.data(), lse_d.data());
  const CrossEntropyLoss v =
      cpu().cross_entropy_forward(h.data(), n, dim, w.data(), vocab, targets.data(), lse_v.data());
  expect_same_loss(v, d);
  expect_same_bits(lse_v, lse_d, "cross_entropy_forward lse");
  std::vector<T> ref_lse(n), ref_dh(n * dim, T(0)), ref_dw(vocab * dim, T(0));
  const CrossEntropyLoss ref = ref::cross_entropy<T>(h.data(), n, dim, w.data(), vocab, targets.data(), 1.0,
                                                     ref_lse.data(), ref_dh.data(), ref_dw.data());
  EXPECT_EQ(v.count, ref.count);
  EXPECT_NEAR(v.loss_sum, ref.loss_sum, 1e-4 * std::max(1.0, std::abs(ref.loss_sum)));
  cross_entropy_case<T, T>(h, w);
}

TEST(Ops, CrossEntropy) {
  cross_entropy_forward_case<float>();
  cross_entropy_forward_case<double>();
  cross_entropy_case<bf16, float>(random_bf16(6 * 16, 41), random_bf16(20 * 16, 42));
}

template <typename T>
void adamw_case() {
  const std::int64_t n = 777;
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  const std::vector<T> p0 = random_vec<T>(n, 43), g = random_vec<T>(n, 44);
  std::vector<T> p_d = p0, p_v = p0, m_d(n, T(0)), m_v(n, T(0)), v_d(n, T(0)), v_v(n, T(0));
  for (std::int64_t step = 1; step <= 3; ++step) {
    kernels::adamw_step<T>(p_d.data(), g.data(), m_d.data(), v_d.data(), n, cfg, step, T(0.5));
    if constexpr (std::is_same_v<T, float>) {
      cpu().adamw_step(p_v.data(), g.data(), m_v.data(), v_v.data(), n, cfg, step, 0.5f, nullptr);
    } else {
      cpu().adamw_step(p_v.data(), g.data(), m_v.data(), v_v.data(), n, cfg, step, T(0.5));
    }
  }
  expect_same_bits(p_v, p_d, "adamw params");
  expect_same_bits(m_v, m_d, "adamw m");
  expect_same_bits(v_v, v_d, "adamw v");
  const double want = kernels::sum_squares<T>(g.data(), n);
  EXPECT_NEAR(cpu().sum_squares(g.data(), n), want, 1e-12 * want);
}

TEST(Ops, AdamWAndSumSquares) {
  adamw_case<float>();
  adamw_case<double>();
  // The bf16 copy written as the weights are.
  const std::int64_t n = 100;
  AdamWConfig cfg;
  const std::vector<float> p0 = random_vec<float>(n, 45), g = random_vec<float>(n, 46);
  std::vector<float> p_d = p0, p_v = p0, m_d(n), m_v(n), v_d(n), v_v(n);
  std::vector<bf16> r_d(n), r_v(n);
  kernels::adamw_step<float>(p_d.data(), g.data(), m_d.data(), v_d.data(), n, cfg, 1, 1.0f, r_d.data());
  cpu().adamw_step(p_v.data(), g.data(), m_v.data(), v_v.data(), n, cfg, 1, 1.0f, r_v.data());
  expect_same_bits(p_v, p_d, "adamw params (rounded copy)");
  expect_same_bits(r_v, r_d, "adamw bf16 copy");
}

}  // namespace
}  // namespace herd::kernels

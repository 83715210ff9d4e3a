// Context-parallel attention equals single-rank attention over the whole sequence.
//
// Ranks run as threads over the local communicator (deterministic mode, double). Each rank takes its
// two chunks of q, k, v and dout from a full-sequence problem, runs cp_attention_forward/backward, and
// the test puts every output back at its sequence index with its own zigzag formula (independent of
// CpSplit), then compares out, lse, dq, dk and dv with kernels::attention_* over the full sequence.
// Masks: plain causal, and packed documents whose boundaries fall inside chunks and across them.
#include "herd/parallel/cp/cp_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "herd/comm/local/local_world.h"
#include "herd/kernels/attention.h"
#include "herd/parallel/context.h"
#include "herd/topology/parallel_dims.h"

namespace herd::parallel::cp {
namespace {

comm::CommOptions test_options() {
  comm::CommOptions o;
  o.timeout_s = 60;
  o.deterministic = true;
  return o;
}

std::vector<double> random_vec(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A full-sequence attention problem and its single-rank answer.
struct Problem {
  std::int64_t B, T, Hq, Hkv, D;
  std::vector<std::int32_t> pos, doc;  // (B, T)
  std::vector<double> q, k, v, dout;   // (B, T, H, D)
  std::vector<double> out, lse, dq, dk, dv;

  kernels::AttentionDims dims() const { return {B, T, T, Hq, Hkv, D}; }
};

// Documents of the given lengths, packed row after row (positions restart at each document, as the
// loader does); `lengths` empty means plain causal attention, one document per row.
Problem make_problem(std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t Hkv, std::int64_t D,
                     const std::vector<std::int64_t>& lengths) {
  Problem p{};
  p.B = B, p.T = T, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
  const auto n = static_cast<std::size_t>(B * T);
  p.pos.resize(n);
  p.doc.resize(n);
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t d = 0, start = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      // Each row starts the length list at a different document, so rows differ.
      if (!lengths.empty() && t - start == lengths[static_cast<std::size_t>((d + b) % lengths.size())]) {
        ++d;
        start = t;
      }
      p.pos[static_cast<std::size_t>(b * T + t)] = static_cast<std::int32_t>(t - start);
      p.doc[static_cast<std::size_t>(b * T + t)] = static_cast<std::int32_t>(100 * b + d);
    }
  }
  p.q = random_vec(n * static_cast<std::size_t>(Hq * D), 1);
  p.k = random_vec(n * static_cast<std::size_t>(Hkv * D), 2);
  p.v = random_vec(n * static_cast<std::size_t>(Hkv * D), 3);
  p.dout = random_vec(n * static_cast<std::size_t>(Hq * D), 4);
  p.out.resize(p.q.size());
  p.dq.resize(p.q.size());
  p.lse.resize(static_cast<std::size_t>(B * Hq * T));
  p.dk.resize(p.k.size());
  p.dv.resize(p.v.size());
  const kernels::AttentionMask m{p.pos.data(), p.doc.data(), p.pos.data(), p.doc.data()};
  kernels::attention_forward<double>(p.dims(), m, p.q.data(), p.k.data(), p.v.data(), p.out.data(), p.lse.data());
  kernels::attention_backward<double>(p.dims(), m, p.q.data(), p.k.data(), p.v.data(), p.out.data(), p.lse.data(),
                                      p.dout.data(), p.dq.data(), p.dk.data(), p.dv.data());
  return p;
}

// The Llama 3 assignment, written out independently of CpSplit: local token t of CP rank r.
std::int64_t zigzag_index(std::int64_t T, std::int64_t cp, std::int64_t r, std::int64_t t) {
  const std::int64_t c = T / (2 * cp);
  return t < c ? r * c + t : (2 * cp - 1 - r) * c + (t - c);
}

// Rows (B, T, width) <-> the local rows (B, 2c, width) of CP rank r.
template <typename V>
V take_local(const V& full, std::int64_t B, std::int64_t T, std::int64_t width, const CpSplit& s) {
  V out(static_cast<std::size_t>(B * s.local_len() * width));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < s.local_len(); ++t)
      std::copy_n(full.begin() + (b * T + s.global_index(t)) * width, width,
                  out.begin() + (b * s.local_len() + t) * width);
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Runs CP attention on cp ranks (heads [h0, h0 + hq) of q, the matching KV heads, as a TP rank would
// see them) and returns the worst difference to the single-rank run over all outputs and gradients.
struct Gathered {
  std::vector<double> out, lse, dq, dk, dv;
};

void run_cp(const Problem& p, int cp, Gathered& g, std::vector<std::vector<comm::RecordEntry>>* records = nullptr) {
  const std::int64_t B = p.B, T = p.T, qd = p.Hq * p.D, kvd = p.Hkv * p.D;
  g = {std::vector<double>(p.out.size()), std::vector<double>(p.lse.size()), std::vector<double>(p.dq.size()),
       std::vector<double>(p.dk.size()), std::vector<double>(p.dv.size())};
  if (records) records->assign(static_cast<std::size_t>(cp), {});
  comm::LocalWorld world(cp, test_options());
  const Status st = comm::first_error(world.run([&](comm::Communicator& group) -> Status {
    HERD_ASSIGN_OR_RETURN(const CpSplit s, make_cp_split(T, cp, group.rank()));
    const std::int64_t L = s.local_len();
    const auto pos = take_local(p.pos, B, T, 1, s), doc = take_local(p.doc, B, T, 1, s);
    const auto q = take_local(p.q, B, T, qd, s), k = take_local(p.k, B, T, kvd, s);
    const auto v = take_local(p.v, B, T, kvd, s), dout = take_local(p.dout, B, T, qd, s);
    HERD_ASSIGN_OR_RETURN(const CpMask mask, make_cp_mask(group, B, T, pos.data(), doc.data()));
    const kernels::AttentionDims d{B, L, 0, p.Hq, p.Hkv, p.D};
    std::vector<double> out(q.size()), lse(static_cast<std::size_t>(B * p.Hq * L)), dq(q.size()), dk(k.size()),
        dv(v.size());
    CpWorkspace<double> ws;
    HERD_RETURN_IF_ERROR(
        cp_attention_forward<double>(group, mask, d, q.data(), k.data(), v.data(), out.data(), lse.data(), ws));
    HERD_RETURN_IF_ERROR(cp_attention_backward<double>(group, mask, d, q.data(), k.data(), v.data(), out.data(),
                                                       lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), ws));
    // Back to sequence order with the test's own formula; each rank writes only its own tokens.
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < L; ++t) {
        const std::int64_t gt = zigzag_index(T, cp, group.rank(), t), gi = b * T + gt, li = b * L + t;
        std::copy_n(out.begin() + li * qd, qd, g.out.begin() + gi * qd);
        std::copy_n(dq.begin() + li * qd, qd, g.dq.begin() + gi * qd);
        std::copy_n(dk.begin() + li * kvd, kvd, g.dk.begin() + gi * kvd);
        std::copy_n(dv.begin() + li * kvd, kvd, g.dv.begin() + gi * kvd);
        for (std::int64_t h = 0; h < p.Hq; ++h)
          g.lse[static_cast<std::size_t>((b * p.Hq + h) * T + gt)] =
              lse[static_cast<std::size_t>((b * p.Hq + h) * L + t)];
      }
    if (records) (*records)[static_cast<std::size_t>(group.rank())] = group.recorder().entries();
    return {};
  }));
  ASSERT_TRUE(st.ok()) << st.error().message();
}

double worst(const Problem& p, const Gathered& g) {
  return std::max({max_diff(g.out, p.out), max_diff(g.lse, p.lse), max_diff(g.dq, p.dq), max_diff(g.dk, p.dk),
                   max_diff(g.dv, p.dv)});
}

TEST(CpSplit, RankHoldsChunksRAndTwoCpMinusOneMinusR) {
  // cp = 4, T = 16: chunks of 2; rank 1 holds chunks 1 and 6.
  const CpSplit s = *make_cp_split(16, 4, 1);
  std::vector<std::int64_t> idx;
  for (std::int64_t t = 0; t < s.local_len(); ++t) idx.push_back(s.global_index(t));
  EXPECT_EQ(idx, (std::vector<std::int64_t>{2, 3, 12, 13}));
  for (const std::int64_t cp : {1, 2, 4}) {
    std::vector<int> hits(24, 0);
    for (std::int64_t r = 0; r < cp; ++r) {
      const CpSplit sr = *make_cp_split(24, cp, r);
      for (std::int64_t t = 0; t < sr.local_len(); ++t) {
        EXPECT_EQ(sr.global_index(t), zigzag_index(24, cp, r, t));
        ++hits[static_cast<std::size_t>(sr.global_index(t))];
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << "cp " << cp;
  }
}

TEST(CpSplit, SequenceNotDivisibleByTwoCpIsAOneLineError) {
  const auto r = make_cp_split(100, 8, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "seq_len (100) is not divisible by 2 x cp (16): context parallelism cuts each sequence into 2 x cp "
            "chunks; use a multiple of 16");
  EXPECT_FALSE(make_cp_split(16, 4, 4).ok());
  // The mask builder, which every CP layer goes through, reports the same error on every rank.
  comm::LocalWorld world(2, test_options());
  const std::vector<std::int32_t> pos(6, 0);
  const auto statuses = world.run([&](comm::Communicator& group) -> Status {
    auto m = make_cp_mask(group, 1, 6, pos.data(), nullptr);
    return m.ok() ? Status::Ok() : Status(m.error());
  });
  for (const Status& s : statuses) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().message().find("seq_len (6) is not divisible by 2 x cp (4)"), 0u);
  }
}

// Lengths chosen so documents start inside chunks and run across chunk (and rank) boundaries.
const std::vector<std::int64_t> kDocLengths = {37, 5, 61, 13, 90, 29};

TEST(CpAttention, EqualsSingleRankCausalAndDocumentMasks) {
  for (const bool docs : {false, true}) {
    // T = 192: chunks of 96, 48, 24 tokens, none a multiple of the kernel's 64-token tile.
    const Problem p = make_problem(/*B=*/2, /*T=*/192, /*Hq=*/4, /*Hkv=*/2, /*D=*/8,
                                   docs ? kDocLengths : std::vector<std::int64_t>{});
    for (const int cp : {1, 2, 4}) {
      Gathered g;
      run_cp(p, cp, g);
      EXPECT_LE(worst(p, g), 1e-12) << "cp " << cp << (docs ? " documents" : " causal");
    }
  }
}

TEST(CpAttention, SingleSequenceAndMultiQueryHeads) {
  // B = 1 takes the no-permute path; Hkv = 1 is the extreme GQA case.
  const Problem p = make_problem(1, 64, 4, 1, 16, {9, 30, 3});
  for (const int cp : {2, 4}) {
    Gathered g;
    run_cp(p, cp, g);
    EXPECT_LE(worst(p, g), 1e-12) << "cp " << cp;
  }
}

TEST(CpAttention, CollectivesAreOneKvGatherForwardAndGatherPlusReduceScatterBackward) {
  const Problem p = make_problem(2, 32, 4, 2, 8, {});
  std::vector<std::vector<comm::RecordEntry>> records;
  Gathered g;
  run_cp(p, 2, g, &records);
  const CpSplit s = *make_cp_split(32, 2, 0);
  const CpCommVolume vol = cp_comm_volume(s, {2, s.local_len(), 0, 4, 2, 8});
  EXPECT_EQ(vol.kv_send, 2 * 16 * 2 * 2 * 8);
  EXPECT_EQ(vol.q_local, 2 * 16 * 4 * 8);
  for (const auto& rec : records) {
    ASSERT_EQ(rec.size(), 4u);  // mask gather, forward K/V gather, backward K/V gather, dK/dV reduce-scatter
    EXPECT_EQ(rec[0].op, comm::OpKind::kAllGather);
    EXPECT_EQ(rec[0].count, 2u * 2 * 16);  // positions and doc ids, int32
    for (int i : {1, 2}) {
      EXPECT_EQ(rec[static_cast<std::size_t>(i)].op, comm::OpKind::kAllGather);
      EXPECT_EQ(rec[static_cast<std::size_t>(i)].count, static_cast<std::size_t>(vol.kv_send));
    }
    EXPECT_EQ(rec[3].op, comm::OpKind::kReduceScatter);
    EXPECT_EQ(rec[3].count, static_cast<std::size_t>(vol.kv_send));
  }
}

// CP inside a TP x CP mesh (ParallelContext from parallel/context.h): each rank sees its TP-local heads
// only, over its CP group.
TEST(CpAttention, ComposesWithTensorParallelHeads) {
  const Problem p = make_problem(2, 48, 4, 2, 8, kDocLengths);
  const auto dims = *topology::ParallelDims::make(/*tp=*/2, /*cp=*/2, /*pp=*/1, /*dp=*/1);
  const std::int64_t tp = 2, B = p.B, T = p.T, D = p.D, hq = p.Hq / tp, hkv = p.Hkv / tp;
  std::vector<double> out(p.out.size()), dk(p.dk.size());
  comm::LocalWorld world(4, test_options());
  const Status st = comm::first_error(world.run([&](comm::Communicator& w) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(w, dims));
    const ParallelContext ctx = groups->context();
    comm::Communicator* group = ctx.cp;
    const std::int64_t tp_rank = ctx.tp_rank();
    HERD_ASSIGN_OR_RETURN(const CpSplit s, make_cp_split(T, 2, group->rank()));
    const std::int64_t L = s.local_len();
    const auto pos = take_local(p.pos, B, T, 1, s), doc = take_local(p.doc, B, T, 1, s);
    // Local heads in fused-buffer layout: token stride of the full-head tensors, offset to this TP rank's heads.
    const auto q = take_local(p.q, B, T, p.Hq * D, s), k = take_local(p.k, B, T, p.Hkv * D, s);
    const auto v = take_local(p.v, B, T, p.Hkv * D, s), dout = take_local(p.dout, B, T, p.Hq * D, s);
    HERD_ASSIGN_OR_RETURN(const CpMask mask, make_cp_mask(*group, B, T, pos.data(), doc.data()));
    kernels::AttentionDims d{B, L, 0, hq, hkv, D};
    d.ld_q = d.ld_o = p.Hq * D;
    d.ld_k = d.ld_v = p.Hkv * D;
    std::vector<double> o(q.size()), lse(static_cast<std::size_t>(B * hq * L)), dq(q.size()), dkl(k.size()),
        dvl(v.size());
    const std::int64_t qo = tp_rank * hq * D, ko = tp_rank * hkv * D;
    CpWorkspace<double> ws;
    HERD_RETURN_IF_ERROR(cp_attention_forward<double>(*group, mask, d, q.data() + qo, k.data() + ko, v.data() + ko,
                                                      o.data() + qo, lse.data(), ws));
    HERD_RETURN_IF_ERROR(cp_attention_backward<double>(*group, mask, d, q.data() + qo, k.data() + ko, v.data() + ko,
                                                       o.data() + qo, lse.data(), dout.data() + qo, dq.data() + qo,
                                                       dkl.data() + ko, dvl.data() + ko, ws));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < L; ++t) {
        const std::int64_t gi = b * T + zigzag_index(T, 2, group->rank(), t), li = b * L + t;
        std::copy_n(o.begin() + li * p.Hq * D + qo, hq * D, out.begin() + gi * p.Hq * D + qo);
        std::copy_n(dkl.begin() + li * p.Hkv * D + ko, hkv * D, dk.begin() + gi * p.Hkv * D + ko);
      }
    return {};
  }));
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_LE(max_diff(out, p.out), 1e-12);
  EXPECT_LE(max_diff(dk, p.dk), 1e-12);
}

}  // namespace
}  // namespace herd::parallel::cp

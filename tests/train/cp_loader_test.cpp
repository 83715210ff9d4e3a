// The data loader's CP slices feed context-parallel attention correctly.
//
// data::slice_batch hands CP rank r chunks r and 2cp-1-r of each sequence with their positions and
// document ids; parallel/cp assumes the same order (CpSplit) when it gathers keys. This test ties the
// two: a real packed global batch (documents crossing chunk boundaries), sliced for every CP rank,
// must give (1) sequence indices equal to CpSplit's, with positions and doc ids equal to the global
// batch's at those indices, and (2) CP attention over the slices equal to single-rank attention over
// the global batch (outputs and dq/dk/dv within 1e-12 in double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "herd/comm/local/local_world.h"
#include "herd/data/loader.h"
#include "herd/kernels/attention.h"
#include "herd/parallel/cp/cp_attention.h"

namespace herd {
namespace {

std::shared_ptr<data::TokenDocuments> make_docs(std::int64_t n_docs) {
  auto d = std::make_shared<data::TokenDocuments>();
  d->vocab_size = 1000;
  for (std::int64_t i = 0; i < n_docs; ++i) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(3 + (i * 11) % 29), static_cast<std::int32_t>(i));
    d->add_doc(ids);
  }
  return d;
}

std::vector<double> random_vec(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

TEST(CpLoader, SlicesMatchCpSplitAndCpAttentionEqualsTheGlobalBatch) {
  const std::int64_t B = 2, T = 96, H = 2, D = 8;  // one KV head per two query heads: Hkv = 1
  data::LoaderConfig cfg;
  cfg.seq_len = T;
  cfg.batch_size = B;
  cfg.seed = 7;
  auto loader = data::Loader::make(make_docs(40), cfg);
  ASSERT_TRUE(loader.ok()) << loader.error().message();
  const data::Batch g = *loader->next();
  const auto n = static_cast<std::size_t>(B * T);
  std::vector<std::int32_t> doc(n);
  for (std::size_t i = 0; i < n; ++i) doc[i] = static_cast<std::int32_t>(g.doc_ids[i]);
  std::int64_t starts = 0;
  for (std::int64_t t = 1; t < T; ++t)
    starts += doc[static_cast<std::size_t>(t)] != doc[static_cast<std::size_t>(t - 1)];
  ASSERT_GE(starts, 3) << "want several documents per row";

  // Single-rank attention over the global batch.
  const kernels::AttentionDims full{B, T, T, H, 1, D};
  const auto q = random_vec(n * H * D, 1), k = random_vec(n * D, 2), v = random_vec(n * D, 3),
             dout = random_vec(n * H * D, 4);
  std::vector<double> out(q.size()), lse(static_cast<std::size_t>(B * H * T)), dq(q.size()), dk(k.size()), dv(v.size());
  const kernels::AttentionMask m{g.positions.data(), doc.data(), g.positions.data(), doc.data()};
  kernels::attention_forward<double>(full, m, q.data(), k.data(), v.data(), out.data(), lse.data());
  kernels::attention_backward<double>(full, m, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                                      dq.data(), dk.data(), dv.data());

  for (const int cp : {2, 4}) {
    std::vector<double> c_out(out.size()), c_dq(dq.size()), c_dk(dk.size()), c_dv(dv.size());
    comm::CommOptions opt;
    opt.timeout_s = 60;
    comm::LocalWorld world(cp, opt);
    const Status st = comm::first_error(world.run([&](comm::Communicator& group) -> Status {
      HERD_ASSIGN_OR_RETURN(const data::Batch s, data::slice_batch(g, 1, 0, cp, group.rank()));
      HERD_ASSIGN_OR_RETURN(const parallel::cp::CpSplit split, parallel::cp::make_cp_split(T, cp, group.rank()));
      const std::int64_t L = s.seq_len;
      if (L != split.local_len()) return make_error("slice length ", L, " != ", split.local_len());
      std::vector<std::int32_t> sdoc(s.doc_ids.size());
      std::vector<double> lq(static_cast<std::size_t>(B * L * H * D)), lk(static_cast<std::size_t>(B * L * D)),
          ld(lq.size());
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < L; ++t) {
          const auto li = static_cast<std::size_t>(b * L + t);
          const std::int64_t gt = s.seq_index[li], gi = b * T + gt;
          if (gt != split.global_index(t)) return make_error("slice seq_index ", gt, " != ", split.global_index(t));
          if (s.positions[li] != g.positions[static_cast<std::size_t>(gi)] ||
              s.doc_ids[li] != g.doc_ids[static_cast<std::size_t>(gi)])
            return make_error("slice token ", li, " does not carry the global position/doc id");
          sdoc[li] = static_cast<std::int32_t>(s.doc_ids[li]);
          std::copy_n(q.begin() + gi * H * D, H * D, lq.begin() + static_cast<std::int64_t>(li) * H * D);
          std::copy_n(dout.begin() + gi * H * D, H * D, ld.begin() + static_cast<std::int64_t>(li) * H * D);
          std::copy_n(k.begin() + gi * D, D, lk.begin() + static_cast<std::int64_t>(li) * D);
        }
      std::vector<double> lv(lk.size());
      for (std::int64_t i = 0; i < B * L; ++i)
        std::copy_n(v.begin() + (i / L * T + s.seq_index[static_cast<std::size_t>(i)]) * D, D, lv.begin() + i * D);
      HERD_ASSIGN_OR_RETURN(const parallel::cp::CpMask mask,
                            parallel::cp::make_cp_mask(group, B, T, s.positions.data(), sdoc.data()));
      const kernels::AttentionDims d{B, L, 0, H, 1, D};
      std::vector<double> o(lq.size()), ls(static_cast<std::size_t>(B * H * L)), gq(lq.size()), gk(lk.size()),
          gv(lv.size());
      parallel::cp::CpWorkspace<double> ws;
      HERD_RETURN_IF_ERROR(parallel::cp::cp_attention_forward<double>(group, mask, d, lq.data(), lk.data(), lv.data(),
                                                                      o.data(), ls.data(), ws));
      HERD_RETURN_IF_ERROR(parallel::cp::cp_attention_backward<double>(group, mask, d, lq.data(), lk.data(), lv.data(),
                                                                       o.data(), ls.data(), ld.data(), gq.data(),
                                                                       gk.data(), gv.data(), ws));
      for (std::int64_t i = 0; i < B * L; ++i) {  // back to the global batch by the loader's seq_index
        const std::int64_t gi = i / L * T + s.seq_index[static_cast<std::size_t>(i)];
        std::copy_n(o.begin() + i * H * D, H * D, c_out.begin() + gi * H * D);
        std::copy_n(gq.begin() + i * H * D, H * D, c_dq.begin() + gi * H * D);
        std::copy_n(gk.begin() + i * D, D, c_dk.begin() + gi * D);
        std::copy_n(gv.begin() + i * D, D, c_dv.begin() + gi * D);
      }
      return {};
    }));
    ASSERT_TRUE(st.ok()) << st.error().message();
    double worst = 0;
    for (const auto& [a, b] : {std::pair{&c_out, &out}, {&c_dq, &dq}, {&c_dk, &dk}, {&c_dv, &dv}})
      for (std::size_t i = 0; i < a->size(); ++i) worst = std::max(worst, std::abs((*a)[i] - (*b)[i]));
    EXPECT_LE(worst, 1e-12) << "cp " << cp;
  }
}

}  // namespace
}  // namespace herd

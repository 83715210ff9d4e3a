// Context-parallel attention: the split, the gathered mask, and the forward/backward around the flash
// kernel (contract and layout in cp_attention.h; algorithm and volumes in docs/cp.md).
#include "herd/parallel/cp/cp_attention.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "herd/core/check.h"

namespace herd::parallel::cp {

Result<CpMask> make_cp_mask(comm::Communicator& group, std::int64_t batch, std::int64_t seq_len,
                            const std::int32_t* pos, const std::int32_t* doc) {
  HERD_CHECK(batch > 0 && pos != nullptr);
  CpMask m;
  HERD_ASSIGN_OR_RETURN(m.split, make_cp_split(seq_len, group.size(), group.rank()));
  m.batch = batch;
  const std::int64_t L = m.split.local_len(), n = batch * L, cp = m.split.cp;
  m.pos_q.assign(pos, pos + n);
  if (doc) {
    m.doc_q.assign(doc, doc + n);
  } else {
    m.doc_q.assign(static_cast<std::size_t>(n), 0);
  }
  // One all-gather of [pos | doc] per rank: (cp, 2, B, 2c) int32.
  std::vector<std::int32_t> all(static_cast<std::size_t>(cp * 2 * n));
  std::int32_t* mine = all.data() + group.rank() * 2 * n;
  std::copy(m.pos_q.begin(), m.pos_q.end(), mine);
  std::copy(m.doc_q.begin(), m.doc_q.end(), mine + n);
  HERD_RETURN_IF_ERROR(group.all_gather(mine, all.data(), static_cast<std::size_t>(2 * n), DType::kI32));
  m.pos_k.resize(static_cast<std::size_t>(batch * seq_len));
  m.doc_k.resize(m.pos_k.size());
  for (std::int64_t r = 0; r < cp; ++r) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int32_t* src = all.data() + r * 2 * n + b * L;
      const std::int64_t dst = b * seq_len + r * L;
      std::copy(src, src + L, m.pos_k.begin() + dst);
      std::copy(src + n, src + n + L, m.doc_k.begin() + dst);
    }
  }
  return m;
}

void CpMask::place(const kernels::Ops& ops) {
  const std::vector<std::int32_t>* arrays[] = {&pos_q, &doc_q, &pos_k, &doc_k};
  std::size_t bytes = 0;
  for (const auto* v : arrays) bytes += v->size() * sizeof(std::int32_t);
  placed = kernels::Buffer(ops, bytes);
  std::size_t at = 0;
  for (const auto* v : arrays) {
    const std::size_t n = v->size() * sizeof(std::int32_t);
    if (n > 0) ops.copy_from_host(v->data(), static_cast<char*>(placed.data()) + at, n);
    at += n;
  }
}

kernels::AttentionMask CpMask::kernel_mask() const {
  if (!placed) return {pos_q.data(), doc_q.data(), pos_k.data(), doc_k.data()};
  const auto* base = placed.as<const std::int32_t>();
  const std::int32_t* p_q = base;
  const std::int32_t* d_q = p_q + pos_q.size();
  const std::int32_t* p_k = d_q + doc_q.size();
  const std::int32_t* d_k = p_k + pos_k.size();
  return {p_q, doc_q.empty() ? nullptr : d_q, p_k, doc_k.empty() ? nullptr : d_k};
}

CpCommVolume cp_comm_volume(const CpSplit& split, const kernels::AttentionDims& d) {
  const std::int64_t tokens = d.batch * split.local_len();
  return {tokens * 2 * d.kv_heads * d.head_dim, tokens * d.q_heads * d.head_dim};
}

namespace {

struct Shape {
  std::int64_t B, L, T, cp, rank, kvd, ld_k, ld_v;
  std::int64_t block() const { return B * L * 2 * kvd; }  // one rank's K/V elements
};

Shape shape_of(const CpMask& m, const kernels::AttentionDims& d) {
  HERD_CHECK(d.batch == m.batch && d.tq == m.tq());
  HERD_CHECK(d.kv_heads > 0 && d.q_heads % d.kv_heads == 0 && d.head_dim > 0);
  const std::int64_t kvd = d.kv_heads * d.head_dim;
  return {d.batch, m.tq(), m.tk(), m.split.cp, m.split.rank, kvd, d.ld_k ? d.ld_k : kvd, d.ld_v ? d.ld_v : kvd};
}

// The kernel's view: local queries against all T keys, K and V interleaved per token in `kv`.
kernels::AttentionDims kernel_dims(const kernels::AttentionDims& d, const Shape& s) {
  kernels::AttentionDims k = d;
  k.tk = s.T;
  k.ld_k = k.ld_v = 2 * s.kvd;
  return k;
}

// Copies rank-major (cp, B, 2c, row) <-> batch-major (B, cp x 2c, row) rows of `row` elements.
// Per rank r, its B blocks of L rows: consecutive in rank-major order, T rows apart in batch-major.
template <typename T>
void permute_rows(const kernels::Ops& ops, const Shape& s, const T* src, T* dst, bool to_batch_major) {
  const std::int64_t row = 2 * s.kvd;
  const std::size_t block = static_cast<std::size_t>(s.L * row) * sizeof(T);
  const std::size_t batch_pitch = static_cast<std::size_t>(s.T * row) * sizeof(T);
  for (std::int64_t r = 0; r < s.cp; ++r) {
    const std::int64_t rank_major = (r * s.B * s.L) * row, batch_major = (r * s.L) * row;
    if (to_batch_major) {
      ops.copy_rows(src + rank_major, block, dst + batch_major, batch_pitch, block, s.B);
    } else {
      ops.copy_rows(src + batch_major, batch_pitch, dst + rank_major, block, block, s.B);
    }
  }
}

// buf as `count` elements of U, reallocated on `ops`'s device when it is smaller (its contents are not kept).
template <typename U>
U* sized(const kernels::Ops& ops, kernels::Buffer& buf, std::int64_t count) {
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(U);
  if (buf.bytes() < bytes) buf = kernels::Buffer(ops, bytes);
  return buf.as<U>();
}

// The all-gather and kernel-layout buffers of K/V at the input type: T's own, or the bf16 ones.
template <typename In, typename T>
std::pair<kernels::Buffer*, kernels::Buffer*> kv_buffers(CpWorkspace<T>& ws) {
  if constexpr (std::is_same_v<In, T>) {
    return {&ws.gathered, &ws.kv};
  } else {
    return {&ws.gathered16, &ws.kv16};
  }
}

// All-gathers the local K/V into the kernel layout (B, T, 2, Hkv, D) and returns it.
template <typename In, typename T>
Result<const In*> gather_kv(comm::Communicator& group, const Shape& s, const In* k, const In* v, CpWorkspace<T>& ws) {
  const kernels::Ops& ops = *ws.ops;
  auto [gathered_buf, kv_buf] = kv_buffers<In>(ws);
  In* gathered = sized<In>(ops, *gathered_buf, s.cp * s.block());
  In* mine = gathered + s.rank * s.block();
  // Token i's K row and V row side by side: (B L, 2, Hkv, D).
  const std::size_t row = static_cast<std::size_t>(s.kvd) * sizeof(In);
  ops.copy_rows(k, static_cast<std::size_t>(s.ld_k) * sizeof(In), mine, 2 * row, row, s.B * s.L);
  ops.copy_rows(v, static_cast<std::size_t>(s.ld_v) * sizeof(In), mine + s.kvd, 2 * row, row, s.B * s.L);
  HERD_RETURN_IF_ERROR(group.all_gather(mine, gathered, static_cast<std::size_t>(s.block()), dtype_of<In>()));
  if (s.B == 1) return static_cast<const In*>(gathered);  // rank-major is already (1, T, ...)
  In* kv = sized<In>(ops, *kv_buf, s.cp * s.block());
  permute_rows(ops, s, gathered, kv, /*to_batch_major=*/true);
  return static_cast<const In*>(kv);
}

}  // namespace

template <typename In, typename T>
Status cp_attention_forward(comm::Communicator& group, const CpMask& mask, const kernels::AttentionDims& d, const In* q,
                            const In* k, const In* v, T* out, T* lse, CpWorkspace<T>& ws) {
  const Shape s = shape_of(mask, d);
  HERD_CHECK(group.size() == s.cp && group.rank() == s.rank);
  HERD_ASSIGN_OR_RETURN(const In* kv, gather_kv(group, s, k, v, ws));
  ws.ops->attention_forward(kernel_dims(d, s), mask.kernel_mask(), q, kv, kv + s.kvd, out, lse);
  return {};
}

template <typename In, typename T>
Status cp_attention_backward(comm::Communicator& group, const CpMask& mask, const kernels::AttentionDims& d,
                             const In* q, const In* k, const In* v, const In* out, const T* lse, const T* dout, T* dq,
                             T* dk, T* dv, CpWorkspace<T>& ws) {
  const Shape s = shape_of(mask, d);
  HERD_CHECK(group.size() == s.cp && group.rank() == s.rank);
  HERD_ASSIGN_OR_RETURN(const In* kv, gather_kv(group, s, k, v, ws));
  // For B = 1 the kernel writes dK/dV straight into the rank-major reduce-scatter layout.
  const kernels::Ops& ops = *ws.ops;
  T* dkv = sized<T>(ops, ws.dkv, s.cp * s.block());
  ops.attention_backward(kernel_dims(d, s), mask.kernel_mask(), q, kv, kv + s.kvd, out, lse, dout, dq, dkv,
                         dkv + s.kvd);
  T* rank_major = dkv;
  if (s.B > 1) {  // ws.gathered is free (the kernel has consumed kv) or, with bf16 inputs, unused
    rank_major = sized<T>(ops, ws.gathered, s.cp * s.block());
    permute_rows(ops, s, dkv, rank_major, /*to_batch_major=*/false);
  }
  T* mine = rank_major + s.rank * s.block();
  HERD_RETURN_IF_ERROR(
      group.reduce_scatter(rank_major, mine, static_cast<std::size_t>(s.block()), dtype_of<T>(), comm::ReduceOp::kSum));
  const std::size_t row = static_cast<std::size_t>(s.kvd) * sizeof(T);
  ops.copy_rows(mine, 2 * row, dk, static_cast<std::size_t>(s.ld_k) * sizeof(T), row, s.B * s.L);
  ops.copy_rows(mine + s.kvd, 2 * row, dv, static_cast<std::size_t>(s.ld_v) * sizeof(T), row, s.B * s.L);
  return {};
}

#define HERD_CP_INSTANTIATE(In, T)                                                                                     \
  template Status cp_attention_forward<In, T>(comm::Communicator&, const CpMask&, const kernels::AttentionDims&,       \
                                              const In*, const In*, const In*, T*, T*, CpWorkspace<T>&);               \
  template Status cp_attention_backward<In, T>(comm::Communicator&, const CpMask&, const kernels::AttentionDims&,      \
                                               const In*, const In*, const In*, const In*, const T*, const T*, T*, T*, \
                                               T*, CpWorkspace<T>&);
HERD_CP_INSTANTIATE(float, float)
HERD_CP_INSTANTIATE(double, double)
HERD_CP_INSTANTIATE(bf16, float)
#undef HERD_CP_INSTANTIATE

}  // namespace herd::parallel::cp

// Context-parallel attention, as Llama 3 trains long sequences (section 3.3.2 of the paper).
//
// Each sequence of T tokens is cut into 2 x CP chunks of c = T / (2 CP) tokens; CP rank r holds chunks
// r and 2 CP - 1 - r, concatenated in that order (2c local tokens). Pairing an early chunk with a late
// one gives every rank the same causal work (docs/cp.md derives it). Per layer, the forward
// all-gathers K and V (after RoPE) over the CP group and runs the flash kernel for the 2c local
// queries against all T gathered keys, with the causal and document masks evaluated on the tokens'
// global positions and document ids (gathered once per micro-batch, not per layer). The backward
// re-gathers K and V (only the local K/V are saved, as model/activations.h lists them), computes dQ
// locally and dK/dV for all T keys, and reduce-scatters dK/dV back to the ranks that own those keys.
//
// Gathered layout: rank-major, (B, CP x 2c, 2, Hkv, D) with each rank's two chunks contiguous
// (rank 0's chunks 0 and 2CP-1, then rank 1's chunks 1 and 2CP-2, ...), K and V interleaved per token
// so that one all-gather carries both. Keys need not be in sequence order: the kernel masks by
// position and document id, not by index. Because each rank's keys are one contiguous block, a
// plain reduce-scatter returns each rank exactly the gradient of its own keys.
//
// The functions see only the heads they are given, so under TP (heads split first) they run on the
// rank's local heads unchanged. Every collective goes through the CP group's Communicator
// (ParallelContext::cp); in the deterministic mode the dK/dV sum runs in CP-rank order, so results
// are reproducible.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/core/bf16.h"
#include "herd/core/error.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/ops.h"
#include "herd/model/shard.h"

namespace herd::parallel::cp {

// The load-balanced split (chunks r and 2 CP - 1 - r of rank r) is model::CpSplit (model/shard.h),
// the one split that the data loader's slice_batch uses too.
using model::CpSplit;
using model::make_cp_split;

// The mask of one micro-batch on one CP rank: the local queries' positions and document ids, and
// every key's, in the gathered order. Built once per micro-batch (one small all-gather of int32s) and
// shared by every layer.
struct CpMask {
  CpSplit split;
  std::int64_t batch = 0;           // B
  std::vector<std::int32_t> pos_q;  // (B, 2c)
  std::vector<std::int32_t> doc_q;  // (B, 2c)
  std::vector<std::int32_t> pos_k;  // (B, T), gathered order
  std::vector<std::int32_t> doc_k;  // (B, T), gathered order

  // The four arrays copied to a device (place()), where the attention kernel reads them; empty until then.
  kernels::Buffer placed;

  std::int64_t tq() const { return split.local_len(); }
  std::int64_t tk() const { return split.seq_len; }
  // Copies the arrays to `ops`'s device; kernel_mask() then points there.
  void place(const kernels::Ops& ops);
  // The arrays as the kernel reads them: the placed copies, or the vectors above before place().
  kernels::AttentionMask kernel_mask() const;
};

// pos and doc (B, 2c): the local tokens' positions and document ids (doc null: one document), in the
// order of CpSplit (the data loader's slice_batch order). Collective over `group` (the CP group;
// its size is cp and its rank the CP rank). Errors: seq_len not divisible by 2 x cp; comm failures.
Result<CpMask> make_cp_mask(comm::Communicator& group, std::int64_t batch, std::int64_t seq_len,
                            const std::int32_t* pos, const std::int32_t* doc);

// Scratch reused across layers and steps (grows to its largest use, then stops allocating), on the
// device of `ops`, whose op interface (kernels/ops.h) runs CP attention's kernels and copies.
template <typename T>
struct CpWorkspace {
  explicit CpWorkspace(const kernels::Ops& ops = kernels::cpu_ops()) : ops(&ops) {}
  const kernels::Ops* ops;
  kernels::Buffer gathered;  // (cp, B, 2c, 2, Hkv, D) of T: the all-gather / reduce-scatter buffer
  kernels::Buffer kv;        // (B, T, 2, Hkv, D) of T: gathered K/V in kernel layout (B > 1 only)
  kernels::Buffer dkv;       // (B, T, 2, Hkv, D) of T: dK/dV of every key
  // bf16 inputs (In = bf16 below): the all-gather and kernel-layout buffers of K/V in bf16.
  kernels::Buffer gathered16, kv16;
};

// Local heads and layout. d.batch = B, d.tq = 2c, d.q_heads / d.kv_heads / d.head_dim the rank's
// (TP-local) heads; d.tk is ignored (T from the mask). Token strides ld_q, ld_o (q/out/dq/dout) and
// ld_k, ld_v (local k/v and dk/dv) are honoured as in kernels/attention.h; 0 means dense.
//
// q (B, 2c, Hq, D), k and v (B, 2c, Hkv, D) after RoPE; writes out (B, 2c, Hq, D) and lse (B, Hq, 2c).
// In: the type of q, k, v (and out in the backward): T, or bf16 with T = float (bf16 mode, the bf16
// kernel's contract in kernels/attention.h). K and V are all-gathered at In (bf16: half the bytes);
// lse, dout, dq and the reduce-scatter of dK/dV stay at T (fp32 in bf16 mode, as the paper reduces
// gradients).
template <typename In, typename T>
Status cp_attention_forward(comm::Communicator& group, const CpMask& mask, const kernels::AttentionDims& d, const In* q,
                            const In* k, const In* v, T* out, T* lse, CpWorkspace<T>& ws);

// dout like out. Writes (overwrites) dq like q and dk, dv like k, v: the gradient of the local keys
// summed over the queries of every CP rank.
template <typename In, typename T>
Status cp_attention_backward(comm::Communicator& group, const CpMask& mask, const kernels::AttentionDims& d,
                             const In* q, const In* k, const In* v, const In* out, const T* lse, const T* dout, T* dq,
                             T* dk, T* dv, CpWorkspace<T>& ws);

// Elements one rank contributes to each CP collective of one layer (times the element size: bytes).
// The forward all-gathers K/V once; the backward all-gathers them again and reduce-scatters dK/dV,
// each of the same size. A ring moves (cp - 1) x kv_send elements into (and out of) every rank per op.
struct CpCommVolume {
  std::int64_t kv_send = 0;  // B x 2c x 2 x Hkv x D
  std::int64_t q_local = 0;  // B x 2c x Hq x D, the local Q it is compared with
};
CpCommVolume cp_comm_volume(const CpSplit& split, const kernels::AttentionDims& d);

}  // namespace herd::parallel::cp

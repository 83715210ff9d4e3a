// One Llama 3 transformer block with an explicit forward and backward:
//   h   = x + Wo . attention(rope(Wq . n1), rope(Wk . n1), Wv . n1),   n1 = rmsnorm(x) * attn_norm
//   out = h + Wdown . (silu(Wgate . n2) * (Wup . n2)),                 n2 = rmsnorm(h) * mlp_norm
// with grouped-query attention under the causal document mask.
//
// The forward keeps, in the caller's arena, exactly the tensors model/activations.h lists for the
// recompute policy, allocated under the same names ("attn.q", ...; the arena's tag is
// "<prefix><name>"), and returns them as a BlockState; everything else it needs is scratch, freed
// before it returns. The backward re-materialises what the policy dropped (selective: the norm
// outputs and the SwiGLU product; full: the whole forward from the saved input), consumes the state
// and frees it. Because the arena is a stack, states must be released in reverse order of creation:
// a single-rank step does forward 0..L-1 then backward L-1..0.
//
// Parameters and gradients are one flat buffer each (LayerLayout); gradients accumulate (+=), so
// micro-batches add into the same buffer and the caller zeroes it once per step.
// Tensor parallelism (parallel/tp) reuses this class: built from the local LayerSizes of one TP
// shard and given TensorParallelHooks, the norms run on this rank's rows (all N, or N/tp with
// sequence parallelism), the hooks gather them into the column-parallel q/k/v and gate/up linears and
// reduce the row-parallel o and down outputs; without hooks the block is the single-rank layer.
// Context parallelism (parallel/cp) plugs in the same way through AttentionHooks: the block then holds
// the CP-local rows of each sequence (mb.seq_len is the local length) and the hook replaces the
// attention kernel call by one that sees every key of the sequence; everything else is row-local.
// bf16 mode (`train.precision = bf16`, TransformerBlock<float> built with bf16_mode = true;
// docs/precision.md): the weights are the FSDP unit's bf16 copy (bind_bf16), every linear is
// gemm_bf16 (bf16 inputs, fp32 sums and outputs), the saved tensors are held in bf16 under the same
// names (the norm statistics and the attention lse stay fp32, as model/activations.h counts them),
// and everything else runs in fp32 on the same kernels: the norms on their bf16-rounded saved inputs,
// RoPE and attention on bf16-rounded q, k, v, the SwiGLU gate on bf16-rounded gate and up, the
// residual stream and every gradient. Weight gradients accumulate in fp32 (beta = 1) as above.
// It is not a second copy of the layer: block.cpp and block_backward.cpp are written once over the
// storage type of saved tensors and matmul inputs (T, or bf16), through block_precision.h's rounding
// and widening steps, which are the identity on pointers when that type is T. The headers of those two
// files say where bf16 mode rounds and why.
// Legend: N = B x T rows, n_loc = the rows of the norm regions, d hidden, q = heads x head_dim, kv = kv_heads x
// head_dim, f = ffn.
#pragma once

#include <string>
#include <type_traits>
#include <variant>

#include "herd/core/bf16.h"
#include "herd/core/check.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/ops.h"
#include "herd/kernels/rope.h"
#include "herd/model/flops.h"
#include "herd/nn/batch.h"
#include "herd/nn/layer_sizes.h"
#include "herd/tensor/arena.h"

namespace herd::nn {

// The collectives around a block's tensor-parallel regions (Megatron's f/g pair). Each is the other's
// backward: gather's adjoint is reduce and reduce's adjoint is gather, with or without SP.
template <typename T>
class TensorParallelHooks {
 public:
  virtual ~TensorParallelHooks() = default;
  // Rows of this rank's norm regions for a micro-batch of n rows: n, or n / tp with SP.
  virtual std::int64_t local_rows(std::int64_t n) const = 0;
  // full (n, cols) from this rank's local (local_rows(n), cols): SP all-gather over TP, else a copy.
  virtual void gather(const T* local, T* full, std::int64_t n, std::int64_t cols) const = 0;
  // The same for bf16 tensors (a bf16 block's linear inputs): half the bytes of gather.
  virtual void gather(const bf16* local, bf16* full, std::int64_t n, std::int64_t cols) const = 0;
  // local (local_rows(n), cols) = sum over TP of partial (n, cols): SP reduce-scatter, else all-reduce.
  virtual void reduce(const T* partial, T* local, std::int64_t n, std::int64_t cols) const = 0;
};

// The attention core (after RoPE, before Wo) when it needs other ranks' keys: context parallelism. The
// shapes are the kernel's (kernels/attention.h) on this rank's rows and heads: q (B, T_loc, Hq, D), k and
// v (B, T_loc, Hkv, D), out like q, lse (B, Hq, T_loc). A failure is recorded by the implementation and
// reported by its owner after the pass (the block has no error path of its own).
template <typename T>
class AttentionHooks {
 public:
  virtual ~AttentionHooks() = default;
  virtual void forward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, T* out, T* lse) const = 0;
  // Overwrites dq, dk, dv (like q, k, v): dk and dv are the gradients of this rank's keys summed over
  // the queries of every rank that saw them.
  virtual void backward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv) const = 0;
  // bf16 mode (T = float): q, k, v and out as the block saved them, in bf16; the bf16 kernel's contract
  // (kernels/attention.h: fp32 sums, statistics and outputs). Hooks of a block that never runs in bf16
  // need not provide them.
  virtual void forward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v, float* out,
                       float* lse) const;
  virtual void backward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv) const;
};

template <typename T>
void AttentionHooks<T>::forward(const kernels::AttentionDims&, const bf16*, const bf16*, const bf16*, float*,
                                float*) const {
  HERD_CHECK(false, "these attention hooks have no bf16 path");
}
template <typename T>
void AttentionHooks<T>::backward(const kernels::AttentionDims&, const bf16*, const bf16*, const bf16*, const bf16*,
                                 const float*, const float*, float*, float*, float*) const {
  HERD_CHECK(false, "these attention hooks have no bf16 path");
}

// What a block keeps for its backward: the tensors model/activations.h lists, at the storage type S (T,
// or bf16 in bf16 mode), and their statistics (1/rms, lse) at T. A tensor the recompute policy drops is null.
template <typename T, typename S>
struct SavedTensors {
  S* input = nullptr;          // attn_norm.input (n_loc, d): the layer input (rounded in bf16 mode)
  T* attn_rstd = nullptr;      // (n_loc)
  S* attn_norm_out = nullptr;  // (n_loc, d); none only
  S* q = nullptr;              // (N, q) after RoPE
  S* k = nullptr;              // (N, kv) after RoPE
  S* v = nullptr;              // (N, kv)
  S* attn_out = nullptr;       // (N, q)
  T* lse = nullptr;            // (B, heads, T)
  S* mlp_input = nullptr;      // mlp_norm.input (n_loc, d)
  T* mlp_rstd = nullptr;       // (n_loc)
  S* mlp_norm_out = nullptr;   // (n_loc, d); none only
  S* gate = nullptr;           // (N, f)
  S* up = nullptr;             // (N, f)
  S* act = nullptr;            // (N, f) silu(gate) * up; none only
};

template <typename T>
struct BlockState {
  tensor::Arena::Mark mark;  // the arena before the first saved tensor
  // The block's mode decides the alternative: T for the fp32 and fp64 blocks, bf16 in bf16 mode.
  std::variant<SavedTensors<T, T>, SavedTensors<T, bf16>> saved;
};

template <typename T>
class TransformerBlock {
 public:
  // bf16_mode: see the file comment (T = float only). `ops`: the run's device's op interface
  // (kernels/ops.h), which every kernel, copy and sum of the block goes through; it outlives the block.
  TransformerBlock(const LayerSizes& sizes, model::Recompute recompute, std::string tag_prefix = "",
                   bool bf16_mode = false, const kernels::Ops& ops = kernels::cpu_ops());

  const LayerSizes& sizes() const { return sizes_; }
  const LayerLayout& layout() const { return layout_; }
  const kernels::Ops& ops() const { return *ops_; }
  std::int64_t param_count() const { return layout_.total; }
  model::Recompute recompute() const { return recompute_; }
  bool bf16_mode() const { return bf16_; }

  // params and grads: param_count() elements each, owned by the caller (a model's flat unit).
  void bind(T* params, T* grads) {
    HERD_CHECK(!bf16_, "a bf16 block reads bf16 weights: bind_bf16");
    w_ = params;
    g_ = grads;
  }
  // bf16 mode: the unit's bf16 weight copy and its fp32 gradient buffer.
  void bind_bf16(const bf16* params, T* grads) {
    HERD_CHECK(bf16_, "bind_bf16 on a block not built in bf16 mode");
    w16_ = params;
    g_ = grads;
  }
  // Tensor-parallel collectives (nullptr: single rank). Not owned.
  void set_tensor_parallel(const TensorParallelHooks<T>* hooks) { tp_ = hooks; }
  // Attention over keys held elsewhere (nullptr: the local kernel under mb's mask). Not owned.
  void set_attention(const AttentionHooks<T>* hooks) { attn_ = hooks; }

  // x (n_loc, d): the residual stream, replaced by the block's output.
  BlockState<T> forward(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope, T* x) const;

  // dx (n_loc, d): dLoss/d(output) in, dLoss/d(input) out. Accumulates the weight gradients and frees `st`
  // (and everything the arena holds above it).
  void backward(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope, BlockState<T>& st,
                T* dx) const;

 private:
  // The layer written once over the storage type S of saved tensors and matmul inputs: S = T, or bf16
  // (T = float) in bf16 mode. block.cpp has forward_as and compute, block_backward.cpp backward_as.
  template <typename S>
  const S* weights() const {
    if constexpr (std::is_same_v<S, T>) {
      return w_;
    } else {
      return w16_;
    }
  }
  template <typename S>
  BlockState<T> forward_as(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope, T* x) const;
  // Fills every field of `st` from st.input, allocating the missing ones from `arena` as scratch, and
  // writes the block output to x_out when not null: the shared body of forward and of full recompute.
  // `residual` is the layer input at T (the forward's x); null under full recompute: st.input, widened.
  template <typename S>
  void compute(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope, SavedTensors<T, S>& st,
               const T* residual, T* x_out) const;
  template <typename S>
  void backward_as(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope, BlockState<T>& st,
                   T* dx) const;

  LayerSizes sizes_;
  LayerLayout layout_;
  model::Recompute recompute_;
  std::string prefix_;
  bool bf16_ = false;
  const kernels::Ops* ops_;
  const bf16* w16_ = nullptr;
  T* w_ = nullptr;
  T* g_ = nullptr;
  const TensorParallelHooks<T>* tp_ = nullptr;
  const AttentionHooks<T>* attn_ = nullptr;
};

}  // namespace herd::nn

// One bf16 training step of a Llama-3-architecture model on one GPU, run as the sequence of kernels/cuda
// calls that herd's bf16 step makes (nn/block.cpp in bf16 mode: bf16 weight copies and matmul inputs, fp32
// master weights, norms, RoPE, softmax statistics, loss, gradients and AdamW), on device buffers:
// per micro-batch (one sequence), embedding, L blocks forward (saving their activations), the
// vocabulary-tiled cross-entropy head and its backward, L blocks backward and the embedding gradient,
// the gradients accumulating in fp32 over the micro-batches; then AdamW over every tensor in one
// multi-tensor launch and the bf16 re-copy of the weights. --tokens-per-step sets the micro-batches
// (16,384 tokens by default: 8 x 2,048 or 2 x 8,192), so the optimizer's pass over 1.5 B parameters
// weighs in a step as it does in training. Timed with CUDA events over steps after warm-up.
//
// It measures what the kernels reach on the hardware (tokens/s, achieved TFLOP/s and MFU against the
// GPU's bf16 dense peak, peak device memory) and prints the loss of the same batch each step, which
// must fall if the backward is right. It is not `herd train`: no data pipeline, no communicator, no
// checkpoint (docs/gpu.md says what runs where). bench/gpu/README.md has the command and the planner's
// prediction for the same run beside it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/kernels/cuda/kernels.h"
#include "herd/kernels/cuda/runtime.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"

namespace herd::bench {
namespace {

namespace kc = herd::kernels::cuda;
using kernels::Accumulate;
using kernels::Trans;

template <typename T>
using Buf = kc::DeviceBuffer<T>;

// One trainable tensor: fp32 master, gradient, AdamW moments, and (for matrices) its bf16 copy.
struct Param {
  std::int64_t n = 0;
  Buf<float> p, g, m, v;
  Buf<bf16> w16;
  Param() = default;
  Param(std::int64_t count, bool matrix, float stddev, std::uint32_t seed, float constant = 0.0f)
      : n(count), p(count), g(count), m(count), v(count) {
    std::vector<float> host(static_cast<std::size_t>(count));
    if (stddev > 0) {
      std::mt19937 rng(seed);
      std::normal_distribution<float> dist(0.0f, stddev);
      for (float& x : host) x = dist(rng);
    } else {
      std::fill(host.begin(), host.end(), constant);
    }
    kc::copy_to_device(p.data(), host.data(), p.bytes());
    kc::fill_zero(m.data(), m.bytes());
    kc::fill_zero(v.data(), v.bytes());
    if (matrix) {
      w16 = Buf<bf16>(count);
      kc::to_bf16(p.data(), count, w16.data());
    }
  }
};

struct Layer {
  Param attn_norm, wqkv, wo, mlp_norm, wgu, wdown;
  // Saved for the backward.
  Buf<float> x_in, h, rstd1, rstd2, lse;
  Buf<bf16> n1, qkv16, ao, n2, gu16, act;
};

struct Dims {
  std::int64_t n, d, q, kv, f, vocab, heads, kv_heads, head_dim;
  std::int64_t qkv() const { return q + 2 * kv; }
};

// Where one step's time goes: an event is recorded on the compute stream at each boundary between
// kinds of kernel, and the time between two marks is charged to the kind the first one opened. Used on
// one extra step after the timed ones, so the events cost the timed steps nothing. Inside attention the
// kernels' own hook (kc::set_attention_part_hook) adds marks before each of its kernels, so attention's
// time splits further by part (what falls before a call's first part, none in practice: "other").
enum class Kind { kGemm, kAttention, kLossHead, kElementwise, kOptimizer, kCount };
constexpr const char* kKindNames[] = {"gemm", "attention", "loss_head", "elementwise", "optimizer"};
constexpr std::size_t kParts = static_cast<std::size_t>(kc::AttentionPart::kCount);
constexpr const char* kPartNames[] = {"forward", "delta", "dq", "dkdv", "group_sum", "other"};

class Phases {
 public:
  void mark(Kind k) { record(k, kParts); }
  // A mark inside attention: the kernels of `part` follow.
  void mark_part(kc::AttentionPart part) { record(Kind::kAttention, static_cast<std::size_t>(part)); }
  // Call after the last mark; returns milliseconds per kind (part_ms() then holds attention's split).
  std::array<double, static_cast<std::size_t>(Kind::kCount)> finish() {
    std::array<double, static_cast<std::size_t>(Kind::kCount)> ms{};
    part_ms_ = {};
    if (used_ == 0) return ms;
    events_[used_ - 1]->synchronize();
    for (std::size_t i = 0; i + 1 < used_; ++i) {
      const double t = kc::Event::elapsed_ms(*events_[i], *events_[i + 1]);
      ms[static_cast<std::size_t>(kinds_[i])] += t;
      if (kinds_[i] == Kind::kAttention) part_ms_[parts_[i]] += t;
    }
    used_ = 0;
    return ms;
  }
  // Milliseconds of attention per kPartNames entry (the last: before a call's first part).
  const std::array<double, kParts + 1>& part_ms() const { return part_ms_; }
  // For kc::set_attention_part_hook, arg = the Phases.
  static void hook(kc::AttentionPart part, void* arg) { static_cast<Phases*>(arg)->mark_part(part); }

 private:
  void record(Kind k, std::size_t part) {
    if (used_ == events_.size()) events_.push_back(std::make_unique<kc::Event>());
    events_[used_]->record(kc::compute_stream());
    kinds_.resize(used_ + 1);
    parts_.resize(used_ + 1);
    kinds_[used_] = k;
    parts_[used_++] = part;
  }

  std::vector<std::unique_ptr<kc::Event>> events_;
  std::vector<Kind> kinds_;
  std::vector<std::size_t> parts_;  // for kAttention marks: the part (kParts: none yet)
  std::size_t used_ = 0;
  std::array<double, kParts + 1> part_ms_{};
};

class Step {
 public:
  // `micro` micro-batches of one sequence of `tokens` tokens each per optimizer step.
  Step(const model::LlamaConfig& cfg, std::int64_t tokens, std::int64_t micro)
      : cfg_(cfg),
        micro_(micro),
        dm_{tokens,    cfg.hidden,  cfg.q_dim(),    cfg.kv_dim(), cfg.ffn_hidden,
            cfg.vocab, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim},
        rope_host_(make_rope(cfg), tokens),
        rope_(rope_host_) {
    const Dims& m = dm_;
    const float std_w = 0.02f, std_res = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
    std::uint32_t seed = 1;
    emb_ = Param(m.vocab * m.d, true, 1.0f, seed++);
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      Layer& y = layers_.emplace_back();
      y.attn_norm = Param(m.d, false, 0, seed++, 1.0f);
      y.wqkv = Param(m.qkv() * m.d, true, std_w, seed++);
      y.wo = Param(m.d * m.q, true, std_res, seed++);
      y.mlp_norm = Param(m.d, false, 0, seed++, 1.0f);
      y.wgu = Param(2 * m.f * m.d, true, std_w, seed++);
      y.wdown = Param(m.d * m.f, true, std_res, seed++);
      y.x_in = Buf<float>(m.n * m.d);
      y.h = Buf<float>(m.n * m.d);
      y.rstd1 = Buf<float>(m.n);
      y.rstd2 = Buf<float>(m.n);
      y.lse = Buf<float>(m.heads * m.n);
      y.n1 = Buf<bf16>(m.n * m.d);
      y.qkv16 = Buf<bf16>(m.n * m.qkv());
      y.ao = Buf<bf16>(m.n * m.q);
      y.n2 = Buf<bf16>(m.n * m.d);
      y.gu16 = Buf<bf16>(m.n * 2 * m.f);
      y.act = Buf<bf16>(m.n * m.f);
    }
    final_norm_ = Param(m.d, false, 0, seed++, 1.0f);
    out_ = Param(m.vocab * m.d, true, 1.0f / std::sqrt(static_cast<float>(m.d)), seed++);
    // Scratch shared by the layers.
    x_ = Buf<float>(m.n * m.d);
    dx_ = Buf<float>(m.n * m.d);
    f32_nd_ = Buf<float>(m.n * m.d);
    qkv_ = Buf<float>(m.n * m.qkv());
    dact_ = Buf<float>(m.n * m.f);
    dao_ = Buf<float>(m.n * m.q);
    bf_nd_ = Buf<bf16>(m.n * m.d);
    dgu16_ = Buf<bf16>(m.n * 2 * m.f);
    dqkv16_ = Buf<bf16>(m.n * m.qkv());
    final_x_ = Buf<float>(m.n * m.d);
    final_rstd_ = Buf<float>(m.n);
    final16_ = Buf<bf16>(m.n * m.d);
    row_max_ = Buf<float>(m.n);
    row_sum_ = Buf<float>(m.n);
    tlogit_ = Buf<float>(m.n);
    ce_lse_ = Buf<float>(m.n);
    ce_ws_ = Buf<float>(kernels::cross_entropy_workspace(tiles_));
    // One fixed batch: per micro-batch random tokens, next-token targets, positions 0..n-1 (one causal
    // sequence).
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(m.vocab - 1));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(micro_ * m.n)), targets(ids.size());
    std::vector<std::int32_t> pos(static_cast<std::size_t>(m.n));
    for (std::int64_t u = 0; u < micro_; ++u) {
      std::int32_t next = tok(rng);
      for (std::int64_t i = 0; i < m.n; ++i) {
        const auto at = static_cast<std::size_t>(u * m.n + i);
        ids[at] = next;
        next = tok(rng);
        targets[at] = next;
      }
    }
    for (std::int64_t i = 0; i < m.n; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    ids_ = Buf<std::int32_t>(micro_ * m.n);
    targets_ = Buf<std::int32_t>(micro_ * m.n);
    pos_ = Buf<std::int32_t>(m.n);
    kc::copy_to_device(ids_.data(), ids.data(), ids_.bytes());
    kc::copy_to_device(targets_.data(), targets.data(), targets_.bytes());
    kc::copy_to_device(pos_.data(), pos.data(), pos_.bytes());
    for (Param* p : params()) adam_.push_back({p->p.data(), p->g.data(), p->m.data(), p->v.data(), p->n});
  }

  // One optimizer step over the micro-batches (gradients accumulate in fp32); returns the mean loss of
  // the batch before the update. With `phases`, marks the boundaries between kinds of kernel on it
  // (Phases::finish reads them).
  double run(std::int64_t step, Phases* phases = nullptr) {
    phases_ = phases;
    mark(Kind::kElementwise);
    for (Param* p : params()) kc::fill_zero(p->g.data(), p->g.bytes());
    double loss_sum = 0, count = 0;
    for (std::int64_t u = 0; u < micro_; ++u) {
      const kernels::CrossEntropyLoss loss = micro_batch(ids_.data() + u * dm_.n, targets_.data() + u * dm_.n);
      loss_sum += loss.loss_sum;
      count += static_cast<double>(loss.count);
    }
    kernels::AdamWConfig opt;
    opt.lr = 1e-4;
    mark(Kind::kOptimizer);
    kc::adamw_step(adam_, opt, step);
    for (Param* p : params()) {
      if (p->w16.data()) kc::to_bf16(p->p.data(), p->n, p->w16.data());
    }
    mark(Kind::kOptimizer);  // the closing mark
    phases_ = nullptr;
    return count > 0 ? loss_sum / count : 0.0;
  }

  std::int64_t param_count() {
    std::int64_t total = 0;
    for (Param* p : params()) total += p->n;
    return total;
  }

 private:
  // Forward and backward of one sequence; the gradients of the mean over the step's tokens accumulate.
  kernels::CrossEntropyLoss micro_batch(const std::int32_t* ids, const std::int32_t* targets) {
    const Dims& m = dm_;
    mark(Kind::kElementwise);
    kc::embedding_forward(ids, m.n, emb_.w16.data(), 0, m.vocab, m.d, x_.data());
    for (Layer& y : layers_) forward(y);
    mark(Kind::kLossHead);
    // Head: final norm, tiled cross-entropy with its backward (dh, dW_out accumulate).
    kc::rmsnorm_forward(x_.data(), m.d, final_norm_.p.data(), m.n, m.d, cfg_.norm_eps, final_x_.data(), m.d,
                        final_rstd_.data());
    kc::to_bf16(final_x_.data(), m.n * m.d, final16_.data());
    kc::ce_shard_stats(final16_.data(), m.n, m.d, out_.w16.data(), 0, m.vocab, targets, row_max_.data(),
                       row_sum_.data(), tlogit_.data(), tiles_, ce_ws_.data());
    const kernels::CrossEntropyLoss loss =
        kc::ce_combine_stats(m.n, 1, row_max_.data(), row_sum_.data(), tlogit_.data(), targets, ce_lse_.data());
    kc::fill_zero(f32_nd_.data(), f32_nd_.bytes());
    // Every micro-batch holds n targets (no ignored ones), so the step's mean is over micro x n tokens.
    kc::ce_shard_backward(final16_.data(), m.n, m.d, out_.w16.data(), 0, m.vocab, targets, ce_lse_.data(),
                          1.0f / static_cast<float>(micro_ * m.n), f32_nd_.data(), out_.g.data(), tiles_,
                          ce_ws_.data());
    kc::rmsnorm_backward(f32_nd_.data(), m.d, x_.data(), m.d, final_norm_.p.data(), final_rstd_.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kOverwrite, final_norm_.g.data());
    for (std::size_t l = layers_.size(); l-- > 0;) backward(layers_[l]);
    mark(Kind::kElementwise);
    kc::embedding_backward(ids, m.n, dx_.data(), 0, m.vocab, m.d, emb_.g.data());
    return loss;
  }

  static kernels::RopeConfig make_rope(const model::LlamaConfig& cfg) {
    kernels::RopeConfig r;
    r.head_dim = cfg.head_dim;
    r.theta = cfg.rope_theta;
    return r;
  }

  std::vector<Param*> params() {
    std::vector<Param*> out{&emb_};
    for (Layer& y : layers_) {
      for (Param* p : {&y.attn_norm, &y.wqkv, &y.wo, &y.mlp_norm, &y.wgu, &y.wdown}) out.push_back(p);
    }
    out.push_back(&final_norm_);
    out.push_back(&out_);
    return out;
  }

  kernels::AttentionDims attn_dims() const {
    kernels::AttentionDims a;
    a.batch = 1;
    a.tq = a.tk = dm_.n;
    a.q_heads = dm_.heads;
    a.kv_heads = dm_.kv_heads;
    a.head_dim = dm_.head_dim;
    a.ld_q = a.ld_k = a.ld_v = dm_.qkv();
    a.ld_o = dm_.q;
    return a;
  }
  kernels::AttentionMask attn_mask() const { return {pos_.data(), nullptr, pos_.data(), nullptr}; }

  void forward(Layer& y) {
    const Dims& m = dm_;
    const std::int64_t w = m.qkv();
    kc::copy_device(y.x_in.data(), x_.data(), x_.bytes());
    kc::rmsnorm_forward(x_.data(), m.d, y.attn_norm.p.data(), m.n, m.d, cfg_.norm_eps, f32_nd_.data(), m.d,
                        y.rstd1.data());
    kc::to_bf16(f32_nd_.data(), m.n * m.d, y.n1.data());
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, w, m.d, 1.0f, y.n1.data(), m.d, y.wqkv.w16.data(), m.d, 0.0f,
                  qkv_.data(), w);
    mark(Kind::kElementwise);
    kc::rope_forward(rope_, pos_.data(), m.n, m.heads, qkv_.data(), w);
    kc::rope_forward(rope_, pos_.data(), m.n, m.kv_heads, qkv_.data() + m.q, w);
    kc::to_bf16(qkv_.data(), m.n * w, y.qkv16.data());
    const bf16* q16 = y.qkv16.data();
    mark(Kind::kAttention);
    kc::attention_forward(attn_dims(), attn_mask(), q16, q16 + m.q, q16 + m.q + m.kv, y.ao.data(), y.lse.data());
    // x += ao Wo^T (the residual add is the GEMM's beta = 1).
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, m.d, m.q, 1.0f, y.ao.data(), m.q, y.wo.w16.data(), m.q, 1.0f, x_.data(),
                  m.d);
    mark(Kind::kElementwise);
    kc::copy_device(y.h.data(), x_.data(), x_.bytes());
    kc::rmsnorm_forward(x_.data(), m.d, y.mlp_norm.p.data(), m.n, m.d, cfg_.norm_eps, f32_nd_.data(), m.d,
                        y.rstd2.data());
    kc::to_bf16(f32_nd_.data(), m.n * m.d, y.n2.data());
    mark(Kind::kGemm);
    // gate | up saved in bf16 straight from the GEMM (fp32 sums rounded as they are written), as the
    // CPU trainer's bf16 mode saves them (kernels::gemm_bf16_rounded).
    kc::gemm_bf16_out(Trans::kNo, Trans::kYes, m.n, 2 * m.f, m.d, 1.0f, y.n2.data(), m.d, y.wgu.w16.data(), m.d,
                      y.gu16.data(), 2 * m.f);
    mark(Kind::kElementwise);
    kc::swiglu_forward(y.gu16.data(), 2 * m.f, y.gu16.data() + m.f, 2 * m.f, m.n, m.f, y.act.data(), m.f);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, m.d, m.f, 1.0f, y.act.data(), m.f, y.wdown.w16.data(), m.f, 1.0f,
                  x_.data(), m.d);
    mark(Kind::kElementwise);
  }

  // dx_ holds dL/d(block output) on entry and dL/d(block input) on return.
  void backward(Layer& y) {
    const Dims& m = dm_;
    const std::int64_t w = m.qkv();
    // MLP.
    kc::to_bf16(dx_.data(), m.n * m.d, bf_nd_.data());
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kYes, Trans::kNo, m.d, m.f, m.n, 1.0f, bf_nd_.data(), m.d, y.act.data(), m.f, 1.0f,
                  y.wdown.g.data(), m.f);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.f, m.d, 1.0f, bf_nd_.data(), m.d, y.wdown.w16.data(), m.f, 0.0f,
                  dact_.data(), m.f);
    mark(Kind::kElementwise);
    kc::swiglu_backward(dact_.data(), m.f, y.gu16.data(), 2 * m.f, y.gu16.data() + m.f, 2 * m.f, m.n, m.f,
                        dgu16_.data(), 2 * m.f, dgu16_.data() + m.f, 2 * m.f);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kYes, Trans::kNo, 2 * m.f, m.d, m.n, 1.0f, dgu16_.data(), 2 * m.f, y.n2.data(), m.d, 1.0f,
                  y.wgu.g.data(), m.d);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.d, 2 * m.f, 1.0f, dgu16_.data(), 2 * m.f, y.wgu.w16.data(), m.d, 0.0f,
                  f32_nd_.data(), m.d);
    mark(Kind::kElementwise);
    kc::rmsnorm_backward(f32_nd_.data(), m.d, y.h.data(), m.d, y.mlp_norm.p.data(), y.rstd2.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kAdd, y.mlp_norm.g.data());
    // Attention.
    kc::to_bf16(dx_.data(), m.n * m.d, bf_nd_.data());
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kYes, Trans::kNo, m.d, m.q, m.n, 1.0f, bf_nd_.data(), m.d, y.ao.data(), m.q, 1.0f,
                  y.wo.g.data(), m.q);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.q, m.d, 1.0f, bf_nd_.data(), m.d, y.wo.w16.data(), m.q, 0.0f,
                  dao_.data(), m.q);
    const bf16* q16 = y.qkv16.data();
    float* dq = qkv_.data();  // the fp32 qkv scratch holds dq | dk | dv, token stride w
    mark(Kind::kAttention);
    kc::attention_backward(attn_dims(), attn_mask(), q16, q16 + m.q, q16 + m.q + m.kv, y.ao.data(), y.lse.data(),
                           dao_.data(), dq, dq + m.q, dq + m.q + m.kv);
    mark(Kind::kElementwise);
    kc::rope_backward(rope_, pos_.data(), m.n, m.heads, dq, w);
    kc::rope_backward(rope_, pos_.data(), m.n, m.kv_heads, dq + m.q, w);
    kc::to_bf16(dq, m.n * w, dqkv16_.data());
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kYes, Trans::kNo, w, m.d, m.n, 1.0f, dqkv16_.data(), w, y.n1.data(), m.d, 1.0f,
                  y.wqkv.g.data(), m.d);
    mark(Kind::kGemm);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.d, w, 1.0f, dqkv16_.data(), w, y.wqkv.w16.data(), m.d, 0.0f,
                  f32_nd_.data(), m.d);
    mark(Kind::kElementwise);
    kc::rmsnorm_backward(f32_nd_.data(), m.d, y.x_in.data(), m.d, y.attn_norm.p.data(), y.rstd1.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kAdd, y.attn_norm.g.data());
  }

  void mark(Kind k) {
    if (phases_) phases_->mark(k);
  }

  model::LlamaConfig cfg_;
  std::int64_t micro_ = 1;
  Dims dm_;
  Phases* phases_ = nullptr;
  kernels::RopeTable<float> rope_host_;
  kc::DeviceRopeTable rope_;
  kernels::CrossEntropyTiles tiles_{4096, 16384};
  Param emb_, final_norm_, out_;
  std::vector<Layer> layers_;
  std::vector<kc::AdamWTensor> adam_;
  Buf<float> x_, dx_, f32_nd_, qkv_, dact_, dao_, final_x_, final_rstd_, row_max_, row_sum_, tlogit_, ce_lse_, ce_ws_;
  Buf<bf16> bf_nd_, dgu16_, dqkv16_, final16_;
  Buf<std::int32_t> ids_, targets_, pos_;
};

int run(int argc, char** argv) {
  CLI::App app{"herd GPU training-step benchmark (bench/gpu/README.md)"};
  std::string model_path = std::string(HERD_SOURCE_DIR) + "/bench/gpu/llama3-1b.json";
  std::vector<std::int64_t> seqs = {2048, 8192};
  std::int64_t warmup = 2, steps = 5, tokens_per_step = 16384;
  double peak_tflops = 989.0;  // H100/H200 SXM bf16 dense tensor-core peak (NVIDIA's data sheet)
  std::string out;
  app.add_option("--model", model_path, "Hugging Face config.json of the model");
  app.add_option("--seq", seqs, "Sequence lengths (one sequence per micro-batch)");
  app.add_option("--tokens-per-step", tokens_per_step,
                 "Tokens per optimizer step: max(1, this / seq) micro-batches of one sequence, gradients accumulated");
  app.add_option("--warmup", warmup, "Untimed steps first");
  app.add_option("--steps", steps, "Timed steps");
  app.add_option("--peak-tflops", peak_tflops, "bf16 dense peak of the GPU for MFU");
  app.add_option("--json", out, "Write the JSON here (default: stdout)");
  std::string attention_kernels = "mma";
  app.add_option("--attention-kernels", attention_kernels,
                 "bf16 attention kernels where head_dim is a multiple of 16 up to 128: cuda-cores (attention.cu, "
                 "fp32 products) or mma (attention_mma.cu, mma.sync)")
      ->check(CLI::IsMember({"cuda-cores", "mma"}));
  CLI11_PARSE(app, argc, argv);

  std::string why;
  if (kc::device_count(&why) == 0) {
    std::cerr << "herd_bench_gpu: no GPU (" << why << ")\n";
    return 77;
  }
  Result<model::LlamaConfig> cfg = model::load_hf_config(model_path);
  if (!cfg.ok()) {
    std::cerr << "herd_bench_gpu: " << cfg.error().message() << "\n";
    return 1;
  }
  kc::set_device(0);
  Json doc = envelope("gpu_train_step");
  doc["gpu"] = kc::describe_device(0);
  doc["peak_bf16_tflops"] = peak_tflops;
  kc::set_attention_kernels(attention_kernels == "mma" ? kc::AttentionKernels::kMma : kc::AttentionKernels::kCudaCores);
  doc["attention_kernels"] = attention_kernels;  // cuda-cores | mma (tensor cores where head_dim % 16 == 0)
  for (const std::int64_t seq : seqs) {
    kc::release_cached();
    kc::reset_peak_stats();
    const std::int64_t micro = std::max<std::int64_t>(1, tokens_per_step / seq), tokens = micro * seq;
    Step step(*cfg, seq, micro);
    std::vector<double> losses;
    for (std::int64_t s = 1; s <= warmup; ++s) losses.push_back(step.run(s));
    kc::synchronize();
    kc::Event start, stop;
    start.record(kc::compute_stream());
    for (std::int64_t s = warmup + 1; s <= warmup + steps; ++s) losses.push_back(step.run(s));
    stop.record(kc::compute_stream());
    stop.synchronize();
    const double step_s = kc::Event::elapsed_ms(start, stop) / 1e3 / static_cast<double>(steps);
    const double flops_per_token =
        model::train_model_flops_per_token(*cfg, seq, model::AttentionMask::causal(), model::FlopConvention::kExact)
            .value();
    const double tflops = flops_per_token * static_cast<double>(tokens) / step_s / 1e12;
    const kc::AllocatorStats mem = kc::allocator_stats();
    // One more step, with its kernels' time split by kind (the events would perturb the timed ones).
    Phases phases;
    kc::synchronize();
    kc::set_attention_part_hook(&Phases::hook, &phases);
    step.run(warmup + steps + 1, &phases);
    kc::set_attention_part_hook(nullptr, nullptr);
    const auto phase_ms = phases.finish();
    Json split;
    std::string split_line;
    for (std::size_t k = 0; k < phase_ms.size(); ++k) {
      split[kKindNames[k]] = phase_ms[k] / 1e3;
      split_line += std::string(k ? ", " : "") + kKindNames[k] + " " +
                    std::to_string(static_cast<int>(phase_ms[k] + 0.5)) + " ms";
    }
    Json attn_split;
    std::string attn_line;
    for (std::size_t k = 0; k <= kParts; ++k) {
      attn_split[kPartNames[k]] = phases.part_ms()[k];
      attn_line += std::string(k ? ", " : "") + kPartNames[k] + " " +
                   std::to_string(static_cast<int>(phases.part_ms()[k] + 0.5)) + " ms";
    }
    Json r;
    r["model"] = cfg->name;
    r["params"] = step.param_count();
    r["seq_len"] = seq;
    r["micro_batches"] = micro;
    r["tokens_per_step"] = tokens;
    r["step_s"] = step_s;
    r["tokens_per_s"] = static_cast<double>(tokens) / step_s;
    r["model_tflops_per_token"] = flops_per_token / 1e12;
    r["achieved_tflops"] = tflops;
    r["mfu"] = tflops / peak_tflops;
    r["peak_allocated_gib"] = static_cast<double>(mem.peak_allocated) / (1u << 30);
    r["peak_reserved_gib"] = static_cast<double>(mem.peak_reserved) / (1u << 30);
    r["step_split_s"] = split;             // seconds per kind of kernel in one step (events between kinds)
    r["attention_split_ms"] = attn_split;  // that step's attention time (milliseconds) by kernel
    r["losses"] = losses;
    r["loss_fell"] = losses.size() > 1 && losses.back() < losses.front();
    std::fprintf(stderr,
                 "seq %lld x %lld micro-batches (attention on %s): %.1f ms/step, %.0f tokens/s, %.0f TFLOP/s, "
                 "MFU %.1f%%, peak %.1f GiB, loss %.4f -> %.4f\n",
                 static_cast<long long>(seq), static_cast<long long>(micro), attention_kernels.c_str(), step_s * 1e3,
                 static_cast<double>(tokens) / step_s, tflops, 100 * tflops / peak_tflops,
                 static_cast<double>(mem.peak_allocated) / (1u << 30), losses.front(), losses.back());
    std::fprintf(stderr, "  one step by kind of kernel: %s\n", split_line.c_str());
    std::fprintf(stderr, "  its attention by kernel: %s\n", attn_line.c_str());
    doc["results"].push_back(r);
  }
  write_result(doc, out);
  return 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  try {
    return herd::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "herd_bench_gpu: " << e.what() << "\n";
    return 1;
  }
}

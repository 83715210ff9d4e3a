// One bf16 training step of a Llama-3-architecture model on one GPU, run as the sequence of kernels/cuda
// calls that herd's bf16 step makes (nn/block.cpp in bf16 mode: bf16 weight copies and matmul inputs, fp32
// master weights, norms, RoPE, softmax statistics, loss, gradients and AdamW), on device buffers:
// embedding, L blocks forward (saving their activations), the vocabulary-tiled cross-entropy head and
// its backward, L blocks backward, the embedding gradient, AdamW over every tensor in one multi-tensor
// launch and the bf16 re-copy of the weights. Timed with CUDA events over steps after warm-up.
//
// It measures what the kernels reach on the hardware (tokens/s, achieved TFLOP/s and MFU against the
// GPU's bf16 dense peak, peak device memory) and prints the loss of the same batch each step, which
// must fall if the backward is right. It is not `herd train`: no data pipeline, no communicator, no
// checkpoint (docs/gpu.md says what runs where). bench/gpu/README.md has the command and the planner's
// prediction for the same run beside it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
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

class Step {
 public:
  Step(const model::LlamaConfig& cfg, std::int64_t tokens)
      : cfg_(cfg),
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
    gu_ = Buf<float>(m.n * 2 * m.f);
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
    // One fixed batch: random tokens, next-token targets, positions 0..n-1 (one causal sequence).
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(m.vocab - 1));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(m.n + 1)), pos(static_cast<std::size_t>(m.n));
    for (auto& t : ids) t = tok(rng);
    for (std::int64_t i = 0; i < m.n; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    ids_ = Buf<std::int32_t>(m.n);
    targets_ = Buf<std::int32_t>(m.n);
    pos_ = Buf<std::int32_t>(m.n);
    kc::copy_to_device(ids_.data(), ids.data(), ids_.bytes());
    kc::copy_to_device(targets_.data(), ids.data() + 1, targets_.bytes());
    kc::copy_to_device(pos_.data(), pos.data(), pos_.bytes());
    for (Param* p : params()) adam_.push_back({p->p.data(), p->g.data(), p->m.data(), p->v.data(), p->n});
  }

  // One optimizer step; returns the mean loss of the batch before the update.
  double run(std::int64_t step) {
    const Dims& m = dm_;
    for (Param* p : params()) kc::fill_zero(p->g.data(), p->g.bytes());
    kc::embedding_forward(ids_.data(), m.n, emb_.w16.data(), 0, m.vocab, m.d, x_.data());
    for (Layer& y : layers_) forward(y);
    // Head: final norm, tiled cross-entropy with its backward (dh, dW_out accumulate).
    kc::rmsnorm_forward(x_.data(), m.d, final_norm_.p.data(), m.n, m.d, cfg_.norm_eps, final_x_.data(), m.d,
                        final_rstd_.data());
    kc::to_bf16(final_x_.data(), m.n * m.d, final16_.data());
    kc::ce_shard_stats(final16_.data(), m.n, m.d, out_.w16.data(), 0, m.vocab, targets_.data(), row_max_.data(),
                       row_sum_.data(), tlogit_.data(), tiles_, ce_ws_.data());
    const kernels::CrossEntropyLoss loss =
        kc::ce_combine_stats(m.n, 1, row_max_.data(), row_sum_.data(), tlogit_.data(), targets_.data(), ce_lse_.data());
    kc::fill_zero(f32_nd_.data(), f32_nd_.bytes());
    kc::ce_shard_backward(final16_.data(), m.n, m.d, out_.w16.data(), 0, m.vocab, targets_.data(), ce_lse_.data(),
                          1.0f / static_cast<float>(loss.count), f32_nd_.data(), out_.g.data(), tiles_, ce_ws_.data());
    kc::rmsnorm_backward(f32_nd_.data(), m.d, x_.data(), m.d, final_norm_.p.data(), final_rstd_.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kOverwrite, final_norm_.g.data());
    for (std::size_t l = layers_.size(); l-- > 0;) backward(layers_[l]);
    kc::embedding_backward(ids_.data(), m.n, dx_.data(), 0, m.vocab, m.d, emb_.g.data());
    kernels::AdamWConfig opt;
    opt.lr = 1e-4;
    kc::adamw_step(adam_, opt, step);
    for (Param* p : params()) {
      if (p->w16.data()) kc::to_bf16(p->p.data(), p->n, p->w16.data());
    }
    return loss.count ? loss.loss_sum / static_cast<double>(loss.count) : 0.0;
  }

  std::int64_t param_count() {
    std::int64_t total = 0;
    for (Param* p : params()) total += p->n;
    return total;
  }

 private:
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
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, w, m.d, 1.0f, y.n1.data(), m.d, y.wqkv.w16.data(), m.d, 0.0f,
                  qkv_.data(), w);
    kc::rope_forward(rope_, pos_.data(), m.n, m.heads, qkv_.data(), w);
    kc::rope_forward(rope_, pos_.data(), m.n, m.kv_heads, qkv_.data() + m.q, w);
    kc::to_bf16(qkv_.data(), m.n * w, y.qkv16.data());
    const bf16* q16 = y.qkv16.data();
    kc::attention_forward(attn_dims(), attn_mask(), q16, q16 + m.q, q16 + m.q + m.kv, y.ao.data(), y.lse.data());
    // x += ao Wo^T (the residual add is the GEMM's beta = 1).
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, m.d, m.q, 1.0f, y.ao.data(), m.q, y.wo.w16.data(), m.q, 1.0f, x_.data(),
                  m.d);
    kc::copy_device(y.h.data(), x_.data(), x_.bytes());
    kc::rmsnorm_forward(x_.data(), m.d, y.mlp_norm.p.data(), m.n, m.d, cfg_.norm_eps, f32_nd_.data(), m.d,
                        y.rstd2.data());
    kc::to_bf16(f32_nd_.data(), m.n * m.d, y.n2.data());
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, 2 * m.f, m.d, 1.0f, y.n2.data(), m.d, y.wgu.w16.data(), m.d, 0.0f,
                  gu_.data(), 2 * m.f);
    kc::to_bf16(gu_.data(), m.n * 2 * m.f, y.gu16.data());
    kc::swiglu_forward(y.gu16.data(), 2 * m.f, y.gu16.data() + m.f, 2 * m.f, m.n, m.f, y.act.data(), m.f);
    kc::gemm_bf16(Trans::kNo, Trans::kYes, m.n, m.d, m.f, 1.0f, y.act.data(), m.f, y.wdown.w16.data(), m.f, 1.0f,
                  x_.data(), m.d);
  }

  // dx_ holds dL/d(block output) on entry and dL/d(block input) on return.
  void backward(Layer& y) {
    const Dims& m = dm_;
    const std::int64_t w = m.qkv();
    // MLP.
    kc::to_bf16(dx_.data(), m.n * m.d, bf_nd_.data());
    kc::gemm_bf16(Trans::kYes, Trans::kNo, m.d, m.f, m.n, 1.0f, bf_nd_.data(), m.d, y.act.data(), m.f, 1.0f,
                  y.wdown.g.data(), m.f);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.f, m.d, 1.0f, bf_nd_.data(), m.d, y.wdown.w16.data(), m.f, 0.0f,
                  dact_.data(), m.f);
    kc::swiglu_backward(dact_.data(), m.f, y.gu16.data(), 2 * m.f, y.gu16.data() + m.f, 2 * m.f, m.n, m.f,
                        dgu16_.data(), 2 * m.f, dgu16_.data() + m.f, 2 * m.f);
    kc::gemm_bf16(Trans::kYes, Trans::kNo, 2 * m.f, m.d, m.n, 1.0f, dgu16_.data(), 2 * m.f, y.n2.data(), m.d, 1.0f,
                  y.wgu.g.data(), m.d);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.d, 2 * m.f, 1.0f, dgu16_.data(), 2 * m.f, y.wgu.w16.data(), m.d, 0.0f,
                  f32_nd_.data(), m.d);
    kc::rmsnorm_backward(f32_nd_.data(), m.d, y.h.data(), m.d, y.mlp_norm.p.data(), y.rstd2.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kAdd, y.mlp_norm.g.data());
    // Attention.
    kc::to_bf16(dx_.data(), m.n * m.d, bf_nd_.data());
    kc::gemm_bf16(Trans::kYes, Trans::kNo, m.d, m.q, m.n, 1.0f, bf_nd_.data(), m.d, y.ao.data(), m.q, 1.0f,
                  y.wo.g.data(), m.q);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.q, m.d, 1.0f, bf_nd_.data(), m.d, y.wo.w16.data(), m.q, 0.0f,
                  dao_.data(), m.q);
    const bf16* q16 = y.qkv16.data();
    float* dq = qkv_.data();  // the fp32 qkv scratch holds dq | dk | dv, token stride w
    kc::attention_backward(attn_dims(), attn_mask(), q16, q16 + m.q, q16 + m.q + m.kv, y.ao.data(), y.lse.data(),
                           dao_.data(), dq, dq + m.q, dq + m.q + m.kv);
    kc::rope_backward(rope_, pos_.data(), m.n, m.heads, dq, w);
    kc::rope_backward(rope_, pos_.data(), m.n, m.kv_heads, dq + m.q, w);
    kc::to_bf16(dq, m.n * w, dqkv16_.data());
    kc::gemm_bf16(Trans::kYes, Trans::kNo, w, m.d, m.n, 1.0f, dqkv16_.data(), w, y.n1.data(), m.d, 1.0f,
                  y.wqkv.g.data(), m.d);
    kc::gemm_bf16(Trans::kNo, Trans::kNo, m.n, m.d, w, 1.0f, dqkv16_.data(), w, y.wqkv.w16.data(), m.d, 0.0f,
                  f32_nd_.data(), m.d);
    kc::rmsnorm_backward(f32_nd_.data(), m.d, y.x_in.data(), m.d, y.attn_norm.p.data(), y.rstd1.data(), m.n, m.d,
                         dx_.data(), m.d, Accumulate::kAdd, y.attn_norm.g.data());
  }

  model::LlamaConfig cfg_;
  Dims dm_;
  kernels::RopeTable<float> rope_host_;
  kc::DeviceRopeTable rope_;
  kernels::CrossEntropyTiles tiles_{4096, 16384};
  Param emb_, final_norm_, out_;
  std::vector<Layer> layers_;
  std::vector<kc::AdamWTensor> adam_;
  Buf<float> x_, dx_, f32_nd_, qkv_, gu_, dact_, dao_, final_x_, final_rstd_, row_max_, row_sum_, tlogit_, ce_lse_,
      ce_ws_;
  Buf<bf16> bf_nd_, dgu16_, dqkv16_, final16_;
  Buf<std::int32_t> ids_, targets_, pos_;
};

int run(int argc, char** argv) {
  CLI::App app{"herd GPU training-step benchmark (bench/gpu/README.md)"};
  std::string model_path = std::string(HERD_SOURCE_DIR) + "/bench/gpu/llama3-1b.json";
  std::vector<std::int64_t> seqs = {2048, 8192};
  std::int64_t warmup = 2, steps = 5;
  double peak_tflops = 989.0;  // H100/H200 SXM bf16 dense tensor-core peak (NVIDIA's data sheet)
  std::string out;
  app.add_option("--model", model_path, "Hugging Face config.json of the model");
  app.add_option("--seq", seqs, "Sequence lengths (one sequence per step)");
  app.add_option("--warmup", warmup, "Untimed steps first");
  app.add_option("--steps", steps, "Timed steps");
  app.add_option("--peak-tflops", peak_tflops, "bf16 dense peak of the GPU for MFU");
  app.add_option("--json", out, "Write the JSON here (default: stdout)");
  bool attention_tc = true;
  app.add_option("--attention-tensor-cores", attention_tc,
                 "bf16 attention on the tensor-core kernels (attention_tc.cu; head_dim a multiple of 16) or, "
                 "false, the CUDA-core ones (attention.cu)");
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
  kc::set_attention_tensor_cores(attention_tc);
  doc["attention_kernels"] =
      kc::attention_tensor_cores() ? "tensor cores (bf16 wmma) where head_dim % 16 == 0" : "CUDA cores (fp32)";
  for (const std::int64_t seq : seqs) {
    kc::release_cached();
    kc::reset_peak_stats();
    Step step(*cfg, seq);
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
    const double tflops = flops_per_token * static_cast<double>(seq) / step_s / 1e12;
    const kc::AllocatorStats mem = kc::allocator_stats();
    Json r;
    r["model"] = cfg->name;
    r["params"] = step.param_count();
    r["seq_len"] = seq;
    r["tokens_per_step"] = seq;
    r["step_s"] = step_s;
    r["tokens_per_s"] = static_cast<double>(seq) / step_s;
    r["model_tflops_per_token"] = flops_per_token / 1e12;
    r["achieved_tflops"] = tflops;
    r["mfu"] = tflops / peak_tflops;
    r["peak_allocated_gib"] = static_cast<double>(mem.peak_allocated) / (1u << 30);
    r["peak_reserved_gib"] = static_cast<double>(mem.peak_reserved) / (1u << 30);
    r["losses"] = losses;
    r["loss_fell"] = losses.size() > 1 && losses.back() < losses.front();
    std::fprintf(stderr,
                 "seq %lld (attention on %s): %.1f ms/step, %.0f tokens/s, %.0f TFLOP/s, MFU %.1f%%, peak %.1f GiB, "
                 "loss %.4f -> %.4f\n",
                 static_cast<long long>(seq), kc::attention_tensor_cores() ? "tensor cores" : "CUDA cores",
                 step_s * 1e3, static_cast<double>(seq) / step_s, tflops, 100 * tflops / peak_tflops,
                 static_cast<double>(mem.peak_allocated) / (1u << 30), losses.front(), losses.back());
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

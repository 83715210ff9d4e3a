// Naive reference kernels: the specification the fast CPU path (and later CUDA) is tested against.
//
// Written for clarity, not speed: full score rows, full logit rows, loops in the order of the math,
// accumulation in double. Each mirrors one op of the kernel headers with the same layout and the
// same gradient contract, but is derived independently where it matters: attention's backward uses
// sum_j P dP (not dO . O), RoPE computes its angles directly (no table), and cross-entropy holds
// every logit of a row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "herd/kernels/attention.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rope.h"

namespace herd::kernels::ref {

template <typename T>
void rmsnorm_forward(const T* x, const T* w, std::int64_t n, std::int64_t dim, double eps, T* y, T* rstd) {
  for (std::int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (std::int64_t j = 0; j < dim; ++j) ss += double(x[i * dim + j]) * x[i * dim + j];
    const double r = 1.0 / std::sqrt(ss / dim + eps);
    rstd[i] = T(r);
    for (std::int64_t j = 0; j < dim; ++j) y[i * dim + j] = T(x[i * dim + j] * r * w[j]);
  }
}

// dx written; dw +=.
template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, std::int64_t n, std::int64_t dim, double eps, T* dx, T* dw) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * dim;
    const T* gi = dy + i * dim;
    double ss = 0;
    for (std::int64_t j = 0; j < dim; ++j) ss += double(xi[j]) * xi[j];
    const double r = 1.0 / std::sqrt(ss / dim + eps);
    // y_j = w_j x_j r; dr/dx_k = -r^3 x_k / dim.
    double dot = 0;
    for (std::int64_t j = 0; j < dim; ++j) dot += double(gi[j]) * w[j] * xi[j];
    for (std::int64_t k = 0; k < dim; ++k) {
      dx[i * dim + k] = T(gi[k] * w[k] * r - dot * r * r * r * xi[k] / dim);
      dw[k] += T(double(gi[k]) * xi[k] * r);
    }
  }
}

template <typename T>
void swiglu_forward(const T* gate, const T* up, std::int64_t n, T* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = T(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

template <typename T>
void swiglu_backward(const T* dout, const T* gate, const T* up, std::int64_t n, T* dgate, T* dup) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
    dgate[i] = T(dout[i] * up[i] * (s + g * s * (1.0 - s)));
    dup[i] = T(dout[i] * g * s);
  }
}

// x (n, heads, D) dense; rotated in place by +angle (sign = 1) or -angle (sign = -1).
template <typename T>
void rope_rotate(const RopeConfig& cfg, const std::int32_t* pos, std::int64_t n, std::int64_t heads, T* x, int sign) {
  const std::vector<double> f = rope_inv_freq(cfg);
  const std::int64_t d = cfg.head_dim, half = d / 2;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < half; ++i) {
        const double a = sign * double(pos[t]) * f[i];
        const std::int64_t ia = cfg.layout == RopeLayout::kHalf ? i : 2 * i;
        const std::int64_t ib = cfg.layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
        T* xh = x + (t * heads + h) * d;
        const double u = xh[ia], v = xh[ib];
        xh[ia] = T(u * std::cos(a) - v * std::sin(a));
        xh[ib] = T(u * std::sin(a) + v * std::cos(a));
      }
}

inline bool visible(const AttentionMask& m, std::int64_t b, std::int64_t tq, std::int64_t tk, std::int64_t i,
                    std::int64_t j) {
  const std::int32_t dq = m.doc_q ? m.doc_q[b * tq + i] : 0, dk = m.doc_k ? m.doc_k[b * tk + j] : 0;
  return dq == dk && m.pos_k[b * tk + j] <= m.pos_q[b * tq + i];
}

// Dense layouts only (ld_* = 0). Full softmax over all Tk keys per query.
template <typename T>
void attention_forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  const std::int64_t D = d.head_dim, g = d.q_heads / d.kv_heads;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> s(d.tk);
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.q_heads; ++h)
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const T* qi = q + ((b * d.tq + i) * d.q_heads + h) * D;
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < d.tk; ++j) {
          const T* kj = k + ((b * d.tk + j) * d.kv_heads + h / g) * D;
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c) dot += double(qi[c]) * kj[c];
          s[j] = visible(m, b, d.tq, d.tk, i, j) ? dot * scale : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < d.tk; ++j) sum += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
        T* oi = out + ((b * d.tq + i) * d.q_heads + h) * D;
        for (std::int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < d.tk; ++j) {
            if (std::isinf(s[j])) continue;
            acc += std::exp(s[j] - mx) / sum * v[((b * d.tk + j) * d.kv_heads + h / g) * D + c];
          }
          oi[c] = T(sum > 0 ? acc : 0.0);
        }
        lse[(b * d.q_heads + h) * d.tq + i] =
            T(sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity());
      }
}

// dq, dk, dv written (dense).
template <typename T>
void attention_backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v,
                        const T* dout, T* dq, T* dk, T* dv) {
  const std::int64_t D = d.head_dim, g = d.q_heads / d.kv_heads;
  const double scale = 1.0 / std::sqrt(double(D));
  std::fill(dq, dq + d.batch * d.tq * d.q_heads * D, T(0));
  std::fill(dk, dk + d.batch * d.tk * d.kv_heads * D, T(0));
  std::fill(dv, dv + d.batch * d.tk * d.kv_heads * D, T(0));
  std::vector<double> p(d.tk), dp(d.tk);
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.q_heads; ++h)
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const T* qi = q + ((b * d.tq + i) * d.q_heads + h) * D;
        const T* gi = dout + ((b * d.tq + i) * d.q_heads + h) * D;
        auto krow = [&](std::int64_t j) { return ((b * d.tk + j) * d.kv_heads + h / g) * D; };
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < d.tk; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c) dot += double(qi[c]) * k[krow(j) + c];
          p[j] = visible(m, b, d.tq, d.tk, i, j) ? dot * scale : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, p[j]);
        }
        if (std::isinf(mx)) continue;
        double sum = 0;
        for (std::int64_t j = 0; j < d.tk; ++j) sum += std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
        double pdp = 0;
        for (std::int64_t j = 0; j < d.tk; ++j) {
          p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx) / sum;
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c) dot += double(gi[c]) * v[krow(j) + c];
          dp[j] = dot;
          pdp += p[j] * dot;
        }
        for (std::int64_t j = 0; j < d.tk; ++j) {
          const double ds = p[j] * (dp[j] - pdp) * scale;
          for (std::int64_t c = 0; c < D; ++c) {
            dq[((b * d.tq + i) * d.q_heads + h) * D + c] += T(ds * k[krow(j) + c]);
            dk[krow(j) + c] += T(ds * qi[c]);
            dv[krow(j) + c] += T(p[j] * gi[c]);
          }
        }
      }
}

// Full-vocab cross-entropy: loss, lse (n), dh (n, dim) +=, dw (V, dim) +=, with scale = dL/dloss_row.
template <typename T>
CrossEntropyLoss cross_entropy(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab,
                               const std::int32_t* targets, double scale, T* lse, T* dh, T* dw) {
  CrossEntropyLoss loss;
  std::vector<double> z(vocab);
  for (std::int64_t i = 0; i < n; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t v = 0; v < vocab; ++v) {
      double dot = 0;
      for (std::int64_t c = 0; c < dim; ++c) dot += double(h[i * dim + c]) * w[v * dim + c];
      z[v] = dot;
      mx = std::max(mx, dot);
    }
    double sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - mx);
    const double l = mx + std::log(sum);
    lse[i] = T(l);
    if (targets[i] == kIgnoreIndex) continue;
    loss.loss_sum += l - z[targets[i]];
    ++loss.count;
    for (std::int64_t v = 0; v < vocab; ++v) {
      const double gv = (std::exp(z[v] - l) - (v == targets[i] ? 1.0 : 0.0)) * scale;
      for (std::int64_t c = 0; c < dim; ++c) {
        dh[i * dim + c] += T(gv * w[v * dim + c]);
        dw[v * dim + c] += T(gv * h[i * dim + c]);
      }
    }
  }
  return loss;
}

template <typename T>
void adamw_step(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWConfig& c, std::int64_t step) {
  for (std::int64_t i = 0; i < n; ++i) {
    double pi = p[i];
    pi -= c.lr * c.weight_decay * pi;
    const double mi = c.beta1 * m[i] + (1 - c.beta1) * g[i];
    const double vi = c.beta2 * v[i] + (1 - c.beta2) * double(g[i]) * g[i];
    const double mhat = mi / (1 - std::pow(c.beta1, double(step)));
    const double vhat = vi / (1 - std::pow(c.beta2, double(step)));
    p[i] = T(pi - c.lr * mhat / (std::sqrt(vhat) + c.eps));
    m[i] = T(mi);
    v[i] = T(vi);
  }
}

}  // namespace herd::kernels::ref

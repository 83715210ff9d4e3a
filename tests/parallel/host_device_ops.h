// A device for the tests that is host memory underneath: every kernel is the CPU's, and the interface
// keeps the device's contract (kernels/ops.h) checked. It says it is `Device::kCuda`, so the code paths
// a GPU run takes (staging through host copies, the communicators' device path) run on any machine, and
// it records every pointer handed to a kernel that is not memory it allocated: the call a real GPU
// would fault on. Copies between host and device are the only way in and out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "herd/kernels/ops.h"

namespace herd::kernels::testing {

class HostDeviceOps final : public Ops {
 public:
  Device device() const override { return Device::kCuda; }
  void* allocate(std::size_t bytes) const override {
    void* p = inner_.allocate(bytes);
    std::lock_guard<std::mutex> lk(mu_);
    live_[static_cast<const char*>(p)] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void deallocate(void* p) const override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = live_.find(static_cast<const char*>(p));
      if (it == live_.end()) {
        violations_.push_back("deallocate of memory this device did not allocate");
      } else {
        in_use_ -= it->second;
        live_.erase(it);
      }
    }
    inner_.deallocate(p);
  }
  void copy_from_host(const void* host, void* dst, std::size_t bytes) const override {
    on_device(dst, "copy_from_host", "dst");
    not_on_device(host, "copy_from_host", "host");
    inner_.copy(host, dst, bytes);
  }
  void copy_to_host(const void* src, void* host, std::size_t bytes) const override {
    on_device(src, "copy_to_host", "src");
    not_on_device(host, "copy_to_host", "host");
    inner_.copy(src, host, bytes);
  }
  void synchronize() const override {}
  bool holds(const void* p) const override {
    std::lock_guard<std::mutex> lk(mu_);
    return find(p);
  }
  void* queue() const override { return nullptr; }
  double peak_allocated_bytes() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return static_cast<double>(peak_);
  }

  // Calls that handed a kernel host memory, or a copy device memory where it expected the host's.
  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lk(mu_);
    return violations_;
  }

  void copy(const void* src, void* dst, std::size_t bytes) const override {
    on_device(src, "copy", "src");
    on_device(dst, "copy", "dst");
    inner_.copy(src, dst, bytes);
  }
  void copy_rows(const void* src, std::size_t src_pitch, void* dst, std::size_t dst_pitch, std::size_t row_bytes,
                 std::int64_t rows) const override {
    on_device(src, "copy_rows", "src");
    on_device(dst, "copy_rows", "dst");
    inner_.copy_rows(src, src_pitch, dst, dst_pitch, row_bytes, rows);
  }
  void zero(void* dst, std::size_t bytes) const override {
    on_device(dst, "zero", "dst");
    inner_.zero(dst, bytes);
  }
  void add(const float* x, std::int64_t n, float* y) const override {
    on_device(x, "add", "x");
    on_device(y, "add", "y");
    inner_.add(x, n, y);
  }
  void add(const double* x, std::int64_t n, double* y) const override {
    on_device(x, "add", "x");
    on_device(y, "add", "y");
    inner_.add(x, n, y);
  }
  void to_bf16(const float* x, std::int64_t n, bf16* out) const override {
    on_device(x, "to_bf16", "x");
    on_device(out, "to_bf16", "out");
    inner_.to_bf16(x, n, out);
  }
  void to_float(const bf16* x, std::int64_t n, float* out) const override {
    on_device(x, "to_float", "x");
    on_device(out, "to_float", "out");
    inner_.to_float(x, n, out);
  }
  void round_to_bf16(float* x, std::int64_t n, bf16* out) const override {
    on_device(x, "round_to_bf16", "x");
    on_device(out, "round_to_bf16", "out");
    inner_.round_to_bf16(x, n, out);
  }
  void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) const override {
    on_device(a, "gemm", "a");
    on_device(b, "gemm", "b");
    on_device(c, "gemm", "c");
    inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
            std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
            std::int64_t ldc) const override {
    on_device(a, "gemm", "a");
    on_device(b, "gemm", "b");
    on_device(c, "gemm", "c");
    inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) const override {
    on_device(a, "gemm_bf16", "a");
    on_device(b, "gemm_bf16", "b");
    on_device(c, "gemm_bf16", "c");
    inner_.gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc) const override {
    on_device(a, "gemm_bf16_rounded", "a");
    on_device(b, "gemm_bf16_rounded", "b");
    on_device(c, "gemm_bf16_rounded", "c");
    inner_.gemm_bf16_rounded(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  }
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                         float* out, float* lse) const override {
    on_device(q, "attention_forward", "q");
    on_device(k, "attention_forward", "k");
    on_device(v, "attention_forward", "v");
    on_device(out, "attention_forward", "out");
    on_device(lse, "attention_forward", "lse");
    inner_.attention_forward(d, m, q, k, v, out, lse);
  }
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                         const double* v, double* out, double* lse) const override {
    on_device(q, "attention_forward", "q");
    on_device(k, "attention_forward", "k");
    on_device(v, "attention_forward", "v");
    on_device(out, "attention_forward", "out");
    on_device(lse, "attention_forward", "lse");
    inner_.attention_forward(d, m, q, k, v, out, lse);
  }
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                         float* out, float* lse) const override {
    on_device(q, "attention_forward", "q");
    on_device(k, "attention_forward", "k");
    on_device(v, "attention_forward", "v");
    on_device(out, "attention_forward", "out");
    on_device(lse, "attention_forward", "lse");
    inner_.attention_forward(d, m, q, k, v, out, lse);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    on_device(q, "attention_backward", "q");
    on_device(k, "attention_backward", "k");
    on_device(v, "attention_backward", "v");
    on_device(out, "attention_backward", "out");
    on_device(lse, "attention_backward", "lse");
    on_device(dout, "attention_backward", "dout");
    on_device(dq, "attention_backward", "dq");
    on_device(dk, "attention_backward", "dk");
    on_device(dv, "attention_backward", "dv");
    inner_.attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                          const double* v, const double* out, const double* lse, const double* dout, double* dq,
                          double* dk, double* dv) const override {
    on_device(q, "attention_backward", "q");
    on_device(k, "attention_backward", "k");
    on_device(v, "attention_backward", "v");
    on_device(out, "attention_backward", "out");
    on_device(lse, "attention_backward", "lse");
    on_device(dout, "attention_backward", "dout");
    on_device(dq, "attention_backward", "dq");
    on_device(dk, "attention_backward", "dk");
    on_device(dv, "attention_backward", "dv");
    inner_.attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                          const bf16* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    on_device(q, "attention_backward", "q");
    on_device(k, "attention_backward", "k");
    on_device(v, "attention_backward", "v");
    on_device(out, "attention_backward", "out");
    on_device(lse, "attention_backward", "lse");
    on_device(dout, "attention_backward", "dout");
    on_device(dq, "attention_backward", "dq");
    on_device(dk, "attention_backward", "dk");
    on_device(dv, "attention_backward", "dv");
    inner_.attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       float* y, std::int64_t ldy, float* rstd) const override {
    on_device(x, "rmsnorm_forward", "x");
    on_device(w, "rmsnorm_forward", "w");
    on_device(y, "rmsnorm_forward", "y");
    on_device(rstd, "rmsnorm_forward", "rstd");
    inner_.rmsnorm_forward(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_forward(const double* x, std::int64_t ldx, const double* w, std::int64_t n, std::int64_t dim, double eps,
                       double* y, std::int64_t ldy, double* rstd) const override {
    on_device(x, "rmsnorm_forward", "x");
    on_device(w, "rmsnorm_forward", "w");
    on_device(y, "rmsnorm_forward", "y");
    on_device(rstd, "rmsnorm_forward", "rstd");
    inner_.rmsnorm_forward(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       bf16* y, std::int64_t ldy, float* rstd) const override {
    on_device(x, "rmsnorm_forward", "x");
    on_device(w, "rmsnorm_forward", "w");
    on_device(y, "rmsnorm_forward", "y");
    on_device(rstd, "rmsnorm_forward", "rstd");
    inner_.rmsnorm_forward(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    on_device(dy, "rmsnorm_backward", "dy");
    on_device(x, "rmsnorm_backward", "x");
    on_device(w, "rmsnorm_backward", "w");
    on_device(rstd, "rmsnorm_backward", "rstd");
    on_device(dx, "rmsnorm_backward", "dx");
    on_device(dw, "rmsnorm_backward", "dw");
    inner_.rmsnorm_backward(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rmsnorm_backward(const double* dy, std::int64_t lddy, const double* x, std::int64_t ldx, const double* w,
                        const double* rstd, std::int64_t n, std::int64_t dim, double* dx, std::int64_t lddx,
                        Accumulate acc, double* dw) const override {
    on_device(dy, "rmsnorm_backward", "dy");
    on_device(x, "rmsnorm_backward", "x");
    on_device(w, "rmsnorm_backward", "w");
    on_device(rstd, "rmsnorm_backward", "rstd");
    on_device(dx, "rmsnorm_backward", "dx");
    on_device(dw, "rmsnorm_backward", "dw");
    inner_.rmsnorm_backward(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    on_device(dy, "rmsnorm_backward", "dy");
    on_device(x, "rmsnorm_backward", "x");
    on_device(w, "rmsnorm_backward", "w");
    on_device(rstd, "rmsnorm_backward", "rstd");
    on_device(dx, "rmsnorm_backward", "dx");
    on_device(dw, "rmsnorm_backward", "dw");
    inner_.rmsnorm_backward(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
                    std::int64_t ld) const override {
    on_device(pos, "rope_forward", "pos");
    on_device(x, "rope_forward", "x");
    inner_.rope_forward(t, pos, n, heads, x, ld);
  }
  void rope_forward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, double* x,
                    std::int64_t ld) const override {
    on_device(pos, "rope_forward", "pos");
    on_device(x, "rope_forward", "x");
    inner_.rope_forward(t, pos, n, heads, x, ld);
  }
  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                    const float* x, std::int64_t ld, bf16* out) const override {
    on_device(pos, "rope_forward", "pos");
    on_device(x, "rope_forward", "x");
    on_device(out, "rope_forward", "out");
    inner_.rope_forward(t, pos, n, heads, x, ld, out);
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* dx,
                     std::int64_t ld) const override {
    on_device(pos, "rope_backward", "pos");
    on_device(dx, "rope_backward", "dx");
    inner_.rope_backward(t, pos, n, heads, dx, ld);
  }
  void rope_backward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                     double* dx, std::int64_t ld) const override {
    on_device(pos, "rope_backward", "pos");
    on_device(dx, "rope_backward", "dx");
    inner_.rope_backward(t, pos, n, heads, dx, ld);
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                     const float* dx, std::int64_t ld, bf16* out) const override {
    on_device(pos, "rope_backward", "pos");
    on_device(dx, "rope_backward", "dx");
    on_device(out, "rope_backward", "out");
    inner_.rope_backward(t, pos, n, heads, dx, ld, out);
  }
  void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, float* out, std::int64_t ldo) const override {
    on_device(gate, "swiglu_forward", "gate");
    on_device(up, "swiglu_forward", "up");
    on_device(out, "swiglu_forward", "out");
    inner_.swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_forward(const double* gate, std::int64_t ldg, const double* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, double* out, std::int64_t ldo) const override {
    on_device(gate, "swiglu_forward", "gate");
    on_device(up, "swiglu_forward", "up");
    on_device(out, "swiglu_forward", "out");
    inner_.swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, bf16* out, std::int64_t ldo) const override {
    on_device(gate, "swiglu_forward", "gate");
    on_device(up, "swiglu_forward", "up");
    on_device(out, "swiglu_forward", "out");
    inner_.swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg, const float* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate, std::int64_t lddg,
                       float* dup, std::int64_t lddu) const override {
    on_device(dout, "swiglu_backward", "dout");
    on_device(gate, "swiglu_backward", "gate");
    on_device(up, "swiglu_backward", "up");
    on_device(dgate, "swiglu_backward", "dgate");
    on_device(dup, "swiglu_backward", "dup");
    inner_.swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void swiglu_backward(const double* dout, std::int64_t lddo, const double* gate, std::int64_t ldg, const double* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, double* dgate, std::int64_t lddg,
                       double* dup, std::int64_t lddu) const override {
    on_device(dout, "swiglu_backward", "dout");
    on_device(gate, "swiglu_backward", "gate");
    on_device(up, "swiglu_backward", "up");
    on_device(dgate, "swiglu_backward", "dgate");
    on_device(dup, "swiglu_backward", "dup");
    inner_.swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                       std::int64_t lddu) const override {
    on_device(dout, "swiglu_backward", "dout");
    on_device(gate, "swiglu_backward", "gate");
    on_device(up, "swiglu_backward", "up");
    on_device(dgate, "swiglu_backward", "dgate");
    on_device(dup, "swiglu_backward", "dup");
    inner_.swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    on_device(ids, "embedding_forward", "ids");
    on_device(table, "embedding_forward", "table");
    on_device(out, "embedding_forward", "out");
    inner_.embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const double* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, double* out) const override {
    on_device(ids, "embedding_forward", "ids");
    on_device(table, "embedding_forward", "table");
    on_device(out, "embedding_forward", "out");
    inner_.embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    on_device(ids, "embedding_forward", "ids");
    on_device(table, "embedding_forward", "table");
    on_device(out, "embedding_forward", "out");
    inner_.embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                          std::int64_t rows, std::int64_t dim, float* dtable) const override {
    on_device(ids, "embedding_backward", "ids");
    on_device(dout, "embedding_backward", "dout");
    on_device(dtable, "embedding_backward", "dtable");
    inner_.embedding_backward(ids, n, dout, vocab_begin, rows, dim, dtable);
  }
  void embedding_backward(const std::int32_t* ids, std::int64_t n, const double* dout, std::int64_t vocab_begin,
                          std::int64_t rows, std::int64_t dim, double* dtable) const override {
    on_device(ids, "embedding_backward", "ids");
    on_device(dout, "embedding_backward", "dout");
    on_device(dtable, "embedding_backward", "dtable");
    inner_.embedding_backward(ids, n, dout, vocab_begin, rows, dim, dtable);
  }
  void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    on_device(h, "ce_shard_stats", "h");
    on_device(w, "ce_shard_stats", "w");
    on_device(targets, "ce_shard_stats", "targets");
    on_device(row_max, "ce_shard_stats", "row_max");
    on_device(row_sumexp, "ce_shard_stats", "row_sumexp");
    on_device(target_logit, "ce_shard_stats", "target_logit");
    inner_.ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  void ce_shard_stats(const double* h, std::int64_t n, std::int64_t dim, const double* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, double* row_max, double* row_sumexp,
                      double* target_logit) const override {
    on_device(h, "ce_shard_stats", "h");
    on_device(w, "ce_shard_stats", "w");
    on_device(targets, "ce_shard_stats", "targets");
    on_device(row_max, "ce_shard_stats", "row_max");
    on_device(row_sumexp, "ce_shard_stats", "row_sumexp");
    on_device(target_logit, "ce_shard_stats", "target_logit");
    inner_.ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    on_device(h, "ce_shard_stats", "h");
    on_device(w, "ce_shard_stats", "w");
    on_device(targets, "ce_shard_stats", "targets");
    on_device(row_max, "ce_shard_stats", "row_max");
    on_device(row_sumexp, "ce_shard_stats", "row_sumexp");
    on_device(target_logit, "ce_shard_stats", "target_logit");
    inner_.ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max, const float* row_sumexp,
                                    const float* target_logit, const std::int32_t* targets, float* lse) const override {
    on_device(row_max, "ce_combine_stats", "row_max");
    on_device(row_sumexp, "ce_combine_stats", "row_sumexp");
    on_device(target_logit, "ce_combine_stats", "target_logit");
    on_device(targets, "ce_combine_stats", "targets");
    on_device(lse, "ce_combine_stats", "lse");
    return inner_.ce_combine_stats(n, shards, row_max, row_sumexp, target_logit, targets, lse);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const double* row_max,
                                    const double* row_sumexp, const double* target_logit, const std::int32_t* targets,
                                    double* lse) const override {
    on_device(row_max, "ce_combine_stats", "row_max");
    on_device(row_sumexp, "ce_combine_stats", "row_sumexp");
    on_device(target_logit, "ce_combine_stats", "target_logit");
    on_device(targets, "ce_combine_stats", "targets");
    on_device(lse, "ce_combine_stats", "lse");
    return inner_.ce_combine_stats(n, shards, row_max, row_sumexp, target_logit, targets, lse);
  }
  void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    on_device(h, "ce_shard_backward", "h");
    on_device(w, "ce_shard_backward", "w");
    on_device(targets, "ce_shard_backward", "targets");
    on_device(lse, "ce_shard_backward", "lse");
    on_device(dh, "ce_shard_backward", "dh");
    on_device(dw, "ce_shard_backward", "dw");
    inner_.ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  void ce_shard_backward(const double* h, std::int64_t n, std::int64_t dim, const double* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const double* lse, double scale, double* dh,
                         double* dw) const override {
    on_device(h, "ce_shard_backward", "h");
    on_device(w, "ce_shard_backward", "w");
    on_device(targets, "ce_shard_backward", "targets");
    on_device(lse, "ce_shard_backward", "lse");
    on_device(dh, "ce_shard_backward", "dh");
    on_device(dw, "ce_shard_backward", "dw");
    inner_.ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    on_device(h, "ce_shard_backward", "h");
    on_device(w, "ce_shard_backward", "w");
    on_device(targets, "ce_shard_backward", "targets");
    on_device(lse, "ce_shard_backward", "lse");
    on_device(dh, "ce_shard_backward", "dh");
    on_device(dw, "ce_shard_backward", "dw");
    inner_.ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                         std::int64_t vocab, const std::int32_t* targets, float* lse) const override {
    on_device(h, "cross_entropy_forward", "h");
    on_device(w, "cross_entropy_forward", "w");
    on_device(targets, "cross_entropy_forward", "targets");
    on_device(lse, "cross_entropy_forward", "lse");
    return inner_.cross_entropy_forward(h, n, dim, w, vocab, targets, lse);
  }
  CrossEntropyLoss cross_entropy_forward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                         std::int64_t vocab, const std::int32_t* targets, double* lse) const override {
    on_device(h, "cross_entropy_forward", "h");
    on_device(w, "cross_entropy_forward", "w");
    on_device(targets, "cross_entropy_forward", "targets");
    on_device(lse, "cross_entropy_forward", "lse");
    return inner_.cross_entropy_forward(h, n, dim, w, vocab, targets, lse);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    on_device(h, "cross_entropy_forward_backward", "h");
    on_device(w, "cross_entropy_forward_backward", "w");
    on_device(targets, "cross_entropy_forward_backward", "targets");
    on_device(lse, "cross_entropy_forward_backward", "lse");
    on_device(dh, "cross_entropy_forward_backward", "dh");
    on_device(dw, "cross_entropy_forward_backward", "dw");
    return inner_.cross_entropy_forward_backward(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                                  std::int64_t vocab, const std::int32_t* targets, double scale,
                                                  double* lse, double* dh, double* dw) const override {
    on_device(h, "cross_entropy_forward_backward", "h");
    on_device(w, "cross_entropy_forward_backward", "w");
    on_device(targets, "cross_entropy_forward_backward", "targets");
    on_device(lse, "cross_entropy_forward_backward", "lse");
    on_device(dh, "cross_entropy_forward_backward", "dh");
    on_device(dw, "cross_entropy_forward_backward", "dw");
    return inner_.cross_entropy_forward_backward(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    on_device(h, "cross_entropy_forward_backward", "h");
    on_device(w, "cross_entropy_forward_backward", "w");
    on_device(targets, "cross_entropy_forward_backward", "targets");
    on_device(lse, "cross_entropy_forward_backward", "lse");
    on_device(dh, "cross_entropy_forward_backward", "dh");
    on_device(dw, "cross_entropy_forward_backward", "dw");
    return inner_.cross_entropy_forward_backward(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }
  void adamw_step(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamWConfig& cfg,
                  std::int64_t step, float grad_scale, bf16* rounded) const override {
    on_device(params, "adamw_step", "params");
    on_device(grads, "adamw_step", "grads");
    on_device(m, "adamw_step", "m");
    on_device(v, "adamw_step", "v");
    on_device(rounded, "adamw_step", "rounded");
    inner_.adamw_step(params, grads, m, v, n, cfg, step, grad_scale, rounded);
  }
  void adamw_step(double* params, const double* grads, double* m, double* v, std::int64_t n, const AdamWConfig& cfg,
                  std::int64_t step, double grad_scale) const override {
    on_device(params, "adamw_step", "params");
    on_device(grads, "adamw_step", "grads");
    on_device(m, "adamw_step", "m");
    on_device(v, "adamw_step", "v");
    inner_.adamw_step(params, grads, m, v, n, cfg, step, grad_scale);
  }
  double sum_squares(const float* x, std::int64_t n) const override {
    on_device(x, "sum_squares", "x");
    return inner_.sum_squares(x, n);
  }
  double sum_squares(const double* x, std::int64_t n) const override {
    on_device(x, "sum_squares", "x");
    return inner_.sum_squares(x, n);
  }

 private:
  // Inside a live allocation, its end included (an empty range's pointer may sit there).
  bool find(const void* p) const {
    const auto* c = static_cast<const char*>(p);
    auto it = live_.upper_bound(c);
    if (it == live_.begin()) return false;
    --it;
    return c <= it->first + it->second;
  }
  void on_device(const void* p, const char* op, const char* arg) const {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (!find(p) && violations_.size() < 16) violations_.push_back(std::string(op) + "(" + arg + "): host memory");
  }
  void not_on_device(const void* p, const char* op, const char* arg) const {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (find(p) && violations_.size() < 16) violations_.push_back(std::string(op) + "(" + arg + "): device memory");
  }

  const Ops& inner_ = cpu_ops();
  mutable std::mutex mu_;
  mutable std::map<const char*, std::size_t> live_;
  mutable std::size_t in_use_ = 0, peak_ = 0;
  mutable std::vector<std::string> violations_;
};

// `ops` registered as the CUDA interface for a scope; the binary's own (if any) put back after.
class DeviceRegistration {
 public:
  explicit DeviceRegistration(const Ops* ops) : previous_(has_ops(Device::kCuda) ? &ops_for(Device::kCuda) : nullptr) {
    register_ops(ops);
  }
  ~DeviceRegistration() {
    if (previous_ != nullptr) register_ops(previous_);
  }
  DeviceRegistration(const DeviceRegistration&) = delete;
  DeviceRegistration& operator=(const DeviceRegistration&) = delete;

 private:
  const Ops* previous_;
};

}  // namespace herd::kernels::testing

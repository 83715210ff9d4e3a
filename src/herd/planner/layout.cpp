#include "herd/planner/layout.h"

#include <algorithm>

#include "herd/model/activations.h"
#include "herd/model/shard.h"
#include "herd/schedule/schedule.h"
#include "herd/topology/parallel_dims.h"

namespace herd::planner {

const char* software_name(Software s) {
  switch (s) {
    case Software::kFused: return "fused";
    case Software::kEager: return "eager";
    case Software::kCompiled: return "compiled";
    case Software::kHerd: return "herd";
  }
  return "?";
}
const char* attention_name(Attention a) { return a == Attention::kFlash ? "flash" : "materialized"; }

const char* layer_split_name(LayerSplit s) {
  switch (s) {
    case LayerSplit::kAuto: return "auto";
    case LayerSplit::kEven: return "even";
    case LayerSplit::kLightEnds: return "light-ends";
  }
  return "?";
}

Result<Software> parse_software(const std::string& s) {
  if (s == "fused") return Software::kFused;
  if (s == "eager") return Software::kEager;
  if (s == "compiled") return Software::kCompiled;
  if (s == "herd") return Software::kHerd;
  return make_error("--software: expected fused, eager, compiled or herd, got '", s, "'");
}

Result<Attention> parse_attention(const std::string& s) {
  if (s == "flash") return Attention::kFlash;
  if (s == "materialized") return Attention::kMaterialized;
  return make_error("--attention: expected flash or materialized, got '", s, "'");
}

Result<LayerSplit> parse_layer_split(const std::string& s) {
  if (s == "auto") return LayerSplit::kAuto;
  if (s == "even") return LayerSplit::kEven;
  if (s == "light-ends") return LayerSplit::kLightEnds;
  return make_error("--layer-split: expected auto, even or light-ends, got '", s, "'");
}

double element_bytes(Precision p) { return p == Precision::kFP64 ? 8.0 : p == Precision::kFP32 ? 4.0 : 2.0; }

Result<Precision> parse_precision(const std::string& s) {
  const std::optional<Precision> p = precision_from_name(s);
  if (p && *p != Precision::kFP64) return *p;
  return make_error("--precision: expected bf16, fp16, fp8 or fp32, got '", s, "'");
}

int Layout::n_resolved(const TrainingSpec& t) const {
  const std::int64_t m = microbatches(t);
  if (n > 0) return n;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(pp, m)));
}

std::string Layout::to_string() const {
  std::string s = "tp" + std::to_string(tp) + " cp" + std::to_string(cp) + " pp" + std::to_string(pp) + " dp" +
                  std::to_string(dp) + " v" + std::to_string(v) + " mb" + std::to_string(microbatch);
  if (n > 0) s += " N" + std::to_string(n);
  s += std::string(" ") + model::recompute_name(recompute);
  if (tp > 1 && !sequence_parallel) s += " no-sp";
  if (zero != 3) s += " zero" + std::to_string(zero);
  if (reshard_after_forward) s += " reshard";
  return s;
}

std::string Layout::to_flags() const {
  std::string s = "--tp " + std::to_string(tp) + " --cp " + std::to_string(cp) + " --pp " + std::to_string(pp) +
                  " --dp " + std::to_string(dp) + " --v " + std::to_string(v) + " --microbatch-size " +
                  std::to_string(microbatch);
  if (n > 0) s += " --n " + std::to_string(n);
  s += std::string(" --recompute ") + model::recompute_name(recompute);
  s += std::string(" --sequence-parallel ") + (sequence_parallel ? "true" : "false");
  if (reshard_after_forward) s += " --reshard-after-forward true";
  if (zero != 3) s += " --zero " + std::to_string(zero);
  return s;
}

Status validate_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                       const Layout& l, std::int64_t gpus) {
  // The degrees and their product: the mesh's rules, worded once by topology::ParallelDims.
  if (auto dims = topology::ParallelDims::make(l.tp, l.cp, l.pp, l.dp, gpus); !dims.ok()) return dims.error();
  if (gpus > cluster.max_accelerators()) {
    return make_error("--gpus (", gpus, ") exceeds cluster ", cluster.name, " (", cluster.max_accelerators(),
                      " accelerators)");
  }
  if (train.seq_len < 1) return make_error("seq_len (", train.seq_len, ") must be positive");
  if (train.global_batch < 1) return make_error("global batch (", train.global_batch, " sequences) must be positive");
  if (train.seq_len > cfg.max_seq_len && cfg.position == model::PositionKind::kLearned) {
    return make_error("seq_len (", train.seq_len, ") exceeds the learned position table (", cfg.max_seq_len, ")");
  }
  model::ActivationShape shape;
  shape.seq_len = train.seq_len;
  shape.micro_batch = std::max<std::int64_t>(1, l.microbatch);
  shape.tp = l.tp;
  shape.cp = l.cp;
  shape.sequence_parallel = l.sp();
  HERD_RETURN_IF_ERROR(model::validate_activation_shape(cfg, shape));
  if (l.v < 1) return make_error("v (", l.v, ") must be at least 1 (virtual stages per pipeline rank)");
  {
    // auto accepts what light ends accept (the looser rule: the ends may hold no layer).
    auto a = schedule::assign_layers(static_cast<int>(cfg.n_layers), static_cast<int>(l.pp), l.v,
                                     l.layer_split != LayerSplit::kEven);
    if (!a.ok()) return a.error();
  }
  if (l.microbatch < 1) return make_error("microbatch size (", l.microbatch, ") must be at least 1");
  HERD_RETURN_IF_ERROR(model::check_dp_divides_batch(train.global_batch, l.dp, l.microbatch));
  const std::int64_t m = l.microbatches(train);
  if (l.n < 0 || l.n > m) {
    return make_error("n (", l.n, ") must be in [1, M = ", m, "] (contiguous micro-batches per chunk)");
  }
  if (l.zero < 0 || l.zero > 3) return make_error("zero (", l.zero, ") must be 0, 1, 2 or 3");
  if (train.precision == Precision::kFP8 && cluster.accelerator.peak_tflops_fp8 <= 0) {
    return make_error("precision fp8: accelerator ", cluster.accelerator.name, " has no fp8 peak; use bf16");
  }
  if (train.precision == Precision::kFP32 && cluster.accelerator.peak_tflops_fp32 <= 0) {
    return make_error("precision fp32: accelerator ", cluster.accelerator.name,
                      " has no accelerator.peak_tflops.fp32; add it to the cluster or use bf16");
  }
  return Status::Ok();
}

}  // namespace herd::planner

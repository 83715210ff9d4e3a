#include "herd/cli/planner_options.h"

#include <cmath>
#include <fstream>

#include "herd/cli/app.h"
#include "herd/core/file_write.h"

namespace herd::cli {

void add_layout_knob_options(CLI::App* app, LayoutKnobs& k) {
  app->add_option("--v", k.v,
                  "Virtual pipeline stages per rank (not given: estimate and plan search it, train keeps the config's)")
      ->check(positive_integer());
  app->add_option("--microbatch-size", k.microbatch,
                  "Sequences per micro-batch on one data-parallel rank (not given: estimate and plan search it, train "
                  "keeps the config's)")
      ->check(positive_integer());
  app->add_option("--n", k.n,
                  "Contiguous micro-batches per chunk, the Llama 3 N (not given: estimate and plan search it, train "
                  "keeps the config's)")
      ->check(positive_integer());
  app->add_option("--recompute", k.recompute,
                  "Activation recompute: none, selective or full (not given: estimate and plan search it, train keeps "
                  "the config's)");
  app->add_option(
      "--sequence-parallel", k.sequence_parallel,
      "Sequence parallelism with TP: true or false (not given: estimate and plan search it, train keeps the config's)");
  app->add_option("--reshard-after-forward", k.reshard_after_forward,
                  "FSDP: reshard parameters after forward: true or false (default false)");
}

Status apply_layout_knobs(const LayoutKnobs& k, planner::Layout& l) {
  if (k.v) l.v = *k.v;
  if (k.microbatch) l.microbatch = *k.microbatch;
  if (k.n) l.n = *k.n;
  if (k.recompute) {
    Result<model::Recompute> r = model::parse_recompute(*k.recompute);
    if (!r.ok()) return r.error().with_context("--recompute");
    l.recompute = *r;
  }
  if (k.sequence_parallel) {
    HERD_ASSIGN_OR_RETURN(l.sequence_parallel, parse_bool_option("--sequence-parallel", *k.sequence_parallel));
  }
  if (k.reshard_after_forward) {
    HERD_ASSIGN_OR_RETURN(l.reshard_after_forward,
                          parse_bool_option("--reshard-after-forward", *k.reshard_after_forward));
  }
  return Status::Ok();
}

void add_planner_options(CLI::App* app, PlannerOptions& o) {
  app->add_option("--model", o.model, "A model preset (llama3-8b, llama3-70b, llama3-405b, ...) or a config.json")
      ->required();
  app->add_option("--cluster", o.cluster,
                  "A cluster preset (llama3-h100, dgx-h100, dgx-a100, h200, tpu-v5p) or a JSON file")
      ->required();
  app->add_option("--gpus", o.gpus, "Accelerators in the job")->required()->check(positive_integer());
  app->add_option("--seq-len", o.seq_len, "Sequence length")->capture_default_str()->check(positive_integer());
  app->add_option("--global-batch", o.global_batch, "Sequences per optimizer step")->check(positive_integer());
  app->add_option("--global-batch-tokens", o.global_batch_tokens,
                  "Tokens per optimizer step (a multiple of --seq-len), instead of --global-batch")
      ->check(positive_integer());
  app->add_option("--precision", o.precision, "Matmul precision: bf16, fp16, fp8 (GEMMs at the fp8 rate) or fp32")
      ->capture_default_str();
  app->add_option("--layer-split", o.layer_split,
                  "Layers over the PP x V virtual stages: auto (per layout), even, or light-ends (first and last "
                  "one layer lighter)")
      ->capture_default_str();
  app->add_option("--software", o.software,
                  "Software profile: fused (Megatron / Transformer Engine), eager (PyTorch eager / FSDP), compiled "
                  "(PyTorch under torch.compile) or herd (herd's own runtime); default herd on a CPU host, else fused");
  app->add_option("--attention", o.attention,
                  "Attention: flash, or materialized (s x s scores in memory, pre-FlashAttention Megatron)")
      ->capture_default_str();
  app->add_option("--pipeline-sends", o.pipeline_sends, "Pipeline point-to-point sends: async or sync")
      ->capture_default_str();
  app->add_option("--dp-overlap", o.dp_overlap,
                  "Gradient reduction overlapped with the backward, and the ZeRO-1/2 parameter all-gather with "
                  "the next forward (on), or both after the backward (off)")
      ->capture_default_str();
  app->add_option("--grad-acc-fusion", o.grad_acc_fusion,
                  "Weight-gradient GEMMs accumulate into the fp32 gradient buffer (on: Megatron's "
                  "gradient_accumulation_fusion) or a separate pass adds each micro-batch's gradient (off)")
      ->capture_default_str();
  app->add_option("--tp-overlap", o.tp_overlap,
                  "Sequence-parallel TP collectives pipelined with their GEMMs (on: Transformer Engine "
                  "userbuffers, PyTorch async TP) or exposed (off)")
      ->capture_default_str();
  app->add_option("--grad-dtype", o.grad_dtype,
                  "Precision gradients are accumulated and reduced in: fp32 (Llama 3) or bf16 (NeMo's "
                  "grad_sync_dtype=bf16, Megatron's fp16 gradients)")
      ->capture_default_str();
  add_layout_knob_options(app, o.knobs);
  app->add_option("--zero", o.zero, "0 plain DP (all-reduce), 1, 2, or 3 (FSDP, the paper's choice)")
      ->capture_default_str()
      ->check(integer_in(0, 3));
  app->add_flag("--json", o.json, "Print JSON instead of tables");
  app->add_option("--svg", o.svg, "Write an SVG report (memory and time bars, pipeline timeline) to this file");
  app->add_option("--html", o.html, "Write an HTML report to this file");
  app->add_option("--failure-rate", o.failure_rate,
                  "Unexpected interruptions per accelerator-hour (default: Llama 3's 419 in 54 days on 16,384 GPUs)");
  app->add_option("--checkpoint-bandwidth", o.checkpoint_bw,
                  "Aggregate storage write bandwidth for checkpoints, GB/s (default: the cluster's, else 2000)");
  app->add_option("--snapshot-bandwidth", o.snapshot_bw,
                  "Device-to-host copy per accelerator for asynchronous checkpoints, GB/s")
      ->capture_default_str();
  app->add_option("--restart-s", o.restart_s, "Seconds from an interruption to the restarted job's first step")
      ->capture_default_str();
  app->add_option("--checkpoint-mode", o.checkpoint_mode,
                  "Checkpointing the reliability figures assume: async (snapshot, background write) or sync")
      ->capture_default_str();
  app->add_option("--elastic-restart-s", o.elastic_restart_s,
                  "Elastic recovery: seconds from a node failure to the first step on the surviving accelerators "
                  "(detection, re-plan, start-up, checkpoint load; no wait for a spare)")
      ->capture_default_str();
  app->add_option("--repair-s", o.repair_s,
                  "Elastic recovery: mean seconds until a failed node is back and the job grows to its full layout")
      ->capture_default_str();
}

Result<bool> parse_bool_option(const std::string& name, const std::string& value) {
  if (value == "true" || value == "on" || value == "1") return true;
  if (value == "false" || value == "off" || value == "0") return false;
  return make_error(name, ": expected true or false, got '", value, "'");
}

Result<PlannerInputs> resolve_planner_inputs(const PlannerOptions& o) {
  PlannerInputs in;
  HERD_ASSIGN_OR_RETURN(in.cfg, model::resolve_model(o.model));
  HERD_ASSIGN_OR_RETURN(in.cluster, topology::resolve_cluster(o.cluster));
  in.train.seq_len = o.seq_len;
  if (o.global_batch > 0 && o.global_batch_tokens > 0) {
    return make_error("--global-batch and --global-batch-tokens: give one of them, not both");
  }
  if (o.global_batch_tokens > 0) {
    if (o.global_batch_tokens % o.seq_len != 0) {
      return make_error("--global-batch-tokens (", o.global_batch_tokens, ") is not a multiple of --seq-len (",
                        o.seq_len, "); the batch is made of whole sequences");
    }
    in.train.global_batch = o.global_batch_tokens / o.seq_len;
  } else if (o.global_batch > 0) {
    in.train.global_batch = o.global_batch;
  } else {
    return make_error("--global-batch: missing; give sequences per step (or --global-batch-tokens)");
  }
  HERD_ASSIGN_OR_RETURN(in.train.precision, planner::parse_precision(o.precision));
  HERD_ASSIGN_OR_RETURN(in.base.layer_split, planner::parse_layer_split(o.layer_split));
  const std::string software = !o.software.empty()                     ? o.software
                               : in.cluster.accelerator.host_cores > 0 ? "herd"
                                                                       : "fused";
  HERD_ASSIGN_OR_RETURN(in.train.system.software, planner::parse_software(software));
  in.software_given = !o.software.empty();
  HERD_ASSIGN_OR_RETURN(in.train.system.attention, planner::parse_attention(o.attention));
  if (o.pipeline_sends != "async" && o.pipeline_sends != "sync") {
    return make_error("--pipeline-sends: expected async or sync, got '", o.pipeline_sends, "'");
  }
  in.train.system.async_sends = o.pipeline_sends == "async";
  if (o.dp_overlap != "on" && o.dp_overlap != "off") {
    return make_error("--dp-overlap: expected on or off, got '", o.dp_overlap, "'");
  }
  in.train.system.dp_overlap = o.dp_overlap == "on";
  if (o.grad_acc_fusion != "on" && o.grad_acc_fusion != "off") {
    return make_error("--grad-acc-fusion: expected on or off, got '", o.grad_acc_fusion, "'");
  }
  in.train.system.grad_acc_fusion = o.grad_acc_fusion == "on";
  if (o.tp_overlap != "on" && o.tp_overlap != "off") {
    return make_error("--tp-overlap: expected on or off, got '", o.tp_overlap, "'");
  }
  in.train.system.tp_overlap = o.tp_overlap == "on";
  if (in.train.system.tp_overlap && in.train.system.software == planner::Software::kHerd) {
    return make_error("--tp-overlap: 'on' is not what --software herd runs (herd's runtime issues its TP collectives ",
                      "on the ranks' own threads, exposed); use --tp-overlap off, or --software fused, compiled or ",
                      "eager to plan a system that overlaps them");
  }
  if (o.grad_dtype != "fp32" && o.grad_dtype != "bf16") {
    return make_error("--grad-dtype: expected fp32 or bf16, got '", o.grad_dtype, "'");
  }
  in.train.system.bf16_grads = o.grad_dtype == "bf16";
  HERD_RETURN_IF_ERROR(apply_layout_knobs(o.knobs, in.base));
  in.base.zero = o.zero;
  in.reliability.failure_rate_per_hour = o.failure_rate;
  if (o.checkpoint_bw && !(*o.checkpoint_bw > 0 && std::isfinite(*o.checkpoint_bw))) {
    return make_error("--checkpoint-bandwidth: must be a positive aggregate storage bandwidth in GB/s, got ",
                      *o.checkpoint_bw, " (e.g. 2000, Llama 3's 2 TB/s; leave it out for the cluster's)");
  }
  in.reliability.checkpoint_bw_gb_per_s = o.checkpoint_bw.value_or(0.0);
  in.reliability.snapshot_bw_gb_per_s = o.snapshot_bw;
  in.reliability.restart_s = o.restart_s;
  in.reliability.elastic_restart_s = o.elastic_restart_s;
  in.reliability.repair_s = o.repair_s;
  HERD_ASSIGN_OR_RETURN(in.reliability.mode, planner::parse_checkpoint_mode(o.checkpoint_mode));
  HERD_RETURN_IF_ERROR(planner::validate(in.reliability));
  if (in.base.reshard_after_forward && in.base.zero != 3) {
    return make_error("--reshard-after-forward true needs --zero 3 (only FSDP shards parameters), got --zero ", o.zero);
  }
  return in;
}

planner::SearchSpace search_space(const PlannerOptions& o, const PlannerInputs& in) {
  planner::SearchSpace space;
  if (o.knobs.v) space.v = in.base.v;
  if (o.knobs.microbatch) space.microbatch = in.base.microbatch;
  if (o.knobs.n) space.n = in.base.n;
  if (o.knobs.recompute) space.recompute = in.base.recompute;
  if (o.knobs.sequence_parallel) space.sequence_parallel = in.base.sequence_parallel;
  space.zero = in.base.zero;
  space.reshard_after_forward = in.base.reshard_after_forward;
  space.layer_split = in.base.layer_split;
  return space;
}

Status write_text_file(const std::string& path, const std::string& text) {
  if (Status s = write_file(path, text); !s.ok()) return make_error(s.error().message(), "; check the directory");
  return Status::Ok();
}

}  // namespace herd::cli

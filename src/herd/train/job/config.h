// The typed configuration of one training run: a struct per section with a default and a doc line
// per field, read from a JSON file and then from `--section.field=value` overrides.
//
// Every field is registered once (config.cpp) with its name, its doc line and a typed setter, so the
// file reader, the override parser, the resolved-config table and the manifest of a checkpoint all
// walk the same list: an unknown key is an error naming it and the keys its section does know.
// Defaults are the Llama 3 recipe (AdamW 0.9/0.95, weight decay 0.1, clip 1.0, linear warm-up then
// cosine decay to 1% of the peak) scaled to a few-minute CPU run of the `tiny` preset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/comm/types.h"
#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/core/precision.h"
#include "herd/kernels/device.h"
#include "herd/planner/layout.h"

namespace herd::train {

struct ModelSection {
  std::string name = "tiny";  // a preset (tiny, small, llama3-8b, ...) or a Hugging Face config.json
  std::int64_t vocab = 0;     // vocabulary size; 0 takes the tokenizer's
};

struct DataSection {
  std::string dir = "runs/data";  // token shards written by `herd data` (train-*.bin and val-*.bin)
  std::string tokenizer = "";     // the tokenizer the shards were made with (for samples); empty: none
  std::int64_t seq_len = 256;     // tokens per packed sequence (at most the model's max_seq_len)
  std::int64_t seed = 1;          // document order of every epoch
};

struct OptimSection {
  double lr = 3e-3;            // peak learning rate
  double min_lr_ratio = 0.01;  // floor of the cosine as a fraction of the peak (paper: 8e-7 / 8e-5)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled (AdamW), on every parameter
  double grad_clip = 1.0;     // max global gradient L2 norm; 0 disables clipping
};

struct ScheduleSection {
  std::int64_t warmup_steps = 50;  // linear warm-up (paper: 8,000 of 1.2M steps)
  std::int64_t decay_steps = 0;    // cosine length after warm-up; 0 means until train.steps
  bool ramp = false;               // the paper's batch/sequence ramp: quarter batch at half length first
  std::int64_t ramp_tokens = 0;    // tokens of the first ramp stage (paper: 252M); 0: 10% of the run
  std::int64_t ramp_tokens2 = 0;   // tokens until the full batch (paper: 2.87T); 0: 30% of the run
};

struct TrainSection {
  std::int64_t steps = 300;          // optimizer steps
  std::int64_t global_batch = 8;     // sequences per optimizer step, whatever the layout
  std::int64_t threads = 0;          // kernel threads per rank; 0: the launcher's rule (cores / ranks)
  std::int64_t seed = 1234;          // weight initialisation
  std::int64_t log_every = 10;       // progress line period in steps
  std::string metrics_file = "";     // JSON lines, one object per step; empty: none
  std::string projection_file = "";  // JSON: the planner's step time and memory vs measured; empty: none
  // For MFU: the peak of one core in the run's precision; 0: the per-core GEMM rate of the cluster the run
  // plans with (this machine's calibration, else the local-cpu preset; bf16's under bf16). A value given
  // is fp32's, doubled under bf16.
  double peak_gflops_per_core = 0;
  // fp32: everything in fp32. bf16: the Llama 3 recipe (docs/precision.md): fp32 master weights and AdamW
  // state, bf16 weight copies gathered by FSDP, bf16 matmul inputs with fp32 sums, bf16 saved activations,
  // fp32 norms, softmax, RoPE, SwiGLU gate, loss, gradient accumulation, reduce-scatter and clipping.
  // fp64: everything in double (the parity tests' precision).
  Precision precision = Precision::kFP32;
  // Where the kernels run: cpu, or cuda (kernels/cuda, docs/gpu.md; needs a build with the CUDA toolkit
  // and a visible GPU, checked before anything is allocated).
  std::string device = "cpu";
  std::string nonfinite = "skip";        // a NaN/Inf loss or gradient norm: skip the step, or stop the job
  std::int64_t max_nonfinite_skips = 3;  // consecutive skipped steps after which the job stops
};

struct EvalSection {
  std::int64_t every = 50;   // steps between held-out evaluations; 0: only at the end
  std::int64_t batches = 8;  // micro-batches per evaluation
};

struct CheckpointSection {
  std::string dir = "";           // checkpoint directory; empty: no checkpoints
  std::int64_t every = 100;       // steps between checkpoints (and one at the end)
  std::int64_t keep = 2;          // keep the newest K
  bool resume = true;             // resume from the newest checkpoint in dir when there is one
  bool fallback = false;          // on a corrupt newest checkpoint, resume from the previous good one
  bool async = true;              // write from a host snapshot on a background thread while training goes on
  std::string on_error = "stop";  // a failed save: stop (the job ends with its error) or continue (warn)
};

// Interoperability (docs/interop.md): the weights a run starts from, and a Hugging Face copy of its result.
struct InitSection {
  std::string from = "";  // a Hugging Face directory or a herd checkpoint: its weights (fresh optimizer); empty: init
};
struct ExportSection {
  std::string hf = "";  // after training, write the final checkpoint here as a Hugging Face directory; empty: none
};

struct GenerateSection {
  std::int64_t samples = 2;      // samples printed at the end of training
  std::int64_t max_tokens = 64;  // tokens per sample
  std::string prompt = "The State of the Union";
};

// The layout of the run: planner::Layout itself (tp, cp, pp, dp, v, micro-batch size per data-parallel
// rank, N, recompute, sequence parallelism, the pipeline schedule), so the line `herd plan` prints is what `herd train`
// runs, plus what only the runtime needs. One rank is the layout tp = cp = pp = dp = 1, trained by the same trainer as
// any other (docs/training.md). The micro-batches of a step, M = train.global_batch / (dp x microbatch), are the
// pipeline's M when pp > 1. microbatch 0 picks M = pp (1 without a pipeline).
struct ParallelSection : planner::Layout {
  ParallelSection() { microbatch = 0; }
  // local (ranks as threads), mpi (mpirun, srun --mpi=pmix), gloo (torchrun, srun without PMIx), auto: by
  // the launcher (train::resolve_launch).
  std::string backend = "auto";
  // Where a gloo job's processes meet: storage every host of the job sees; empty: <checkpoint.dir>/rendezvous,
  // else the temp dir (one host).
  std::string rendezvous_dir;
  // A collective waiting longer, or a rank silent longer (no step, no comm call), stops the job; 0: fitted
  // to the run (max(60 s, 20 x the planner's step time + the checkpoint write time); train/job/watchdog.h).
  double comm_timeout_s = 0;

  std::int64_t world() const { return gpus(); }
};

// Injected faults, for tests and demonstrations of failure handling, and the supervisor's restart policy
// (docs/reliability.md). Each injected fault fires once per job (train/job/fault_log.h). -1: none.
struct FaultSection {
  std::int64_t kill_rank = -1;  // this rank exits at the start of fault.kill_step
  std::int64_t kill_step = 0;
  std::int64_t hang_rank = -1;  // this rank stops for fault.hang_seconds at the start of fault.hang_step
  std::int64_t hang_step = 0;
  double hang_seconds = 3600;
  std::int64_t fail_checkpoint_step = 0;  // the save at this step fails as a full disk would; 0: none
  std::int64_t nan_step = 0;              // fault.nan_rank's gradient gets a NaN at this step; 0: none
  std::int64_t nan_rank = 0;
  std::int64_t slow_rank = -1;        // this rank's steps take fault.slow_factor x longer from fault.slow_from_step
  double slow_factor = 2;             // by (factor - 1) x its measured compute time more after each step:
  std::int64_t slow_from_step = 1;    //
  std::string slow_mode = "compute";  // computing it (a slower core) or "stall": sleeping (off the CPU)
  std::int64_t kill_every = 0;        // every K steps a rank drawn from fault.seed exits; 0: never
  std::int64_t seed = 1;              // draws the ranks of fault.kill_every
  bool corrupt_checkpoint = false;    // an injected kill first flips a byte of its shard of the newest checkpoint
  std::int64_t lose_rank = -1;        // this rank is lost for good (its host does not come back) at fault.lose_step
  std::int64_t lose_step = 0;         //
  bool elastic = false;               // a rank lost for good: restart on the survivors at a re-planned layout
  std::int64_t max_restarts = 0;      // > 0: run under a supervisor that restarts a failed job up to K times
  double restart_backoff_s = 1;       // wait before the first restart; doubles for each further one (max 60 s)
};

// Communicator behaviour (comm::CommOptions; the timeout is parallel.comm_timeout_s).
struct CommSection {
  bool deterministic = true;          // fixed rank-order reductions (bit-exact across backends); false: MPI's own
  std::int64_t recorder_size = 2048;  // entries kept per rank by the flight recorder
};

// Where this process stands, as the user gives it (core/launch_env.h LaunchFlags): for processes started
// by hand or by a launcher herd does not read; overrides every launcher's variables. -1 / 0 / "": not given.
struct LaunchSection {
  std::int64_t rank = -1;
  std::int64_t world_size = 0;
  std::int64_t local_rank = 0;
  std::int64_t local_world_size = 1;
  std::string master_addr;
  std::int64_t master_port = 0;
};

// Where a failed job leaves what explains it: every rank's flight-recorder dump, named after the job.
struct DiagnosticsSection {
  std::string dir = "";         // empty: <checkpoint.dir>/diagnostics, else beside train.metrics_file, else temp dir
  std::string job_id = "";      // names the dumps (herd_flight_<job_id>_rank<r>.json); empty: made at start
  std::int64_t dump_every = 0;  // every rank also dumps its flight recorder every N steps; 0: only on failure
  // Straggler detection (train/step/straggler_monitor.h): every N steps (0: off) the ranks' medians over the
  // last `window` steps are compared with their pipeline stage's peers; a rank whose CPU time computing
  // is `threshold` x the peers' median (slow), or whose time computing or stalled (stopped, asleep,
  // blocked outside collectives) is `stall_threshold` x theirs (stalled), at three checks in a row is
  // flagged (comm/stragglers.h says where the defaults come from).
  std::int64_t straggler_every = 3;
  std::int64_t straggler_window = 10;
  double straggler_threshold = 1.3;
  double straggler_stall_threshold = 2.0;
};

// The planner's "planned" and "planned vs measured" lines (train/plan/projection.h).
struct ProjectionSection {
  std::string cluster_file = "";  // a `herd calibrate` output; empty: the committed local-cpu preset
  double background_jobs = -1;    // other jobs sharing the cores; -1: measured from /proc, 0: an idle host
  bool speed_probe = false;  // probe the host's speed, plan at its ratio to the calibration's (train/plan/host_speed.h)
};

struct TrainConfig {
  ModelSection model;
  ParallelSection parallel;
  DataSection data;
  OptimSection optim;
  ScheduleSection schedule;
  TrainSection train;
  EvalSection eval;
  CheckpointSection checkpoint;
  InitSection init;
  ExportSection export_;  // "export" in files and overrides
  GenerateSection generate;
  FaultSection fault;
  CommSection comm;
  DiagnosticsSection diagnostics;
  LaunchSection launch;
  ProjectionSection projection;
};

// The run's layout with the defaults resolved (microbatch 0 -> its value, N 0 -> min(PP, M)) and its
// training shape, in the planner's terms: what the trainer builds and what the projection costs.
// Errors name the field: train.global_batch not divisible by dp x microbatch, and so on.
struct ResolvedLayout {
  planner::Layout layout;
  // seq_len, global_batch, precision (fp32 or bf16; fp64 is planned as fp32); the software is herd's:
  // this runtime is what runs the layout.
  planner::TrainingSpec spec = [] {
    planner::TrainingSpec s;
    s.system.software = planner::Software::kHerd;
    return s;
  }();
  std::int64_t microbatches = 1;  // M
};
Result<ResolvedLayout> resolve_layout(const TrainConfig& cfg);

// One registered field: "optim.lr", its doc line, and its current value rendered as JSON.
struct FieldInfo {
  std::string key;
  std::string doc;
  Json value;
};
std::vector<FieldInfo> describe(const TrainConfig& cfg);

// Applies a JSON object {"section": {"field": value}}; unknown sections and keys are errors naming them.
Status apply_json(TrainConfig& cfg, const Json& j, const std::string& source);

// Applies one override "section.field=value" (with or without the leading "--"). The value is read
// as the field's type: "1e-3" for a number, "true"/"false" for a flag, the raw text for a string.
Status apply_override(TrainConfig& cfg, const std::string& arg);

// The file (when not empty), then the overrides in order; then validation.
Result<TrainConfig> load_config(const std::string& path, const std::vector<std::string>& overrides);
// The same without the validation, for a caller that sets more fields first (the CLI's flags).
Result<TrainConfig> read_config(const std::string& path, const std::vector<std::string>& overrides);

// train.precision as the runtime takes it: "fp32", "bf16" or "fp64"; anything else (fp16 and fp8 are the
// planner's only) is the one-line error "train.precision: expected fp32, bf16 or fp64, got 'x'".
Result<Precision> parse_run_precision(const std::string& name);
// train.device as a device: cpu or cuda; anything else is "train.device: expected cpu or cuda, got 'x'".
Result<kernels::Device> train_device(const TrainConfig& cfg);
// train.device against this binary and machine (kernels/device.h): cpu always passes; cuda needs the CUDA
// backend built in, a visible GPU and fp32 or bf16 (docs/gpu.md). Checked before anything is allocated.
Status check_run_device(const TrainConfig& cfg);
// The precision the planner plans the run at: bf16 as bf16; fp32, and fp64 (herd's reference, which no
// plan covers), as fp32.
Precision planned_precision(const TrainConfig& cfg);

// Relations between fields (positivity, ranges); messages name the field and the value. Rules that need
// the model (what divides the heads, the sequence) are the model's (model/, checked by the trainer).
Status validate(const TrainConfig& cfg);

// The resolved configuration as nested JSON (for manifests and --print-config).
Json to_json(const TrainConfig& cfg);

}  // namespace herd::train

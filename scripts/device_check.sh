#!/usr/bin/env bash
# The one command to run when a GPU machine is lent (docs/gpu.md). Two halves:
#
#   scripts/device_check.sh --prepare   on the CPU machine: builds the GPU targets (kernels/cuda tests, the
#                                       block through the CUDA op interface, the NCCL test, bench/gpu) in build/, computes the planner's prediction
#                                       for the benchmark's runs (pure computation, no GPU), and packs the
#                                       binaries with the shared libraries a bare GPU machine lacks into
#                                       .device/ (ignored by git; about 20 MiB, carried to the device).
#   scripts/device_check.sh             on the GPU machine, from the repository root, with .device/ carried:
#                                       prints nvidia-smi and the driver and toolkit versions, runs every
#                                       CUDA kernel test against the CPU reference, the transformer block on
#                                       the CUDA op interface against the CPU's, the NCCL test at world
#                                       size one and the bf16 training-step benchmark, and writes one JSON
#                                       summary, $OUT/device_check.json (or .device/out/device_check.json
#                                       without $OUT). Within 8 minutes; each stage has its own timeout.
#
# The device machine has the CUDA driver, runtime, cuBLASLt and NCCL (its CUDA 13 image) but none of
# herd's Debian packages, and no network: those libraries travel in .device/lib.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
pack=.device

if [ "${1:-}" = "--prepare" ]; then
  set -e
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHERD_WERROR=ON -DHERD_ENABLE_CUDA=ON -DHERD_BUILD_TESTS=ON \
    -DHERD_BUILD_BENCH=ON >/dev/null
  cmake --build build -j "$(nproc)" --target herd herd_kernels_cuda_tests herd_nn_cuda_tests herd_bench_gpu
  targets=(build/tests/kernels/cuda/herd_kernels_cuda_tests build/tests/nn/cuda/herd_nn_cuda_tests
    build/bench/gpu/herd_bench_gpu build/herd)
  [ -x build/tests/comm/nccl/herd_comm_nccl_tests ] || cmake --build build --target herd_comm_nccl_tests || true
  [ -x build/tests/comm/nccl/herd_comm_nccl_tests ] && targets+=(build/tests/comm/nccl/herd_comm_nccl_tests)
  rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib" "$pack/fallback"
  cp "${targets[@]}" "$pack/bin/" && strip "$pack"/bin/*
  # Every shared library the binaries load, except glibc's and CUDA's (the device has its own driver,
  # runtime, cuBLASLt and NCCL, which must match it); the C++ runtime goes to fallback/, used only when
  # the device lacks one.
  for lib in $(ldd "${targets[@]}" | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*|libcudart.so*|libcublas*|libnccl*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$pack/fallback/" ;;
      *) cp -L "$lib" "$pack/lib/" ;;
    esac
  done
  # Binaries and libraries in one archive: the carried folder must stay under 64 MiB.
  tar -C "$pack" -cJf "$pack/lib.tar.xz" bin lib fallback && rm -rf "$pack/bin" "$pack/lib" "$pack/fallback"
  # The planner's prediction for the benchmark's runs on the h200 preset (one GPU, no parallelism).
  # The benchmark's steps hold 16,384 tokens: 16384 / seq micro-batches of one sequence.
  for seq in 2048 8192; do
    build/herd estimate --model bench/gpu/llama3-1b.json --cluster h200 --gpus 1 --tp 1 --cp 1 --pp 1 --dp 1 --seq-len "$seq" \
      --global-batch $((16384 / seq)) --microbatch-size 1 --precision bf16 --software herd --json >"$pack/plan_$seq.json"
  done
  git rev-parse --short HEAD >"$pack/commit"
  du -sh "$pack"
  echo "prepared $pack; on the device: scripts/device_check.sh (carry: [\"$pack\"])"
  exit 0
fi

out="${OUT:-$pack/out}"
mkdir -p "$out"
[ -f "$pack/lib.tar.xz" ] || { echo "device_check: $pack/ is missing: run scripts/device_check.sh --prepare here first and carry it" >&2; exit 2; }
log() { echo "== device_check: $* (${SECONDS}s) =="; }

log "machine"
nvidia-smi || true
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || true
(command -v nvcc >/dev/null && nvcc --version | tail -2) || echo "nvcc: not on PATH"

log "libraries"
work=$(mktemp -d)
tar -C "$work" -xJf "$pack/lib.tar.xz"
bin="$work/bin"
libpath="$work/lib"  # mktemp gives an absolute path
# CUDA's own libraries on the device: the toolkit's, else the ones Python's CUDA wheels carry.
for name in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')
  [ -z "$found" ] && found=$(find /usr/local/cuda*/ /usr/lib /opt -name "$name" 2>/dev/null | head -1)
  if [ -n "$found" ]; then libpath="$libpath:$(dirname "$found")"; echo "$name: $found"; else echo "$name: not found"; fi
done
ldconfig -p 2>/dev/null | grep -q 'libstdc++.so.6 ' || libpath="$libpath:$work/fallback"
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

log "CUDA kernels against the CPU reference"
timeout 240 "$bin/herd_kernels_cuda_tests" --gtest_output="json:$out/cuda_tests.json" 2>&1 | tail -60
kernels_rc=${PIPESTATUS[0]}

log "the transformer block on the CUDA op interface against the CPU's"
timeout 120 "$bin/herd_nn_cuda_tests" --gtest_output="json:$out/nn_cuda_tests.json" 2>&1 | tail -20
block_rc=${PIPESTATUS[0]}

nccl_rc=skipped
if [ -x "$bin/herd_comm_nccl_tests" ]; then
  log "NCCL at world size one"
  timeout 60 "$bin/herd_comm_nccl_tests" 2>&1 | tail -20
  nccl_rc=${PIPESTATUS[0]}
fi

log "bf16 training step of the 1B model (bench/gpu)"
timeout 300 "$bin/herd_bench_gpu" --model bench/gpu/llama3-1b.json --tokens-per-step 16384 --attention-kernels mma \
  --json "$out/gpu_bench.json" 2>&1 | tail -20
bench_rc=${PIPESTATUS[0]}

# herd's kernels calibrated on this GPU (herd calibrate --device cuda: the h200 preset with the
# efficiencies they reach at each sequence length), and the planner's prediction of the same steps on
# that calibration: the GPU counterpart of herd train's calibrated "planned vs measured".
for seq in 2048 8192; do
  log "herd calibrate --device cuda at sequence $seq"
  timeout 120 "$bin/herd" calibrate --device cuda --model bench/gpu/llama3-1b.json --micro-batch 1 --seq-len "$seq" \
    --out "$out/h200_calibrated_$seq.json" 2>&1 | tail -14
  timeout 60 "$bin/herd" estimate --model bench/gpu/llama3-1b.json --cluster "$out/h200_calibrated_$seq.json" --gpus 1 \
    --tp 1 --cp 1 --pp 1 --dp 1 --seq-len "$seq" --global-batch $((16384 / seq)) --microbatch-size 1 --precision bf16 \
    --software herd --json >"$out/plan_calibrated_$seq.json" 2>"$out/plan_calibrated_$seq.err" || cat "$out/plan_calibrated_$seq.err"
done

log "summary"
python3 - "$out" "$pack" "$kernels_rc" "$nccl_rc" "$bench_rc" "$block_rc" <<'PY'
import datetime, json, os, sys
out, pack, kernels_rc, nccl_rc, bench_rc, block_rc = sys.argv[1:7]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a stage that died leaves no file; say so in the summary
        return {"missing": f"{path}: {e}"}
tests = load(os.path.join(out, "cuda_tests.json"))
block_tests = load(os.path.join(out, "nn_cuda_tests.json"))
summary = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": open(os.path.join(pack, "commit")).read().strip() if os.path.exists(os.path.join(pack, "commit")) else "unknown",
    "gpu": open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "unknown",
    "kernel_tests": {"exit": int(kernels_rc), "tests": tests.get("tests"), "failures": tests.get("failures"),
                     "failed": [f"{s['name']}.{t['name']}" for s in tests.get("testsuites", []) for t in s.get("testsuite", [])
                                if t.get("failures")]},
    "block_tests": {"exit": int(block_rc), "tests": block_tests.get("tests"), "failures": block_tests.get("failures")},
    "nccl_test_exit": nccl_rc,
    "bench": load(os.path.join(out, "gpu_bench.json")),
    "bench_exit": int(bench_rc),
    "planned": {seq: load(os.path.join(pack, f"plan_{seq}.json")) for seq in ("2048", "8192")},
    "calibration": {seq: load(os.path.join(out, f"h200_calibrated_{seq}.json")) for seq in ("2048", "8192")},
    "planned_calibrated": {seq: load(os.path.join(out, f"plan_calibrated_{seq}.json")) for seq in ("2048", "8192")},
}
with open(os.path.join(out, "device_check.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps({k: summary[k] for k in ("date", "gpu", "kernel_tests", "block_tests", "nccl_test_exit", "bench_exit")},
                 indent=2))
for r in summary["bench"].get("results", []):  # measured against the planner's h200 prediction
    plan = summary["planned"].get(str(r["seq_len"]), {})
    if "step_time_s" in plan:
        print(f"seq {r['seq_len']}: step {r['step_s']:.4f} s measured, {plan['step_time_s']:.4f} s planned "
              f"({100 * (plan['step_time_s'] / r['step_s'] - 1):+.1f}%); memory {r['peak_allocated_gib']:.1f} GiB measured, "
              f"{plan['memory']['total_bytes'] / 2**30:.1f} GiB planned; split {r.get('step_split_s')}; "
              f"attention ms {r.get('attention_split_ms')}")
    cal = summary["planned_calibrated"].get(str(r["seq_len"]), {})
    if "step_time_s" in cal:
        print(f"seq {r['seq_len']}: {cal['step_time_s']:.4f} s planned on this GPU's calibration "
              f"({100 * (cal['step_time_s'] / r['step_s'] - 1):+.1f}% against the measured step)")
PY
[ "$kernels_rc" = 0 ] && [ "$bench_rc" = 0 ] && { [ "$nccl_rc" = 0 ] || [ "$nccl_rc" = skipped ]; }

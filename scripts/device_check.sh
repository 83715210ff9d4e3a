#!/usr/bin/env bash
# The one command to run when a GPU machine is lent (docs/gpu.md). Two halves:
#
#   scripts/device_check.sh --prepare   on the CPU machine: builds herd and the GPU tests (kernels/cuda, the
#                                       block through the CUDA op interface, the NCCL backend) in build/,
#                                       makes the demo's token shards, and packs the binaries, the shards
#                                       and the shared libraries a bare GPU machine lacks into .device/
#                                       (ignored by git; carried to the device).
#   scripts/device_check.sh             on the GPU machine, from the repository root, with .device/ carried:
#                                       prints nvidia-smi and the driver and toolkit versions, runs every
#                                       CUDA kernel test against the CPU reference, the transformer block on
#                                       the CUDA op interface against the CPU's, the golden PyTorch check
#                                       through the trainer's model on the GPU, the NCCL test, then
#                                       `herd train --train.device=cuda` itself (bench/gpu/train_bench.py):
#                                       parity of the GPU run with herd's CPU run (tiny model, fp32 and
#                                       bf16), every 8-rank layout on the one GPU against the one-rank GPU
#                                       run, herd calibrate --device cuda, and the 1B model of bench/gpu at
#                                       sequence 2,048 and 8,192 with the planner's prediction on that
#                                       calibration. Writes one JSON summary with a "train" list,
#                                       $OUT/device_check.json (or .device/out/device_check.json without
#                                       $OUT). Within 8 minutes; each stage has its own timeout.
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
  cmake --build build -j "$(nproc)" --target herd herd_kernels_cuda_tests herd_nn_cuda_tests herd_train_cuda_tests
  targets=(build/tests/kernels/cuda/herd_kernels_cuda_tests build/tests/nn/cuda/herd_nn_cuda_tests
    build/tests/train/cuda/herd_train_cuda_tests build/herd)
  [ -x build/tests/parallel/nccl/herd_comm_nccl_tests ] || cmake --build build --target herd_comm_nccl_tests || true
  [ -x build/tests/parallel/nccl/herd_comm_nccl_tests ] && targets+=(build/tests/parallel/nccl/herd_comm_nccl_tests)
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
  # The demo's token shards (the bundled corpus), which every device run trains on.
  scripts/demo_data.sh >/dev/null
  cp -r runs/demo/data "$pack/data"
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

log "the golden PyTorch check through the trainer's model on the GPU"
HERD_SOURCE_DIR="$PWD" timeout 60 "$bin/herd_train_cuda_tests" --gtest_output="json:$out/golden_cuda_tests.json" 2>&1 | tail -12
golden_rc=${PIPESTATUS[0]}

nccl_rc=skipped
if [ -x "$bin/herd_comm_nccl_tests" ]; then
  log "NCCL: collectives, and rank-order reductions with the rank's device memory"
  timeout 60 "$bin/herd_comm_nccl_tests" 2>&1 | tail -20
  nccl_rc=${PIPESTATUS[0]}
fi

log "herd train --train.device=cuda against herd's CPU run, and every 8-rank layout on this GPU"
timeout 200 python3 bench/gpu/train_bench.py parity --herd "$bin/herd" --data "$pack/data" --steps 10 --timeout 60 \
  --out "$out/train_parity.json" 2>&1 | tail -30
parity_rc=${PIPESTATUS[0]}

# herd's kernels calibrated on this GPU at each sequence length, then herd train on the 1B model with its
# plan made on that calibration (herd train's planned vs measured).
perf_rc=0
for seq in 2048 8192; do
  # The whole check stays within 8 minutes of device time: a run that would start past 6 is skipped
  # (exit 124 in the summary) rather than cut off.
  if [ "$SECONDS" -gt 360 ]; then
    log "skipping sequence $seq: ${SECONDS}s of the 8-minute budget used"
    perf_rc=124
    continue
  fi
  log "herd calibrate --device cuda, then herd train on the 1B model at sequence $seq"
  timeout 90 "$bin/herd" calibrate --device cuda --model bench/gpu/llama3-1b.json --micro-batch 1 --seq-len "$seq" \
    --out "$out/calibrated_$seq.json" 2>&1 | tail -6
  timeout 150 python3 bench/gpu/train_bench.py perf --herd "$bin/herd" --data "$pack/data" --seq "$seq" \
    --cluster "$out/calibrated_$seq.json" --timeout 140 --out "$out/train_perf_$seq.json" 2>&1 | tail -12
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || perf_rc=$rc
done

log "summary"
python3 - "$out" "$pack" "$kernels_rc" "$nccl_rc" "$block_rc" "$parity_rc" "$perf_rc" "$golden_rc" <<'PY'
import datetime, json, os, sys
out, pack, kernels_rc, nccl_rc, block_rc, parity_rc, perf_rc, golden_rc = sys.argv[1:9]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a stage that died leaves no file; say so in the summary
        return {"missing": f"{path}: {e}"}
tests = load(os.path.join(out, "cuda_tests.json"))
block_tests = load(os.path.join(out, "nn_cuda_tests.json"))
golden_tests = load(os.path.join(out, "golden_cuda_tests.json"))
train = load(os.path.join(out, "train_parity.json")).get("train", [])
for seq in ("2048", "8192"):
    train += load(os.path.join(out, f"train_perf_{seq}.json")).get("train", [])
summary = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": open(os.path.join(pack, "commit")).read().strip() if os.path.exists(os.path.join(pack, "commit")) else "unknown",
    "gpu": open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "unknown",
    "kernel_tests": {"exit": int(kernels_rc), "tests": tests.get("tests"), "failures": tests.get("failures"),
                     "failed": [f"{s['name']}.{t['name']}" for s in tests.get("testsuites", []) for t in s.get("testsuite", [])
                                if t.get("failures")]},
    "block_tests": {"exit": int(block_rc), "tests": block_tests.get("tests"), "failures": block_tests.get("failures")},
    "golden_tests": {"exit": int(golden_rc), "tests": golden_tests.get("tests"), "failures": golden_tests.get("failures")},
    "nccl_test_exit": nccl_rc,
    "parity_exit": int(parity_rc),
    "perf_exit": int(perf_rc),
    "train": train,
    "calibration": {seq: load(os.path.join(out, f"calibrated_{seq}.json")) for seq in ("2048", "8192")},
}
with open(os.path.join(out, "device_check.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps({k: summary[k] for k in ("date", "gpu", "kernel_tests", "block_tests", "golden_tests", "nccl_test_exit",
                                          "parity_exit",
                                          "perf_exit")}, indent=2))
for r in train:
    p = r["planned"]
    print(f"{r['model']} seq {r['seq_len']}: step {r['step_s']} s (planned {p['step_s']}), {r['tokens_per_s']} tokens/s, "
          f"MFU {r['mfu']}, GPU peak {r['peak_memory_gib']} GiB (planned {p['memory_gib']}), parity {r['parity']['ok']} "
          f"(max relative difference {r['parity']['max_rel_diff']}, {len(r['parity']['layouts'])} layouts)")
PY
[ "$kernels_rc" = 0 ] && [ "$golden_rc" = 0 ] && [ "$parity_rc" = 0 ] && [ "$perf_rc" = 0 ] && { [ "$nccl_rc" = 0 ] || [ "$nccl_rc" = skipped ]; }

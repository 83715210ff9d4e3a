#!/usr/bin/env bash
# spawn_ranks.sh [--slurm] N COMMAND...: starts COMMAND as N processes with the variables torchrun gives its
# workers (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID,
# TORCHELASTIC_RESTART_COUNT), or with --slurm those srun without an MPI plugin gives its tasks
# (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
# SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST), waits for all of them and exits with the first
# non-zero status (0 when all succeed). What the tests of the gloo backend launch with where torchrun
# and Slurm are not installed; scripts/torchrun_check.sh and scripts/slurm_check.sh run the real ones.
set -uo pipefail
slurm=0
if [ "${1:-}" = "--slurm" ]; then
  slurm=1
  shift
fi
n=$1
shift
job="$$$RANDOM"
port=$((20000 + RANDOM % 20000))
pids=()
for ((r = 0; r < n; ++r)); do
  if [ "$slurm" = 1 ]; then
    SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r SLURM_NODEID=0 \
      SLURM_STEP_TASKS_PER_NODE=$n SLURM_STEP_NODELIST=localhost "$@" &
  else
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_RUN_ID="spawn-$job" TORCHELASTIC_RESTART_COUNT=0 "$@" &
  fi
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  rc=$?
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"

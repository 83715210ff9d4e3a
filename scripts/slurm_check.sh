#!/usr/bin/env bash
# herd under a real Slurm on this one machine, as docs/cluster.md describes it:
#   1. installs Debian's Slurm and MUNGE (slurm-wlm, munge) when missing;
#   2. starts a one-node cluster on localhost from a generated slurm.conf in a temporary directory
#      (munged, slurmctld and slurmd as root on free ports; MpiDefault=pmix where Slurm's pmix plugin is
#      installed);
#   3. finds build/herd (or builds it with scripts/setup.sh) and the demo data (scripts/demo_data.sh);
#   4. runs the TP2 x DP2 demo (configs/demo_tp2_dp2.json, shortened to HERD_SLURM_STEPS steps) as 4
#      tasks with srun --mpi=pmix (MPI), srun --mpi=none (gloo) and sbatch (scripts/slurm/herd.sbatch), and
#      checks each against the one-rank run of the same config: every step's loss within 1e-5 relative
#      (fp32);
#   5. requeues the sbatch job once mid-run (scontrol requeue, after its first checkpoint), then, in its
#      second run, sends its step the SIGTERM that --signal sends before a time limit (herd checkpoints
#      and exits 143, herd.sbatch requeues the job itself), and checks that each run resumed from the
#      checkpoint before it and that the job finished with every loss bit-identical to the uninterrupted
#      srun run;
#   6. stops the cluster, also on failure.
# Exit 0 when all of it holds (the temporary directory removed); otherwise one line
# "slurm_check: FAIL: <reason>" and status 1 (the daemons' logs, the jobs' output and checkpoints stay in
# the temporary directory the line names).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
repo=$PWD
start=$SECONDS
steps=${HERD_SLURM_STEPS:-30}
every=5  # checkpoint period: the requeue waits for the first checkpoint, at step $every
work=""
fail() {
  echo "slurm_check: FAIL: $*${work:+ (logs: $work)}" >&2
  exit 1
}
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited with status $?"' ERR
say() { echo "slurm_check: $* ($((SECONDS - start)) s)"; }

# 1. Slurm and MUNGE from Debian.
install_packages slurm-wlm munge
for tool in munged slurmctld slurmd srun sbatch scontrol squeue sinfo; do
  command -v "$tool" >/dev/null || fail "$tool is missing after installing slurm-wlm and munge"
done
say "$(slurmctld -V) and munge installed"

# 3 first: the binary and the data, so that the cluster runs only while it is needed.
[ -x build/herd ] || scripts/setup.sh
[ -x build/herd ] || fail "no build/herd after scripts/setup.sh"
scripts/demo_data.sh
say "herd and the demo data ready"

# 2. The cluster.
work=$(mktemp -d /tmp/herd-slurm-check.XXXXXX)
mkdir -p "$work"/{state,spool,log,run}
node=$(hostname -s)
cleanup() {
  trap - ERR
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$work/run/slurmctld.pid" ]; then
    scancel --quiet --full "${jobs[@]}" 2>/dev/null || true
    for _ in $(seq 60); do  # a cancelled job's processes end within KillWait
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  local f pid
  for f in slurmd slurmctld munged; do
    pid=$(cat "$work/run/$f.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  done
  [ "$passed" = 1 ] && rm -rf "$work"
  return 0
}
jobs=()
passed=0
trap cleanup EXIT

dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge.key"
munged --force --key-file="$work/munge.key" --socket="$work/run/munge.sock" --pid-file="$work/run/munged.pid" \
  --log-file="$work/log/munged.log" --seed-file="$work/run/munged.seed" ||
  fail "munged did not start (see $work/log/munged.log)"

# Two free TCP ports for slurmctld and slurmd.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
plugins=/usr/lib/x86_64-linux-gnu/slurm-wlm
mpi_default=none
[ -f "$plugins/mpi_pmix.so" ] && mpi_default=pmix
# 4 tasks whatever the cores: the node declares at least 4 CPUs (config_overrides takes the file's word).
cpus=$(($(nproc) > 4 ? $(nproc) : 4))
cat >"$work/slurm.conf" <<EOF
ClusterName=herdcheck
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/run/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=$mpi_default
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=check Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start (see $work/log/slurmctld.log)"
slurmd -f "$SLURM_CONF" -N "$node" || fail "slurmd did not start (see $work/log/slurmd.log)"
for _ in $(seq 60); do
  [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] && break
  sleep 0.5
done
[ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] ||
  fail "node $node is not idle 30 s after slurmd started: $(sinfo -h -o '%t %E' 2>&1 | head -1)"
[ "$mpi_default" = pmix ] || fail "Slurm's pmix plugin ($plugins/mpi_pmix.so) is missing: herd's ranks need PMIx"
say "one-node cluster up: $node, $cpus CPUs, MpiDefault=$mpi_default, ports $ctld_port/$slurmd_port"

# The demo run, shortened: evaluation only at the end, on two batches; no samples.
args=(configs/demo_tp2_dp2.json "--train.steps=$steps" "--checkpoint.every=$every" --train.log_every=5
  --eval.batches=2 --generate.samples=0)
# compare_losses A B TOLERANCE NAME: the metrics files A and B hold steps 1..$steps, and every loss of A
# is within TOLERANCE (relative) of B's; 0: bit-identical.
compare_losses() {
  python3 scripts/lib/compare_losses.py "$@" "$steps" 2>"$work/compare.err" || fail "$(cat "$work/compare.err")"
}

# The one-rank reference: ranks as threads, outside Slurm.
build/herd train "${args[@]}" --tp 1 --dp 1 --parallel.backend=local "--checkpoint.dir=$work/ck_one" \
  "--train.metrics_file=$work/one.jsonl" >"$work/one.out" 2>&1 || fail "the one-rank run failed: $(tail -1 "$work/one.out")"
say "one-rank run done"

# srun_job PLUGIN NAME BACKEND LAUNCHER: 4 tasks under srun --mpi=PLUGIN, which must say it trained 4 ranks
# over BACKEND started by LAUNCHER, against the one-rank run.
srun_job() {
  srun "--mpi=$1" -n 4 --chdir="$repo" build/herd train "${args[@]}" "--checkpoint.dir=$work/ck_$2" \
    "--train.metrics_file=$work/$2.jsonl" >"$work/$2.out" 2>&1 || fail "the srun --mpi=$1 job failed: $(tail -1 "$work/$2.out")"
  grep -q "training 4 ranks as processes over $3; $4" "$work/$2.out" ||
    fail "the srun --mpi=$1 job did not say it ran 4 $3 ranks started by $4 (see $work/$2.out)"
  compare_losses "$work/$2.jsonl" "$work/one.jsonl" 1e-5 "srun --mpi=$1 ($3) TP2 x DP2 vs one rank"
  say "srun --mpi=$1 job done"
}
# Ranks as MPI processes through PMIx; then without an MPI plugin, over gloo, meeting in the checkpoint
# directory.
srun_job pmix srun mpi "srun with PMIx"
srun_job none gloo gloo "srun without PMIx"

# sbatch, requeued once by scontrol after its first checkpoint, then stopped by SIGTERM to its step
# (what --signal=TERM@120 sends before the time limit): herd checkpoints that step and exits 143, and
# herd.sbatch requeues the job itself.
job=$(sbatch --parsable -n 4 --chdir="$repo" --output="$work/sbatch.out" scripts/slurm/herd.sbatch "${args[@]}" \
  "--checkpoint.dir=$work/ck_sbatch" "--train.metrics_file=$work/sbatch.jsonl")
jobs+=("$job")
show() { scontrol show job "$job" -o; }
state() { show | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
last_step() { tail -1 "$work/sbatch.jsonl" 2>/dev/null | grep -o '"step": *[0-9]*' | grep -o '[0-9]*$' || echo 0; }
# wait_for CONDITION WHAT: polls CONDITION while the job runs (a requeued one is started at once rather
# than after Slurm's BeginTime hold); fails when the job ends first or 300 s pass.
wait_for() {
  local deadline=$((SECONDS + 300)) st
  until eval "$1"; do
    st=$(state)
    case $st in
      COMPLETED) fail "sbatch job $job finished before $2; raise HERD_SLURM_STEPS (now $steps)" ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        fail "sbatch job $job ended $st before $2: $(grep -v '^  ' "$work/sbatch.out" | tail -1)" ;;
    esac
    if show | grep -q 'JobState=PENDING.*Reason=BeginTime'; then scontrol update jobid="$job" StartTime=now; fi
    [ $SECONDS -lt $deadline ] || fail "sbatch job $job: no $2 in 300 s (state $st)"
    sleep 0.2
  done
}
wait_for '[ -d "$work/ck_sbatch/step_$(printf %08d "$every")" ]' "its first checkpoint"
scontrol requeue "$job"
say "sbatch job $job requeued by scontrol after its checkpoint of step $every"
wait_for 'grep -q "(restart 1)" "$work/sbatch.out" && [ "$(last_step)" -ge $((3 * every)) ]' "step $((3 * every)) after the requeue"
scancel --signal=TERM "$job"  # the job's steps only, as the time limit's --signal: not the batch script
wait_for 'grep -q "herd.sbatch: herd checkpointed and stopped on SIGTERM; requeueing" "$work/sbatch.out"' \
  "a checkpoint on SIGTERM"
say "sbatch job $job stopped by SIGTERM at step $(last_step) and requeued by herd.sbatch"
wait_for '[ "$(state)" = COMPLETED ]' "the end of its third run"
restarts=$(show | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
[ "$restarts" = 2 ] || fail "sbatch job $job was restarted $restarts times, expected twice"
mapfile -t resumed < <(grep -o "resumed from $work/ck_sbatch/step_[0-9]*" "$work/sbatch.out" | sed 's/.*step_0*//')
[ "${#resumed[@]}" = 2 ] || fail "sbatch job $job resumed ${#resumed[@]} times from a checkpoint, expected twice"
grep -q "preempted: stopped after step ${resumed[1]} with a checkpoint; exit code 143" "$work/sbatch.out" ||
  fail "the second run did not resume from the checkpoint herd saved on SIGTERM (step ${resumed[1]})"
compare_losses "$work/sbatch.jsonl" "$work/one.jsonl" 1e-5 "sbatch TP2 x DP2 vs one rank"
compare_losses "$work/sbatch.jsonl" "$work/srun.jsonl" 0 "sbatch, requeued twice, vs uninterrupted srun"
say "sbatch job $job: resumed at steps ${resumed[0]} and ${resumed[1]}, bit-identical to the srun run"
passed=1  # cleanup removes the temporary directory once the daemons are down
echo "slurm_check: PASS in $((SECONDS - start)) s"

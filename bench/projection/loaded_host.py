#!/usr/bin/env python3
"""The loaded host, measured: what one busy process beside a herd rank costs it, and why.

Part 1, herd: the tiny model on one rank (2 threads, and 1 thread for reference), on a quiet host and
beside one busy loop (`setsid sh -c 'while :; do :; done'`, one core's worth of another job). Each run
reports its median step, the cores' worth of CPU the job got over the run (`measured.job_cores` of the
projection file), the background load it measured, and the planner's step for that load.

Part 2, the cause without herd: bench/projection/forkjoin_share.cpp (herd_bench_forkjoin), a two-thread
OpenMP team of dynamically shared chunks, quiet and beside the same busy loop, under herd's spin budget
(GOMP_SPINCOUNT=1000), libgomp's default (300000), OMP_WAIT_POLICY=passive, regions of 0.25 and 5 ms,
and with its threads pinned one per core: the cores Linux gives the team.

    python3 bench/projection/loaded_host.py [--reps N] [--steps S] [--out bench/projection/loaded_host.json]

Writes JSON (figure, machine, commit, every run) and a Markdown table beside it (.md). docs/projection.md
"The loaded host" reads it. Needs a quiet host otherwise: it adds the only load it measures.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from benchlib import REPO, commit, load_average, machine, make_data  # noqa: E402

HERD = os.path.join(REPO, "build/herd")
FORKJOIN = os.path.join(REPO, "build/bench/projection/herd_bench_forkjoin")
DATA = os.path.join(REPO, "runs/projection-data")


class Busy:
    """One busy loop in its own session while the block runs."""

    def __enter__(self):
        self.p = subprocess.Popen(["setsid", "sh", "-c", "while :; do :; done"])
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


def herd_run(threads, steps, tmp):
    summary = os.path.join(tmp, "p.json")
    if os.path.exists(summary):
        os.remove(summary)
    env = dict(os.environ)
    env.pop("HERD_OPENMP_WAIT", None)
    cmd = [HERD, "train", "--data.dir=" + DATA, "--model.name=tiny", "--train.steps=%d" % steps,
           "--eval.every=0", "--eval.batches=1", "--schedule.warmup_steps=1", "--generate.samples=0",
           "--train.log_every=1000", "--train.threads=%d" % threads, "--global-batch", "8",
           "--microbatch-size", "8", "--checkpoint.dir=" + os.path.join(tmp, "ck"),
           "--train.projection_file=" + summary]
    subprocess.run(["rm", "-rf", os.path.join(tmp, "ck")], check=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit("herd train failed: " + r.stderr[-500:])
    d = json.load(open(summary))
    return {"step_s": d["measured"]["step_s"], "job_cores": d["measured"]["job_cores"],
            "background_jobs": d["background_jobs"], "planned_step_s": d["planned"]["step_s"]}


def forkjoin(env_extra, region_us, bind, label):
    env = dict(os.environ)
    env.update(env_extra)
    regions = max(100, int(2.0e6 / region_us))
    cmd = [FORKJOIN, "--threads", "2", "--regions", str(regions), "--region-us", str(region_us), "--chunks", "16",
           "--label", label]
    if bind:
        cmd.append("--bind")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout)["results"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(REPO, "bench/projection/loaded_host.json"))
    a = ap.parse_args()
    make_data(HERD, DATA)
    # Plans on this machine's stored calibration, taken now if there is none (as the demo does).
    subprocess.run([HERD, "calibrate", "--if-missing"], check=True, stdout=subprocess.DEVNULL)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for load in ("quiet", "busy"):
                for threads in (2, 1):
                    before = load_average()
                    if load == "busy":
                        with Busy():
                            r = herd_run(threads, a.steps, tmp)
                    else:
                        r = herd_run(threads, a.steps, tmp)
                    r.update({"part": "herd", "rep": rep, "load": load, "threads": threads, "load_before": before})
                    rows.append(r)
                    print(json.dumps(r), flush=True)
        policies = [("herd spin budget", {"GOMP_SPINCOUNT": "1000"}),
                    ("libgomp default", {"GOMP_SPINCOUNT": "300000"}),
                    ("passive", {"OMP_WAIT_POLICY": "passive"})]
        for rep in range(a.reps):
            for load in ("quiet", "busy"):
                variants = [(name, env, us, False) for name, env in policies for us in (250, 5000)]
                variants.append(("herd spin budget, pinned", {"GOMP_SPINCOUNT": "1000"}, 250, True))
                for name, env, us, bind in variants:
                    if load == "busy":
                        with Busy():
                            r = forkjoin(env, us, bind, load)
                    else:
                        r = forkjoin(env, us, bind, load)
                    r.update({"part": "forkjoin", "rep": rep, "load": load, "policy": name})
                    rows.append(r)
                    print(json.dumps({k: r[k] for k in ("load", "policy", "region_us", "team_cores",
                                                        "slowdown_vs_one_core")}), flush=True)
    doc = {"figure": "the loaded host: a rank beside one busy process, and a fork-join team's share of the cores",
           "machine": machine(), "commit": commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    md = [report_herd(rows), "", report_forkjoin(rows)]
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write("# The loaded host (bench/projection/loaded_host.py)\n\n%s, %s, commit %s\n\n" %
                (doc["date"], doc["machine"]["cpu"], doc["commit"]) + "\n".join(md) + "\n")
    print("wrote", a.out)


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def report_herd(rows):
    herd = [r for r in rows if r["part"] == "herd"]
    quiet2 = med([r for r in herd if r["load"] == "quiet" and r["threads"] == 2], "step_s")
    out = ["| tiny, 1 rank | threads | median step (s) | vs quiet 2 threads | cores the job got | background jobs | "
           "planned step (s) | planned vs measured |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for load in ("quiet", "busy"):
        for threads in (2, 1):
            rs = [r for r in herd if r["load"] == load and r["threads"] == threads]
            if not rs:
                continue
            step, plan = med(rs, "step_s"), med(rs, "planned_step_s")
            out.append("| %s | %d | %.3f (%s) | %.2fx | %.2f | %.2f | %.3f | %+.1f%% |" % (
                load, threads, step, ", ".join("%.3f" % r["step_s"] for r in rs), step / quiet2,
                med(rs, "job_cores"), med(rs, "background_jobs"), plan, 100 * (plan - step) / step))
    return "\n".join(out)


def report_forkjoin(rows):
    fj = [r for r in rows if r["part"] == "forkjoin"]
    out = ["| fork-join team, 2 threads | wait policy | region (ms) | cores the team got | time per region vs one "
           "core alone |", "| --- | --- | --- | --- | --- |"]
    keys = []
    for r in fj:
        k = (r["load"], r["policy"], r["region_us"])
        if k not in keys:
            keys.append(k)
    for load, policy, us in keys:
        rs = [r for r in fj if (r["load"], r["policy"], r["region_us"]) == (load, policy, us)]
        out.append("| %s | %s | %.2f | %.2f | %.2fx |" % (load, policy, us / 1000, med(rs, "team_cores"),
                                                           med(rs, "slowdown_vs_one_core")))
    return "\n".join(out)


if __name__ == "__main__":
    main()

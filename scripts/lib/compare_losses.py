#!/usr/bin/env python3
"""compare_losses.py A B TOLERANCE NAME STEPS: the last record of each step 1..STEPS in metrics files A and
B (herd train's train.metrics_file, JSON lines), every loss of A within TOLERANCE (relative) of B's; 0 means
bit-identical. Prints one line with the largest relative difference; on a mismatch prints one line naming
the step and both losses to stderr and exits 1. The check scripts' (slurm_check.sh, torchrun_check.sh)
comparison of a run against its reference."""
import json
import sys


def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "step" in r and "loss" in r:
            out[r["step"]] = r["loss"]
    return out


def main():
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    tol, name, steps = float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    want = list(range(1, steps + 1))
    if sorted(a) != want or sorted(b) != want:
        sys.stderr.write(f"{name}: steps {sorted(a)[:3]}..{len(a)} and {sorted(b)[:3]}..{len(b)}, expected 1..{steps}\n")
        sys.exit(1)
    worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
    if (tol == 0 and any(a[s] != b[s] for s in a)) or worst > tol:
        s = max(a, key=lambda s: abs(a[s] - b[s]) / abs(b[s]))
        sys.stderr.write(f"{name}: step {s} loss {a[s]!r} vs {b[s]!r} (relative {worst:.3g}, allowed {tol:g})\n")
        sys.exit(1)
    print(f"{name}: {len(a)} steps, largest relative difference {worst:.3g} (allowed {tol:g})")


if __name__ == "__main__":
    main()

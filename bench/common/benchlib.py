"""What every Python benchmark driver under bench/ records and needs: the machine, the commit, the load
average, and token shards of the bundled corpus. The C++ benchmarks have the same in bench_json.h."""
import os
import platform
import subprocess

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def machine():
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0.0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) / (1024 * 1024)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "host": platform.node()}


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=REPO).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def make_data(herd, out):
    """Token shards of the State of the Union corpus with an 8,192-id BPE (cached in `out`)."""
    if os.path.exists(os.path.join(out, "meta.json")):
        return
    corpus = os.path.join(REPO, "corpus/sotu.jsonl.xz")
    tok = out + ".model"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    subprocess.run([herd, "data", "train-tokenizer", "--input", corpus, "--output", tok], check=True)
    subprocess.run([herd, "data", "--input", corpus, "--tokenizer", tok, "--output", out], check=True)

#!/usr/bin/env python3
"""Plots how the effective training time (ETT) of the Llama 3 405B job falls from 1K to 128K GPUs.

Every number comes from `herd estimate --json` (its `reliability` object): the 405B model in the
paper's layout (TP 8, PP 16, CP 1), weak-scaled (16 sequences of 8,192 tokens per data-parallel rank,
the paper's 2,048 on DP 128), at the paper's failure rate per GPU-hour (herd's default), the Llama 3
storage (2 TB/s), with synchronous and asynchronous checkpointing and a 10 min or a 1 min restart.

The Llama 3 cluster holds 24,576 GPUs; beyond that the job runs on a copy of the llama3-h100 preset
whose outer (1:7 oversubscribed) tier is larger, written by this script. It checks first that the copy
gives the preset's numbers at 16,384 GPUs, so the two cannot drift apart silently.

Writes docs/images/reliability_ett.svg and docs/images/reliability_ett.json (the points):
    python3 tools/reliability_curve.py [--herd build/herd] [--out docs/images/reliability_ett]
Standard library only.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

GPUS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
LINES = [  # (mode, restart_s, label, colour, dashed)
    ("sync", 600, "sync checkpoints, 10 min restart", "#e15759", False),
    ("async", 600, "async checkpoints, 10 min restart", "#4e79a7", False),
    ("sync", 60, "sync checkpoints, 1 min restart", "#e15759", True),
    ("async", 60, "async checkpoints, 1 min restart", "#4e79a7", True),
]

# The llama3-h100 preset (src/herd/topology/cluster_presets.cpp) with its outer tier grown to 48 pods.
BIG_CLUSTER = {
    "name": "llama3-h100-48-pods",
    "accelerator": {
        "name": "H100 SXM 80GB",
        "peak_tflops": {"bf16": 989, "fp8": 1979, "fp32": 67},
        "memory_gib": 79.6,
        "memory_bw_gb_per_s": 3350,
        "matmul_efficiency": 0.72,
        "attention_fwd_efficiency": 0.585,
        "attention_bwd_efficiency": 0.45,
        "memory_bw_efficiency": 0.80,
        "sm_count": 132,
        "kernel_overhead_us": 3,
        "speed_variation": 0.01,
    },
    "storage_bw_gb_per_s": 2000,
    "tiers": [
        {"name": "nvlink", "size": 8, "bw_gb_per_s": 450, "latency_us": 3, "efficiency": 0.75},
        {"name": "rack", "size": 16, "bw_gb_per_s": 50, "latency_us": 5, "efficiency": 0.85},
        {"name": "pod", "size": 3072, "bw_gb_per_s": 50, "latency_us": 10, "efficiency": 0.85},
        {"name": "cluster", "size": 3072 * 48, "bw_gb_per_s": 50, "latency_us": 20, "efficiency": 0.85,
         "oversubscription": 7},
    ],
}


def estimate(herd, cluster, gpus, mode, restart_s):
    dp = gpus // 128
    cmd = [herd, "estimate", "--model", "llama3-405b", "--cluster", cluster, "--gpus", str(gpus),
           "--tp", "8", "--cp", "1", "--pp", "16", "--dp", str(dp), "--seq-len", "8192",
           "--global-batch", str(16 * dp), "--checkpoint-mode", mode, "--restart-s", str(restart_s), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def svg(points, path):
    w, h, left, right, top, bottom = 760, 460, 70, 250, 50, 60
    pw, ph = w - left - right, h - top - bottom
    lo = math.floor(min(p["ett"] for line in points for p in line["points"]) * 10) / 10
    x = lambda g: left + pw * (math.log2(g) - math.log2(GPUS[0])) / (math.log2(GPUS[-1]) - math.log2(GPUS[0]))
    y = lambda e: top + ph * (1.0 - (e - lo) / (1.0 - lo))
    o = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>",
         "<rect width='100%' height='100%' fill='white'/>",
         f"<text x='{left}' y='24' font-size='15' font-weight='bold'>Llama 3 405B: effective training time "
         "vs. job size (herd estimate)</text>",
         f"<text x='{left}' y='40' font-size='11'>Llama 3 failure rate (419 interruptions / 54 days / 16,384 GPUs), "
         "2 TB/s storage, Daly interval</text>"]
    for i in range(int(round((1.0 - lo) * 20)) + 1):
        e = lo + i * 0.05
        o.append(f"<line x1='{left}' y1='{y(e):.1f}' x2='{left + pw}' y2='{y(e):.1f}' stroke='#ddd'/>")
        o.append(f"<text x='{left - 8}' y='{y(e) + 4:.1f}' text-anchor='end'>{100 * e:.0f}%</text>")
    for g in GPUS:
        o.append(f"<line x1='{x(g):.1f}' y1='{top}' x2='{x(g):.1f}' y2='{top + ph}' stroke='#eee'/>")
        o.append(f"<text x='{x(g):.1f}' y='{top + ph + 16}' text-anchor='middle'>{g // 1024}K</text>")
    o.append(f"<text x='{left + pw / 2}' y='{h - 18}' text-anchor='middle'>GPUs in the job</text>")
    o.append(f"<text x='18' y='{top + ph / 2}' transform='rotate(-90 18 {top + ph / 2})' "
             "text-anchor='middle'>ETT (productive / wall time)</text>")
    o.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#444'/>")
    for i, line in enumerate(points):
        pts = " ".join(f"{x(p['gpus']):.1f},{y(p['ett']):.1f}" for p in line["points"])
        dash = " stroke-dasharray='6,4'" if line["dashed"] else ""
        o.append(f"<polyline points='{pts}' fill='none' stroke='{line['colour']}' stroke-width='2'{dash}/>")
        for p in line["points"]:
            o.append(f"<circle cx='{x(p['gpus']):.1f}' cy='{y(p['ett']):.1f}' r='3' fill='{line['colour']}'>"
                     f"<title>{p['gpus']} GPUs: ETT {100 * p['ett']:.1f}%</title></circle>")
        ly = top + 10 + 22 * i
        o.append(f"<line x1='{left + pw + 14}' y1='{ly}' x2='{left + pw + 44}' y2='{ly}' "
                 f"stroke='{line['colour']}' stroke-width='2'{dash}/>")
        o.append(f"<text x='{left + pw + 50}' y='{ly + 4}' font-size='11'>{line['label']}</text>")
    # The paper's report: more than 90% at 16,384 GPUs.
    o.append(f"<line x1='{x(16384) - 6:.1f}' y1='{y(0.9):.1f}' x2='{x(16384) + 6:.1f}' y2='{y(0.9):.1f}' "
             "stroke='black' stroke-width='3'/>")
    o.append(f"<text x='{x(16384) + 10:.1f}' y='{y(0.9) + 16:.1f}' font-size='11'>Llama 3: &gt;90% at 16K</text>")
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--herd", default="build/herd")
    ap.add_argument("--out", default="docs/images/reliability_ett")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = os.path.join(tmp, "llama3-h100-48-pods.json")
        with open(cluster, "w") as f:
            json.dump(BIG_CLUSTER, f)
        for mode in ("sync", "async"):
            a = estimate(args.herd, "llama3-h100", 16384, mode, 600)
            b = estimate(args.herd, cluster, 16384, mode, 600)
            for key in ("step_time_s", "mfu"):
                if abs(a[key] - b[key]) > 1e-9 * abs(a[key]):
                    sys.exit(f"reliability_curve.py: the 48-pod copy drifted from the llama3-h100 preset ({key})")
            for key in ("ett", "checkpoint_interval_s", "checkpoint_write_s"):
                if abs(a["reliability"][key] - b["reliability"][key]) > 1e-9 * abs(a["reliability"][key]):
                    sys.exit(f"reliability_curve.py: the 48-pod copy drifted from the llama3-h100 preset ({key})")
        lines = []
        for mode, restart, label, colour, dashed in LINES:
            pts = []
            for g in GPUS:
                r = estimate(args.herd, cluster, g, mode, restart)["reliability"]
                pts.append({k: r[k] for k in ("ett", "checkpoint_interval_s", "checkpoint_interval_steps",
                                               "interruptions_per_day", "mtbf_s", "checkpoint_stall_s",
                                               "checkpoint_write_s", "checkpoint_bytes_per_rank",
                                               "wall_time_shares")} | {"gpus": g})
            lines.append({"mode": mode, "restart_s": restart, "label": label, "colour": colour, "dashed": dashed,
                          "points": pts})
    with open(args.out + ".json", "w") as f:
        json.dump({"source": "tools/reliability_curve.py (herd estimate --json)", "lines": lines}, f, indent=1)
    svg(lines, args.out + ".svg")
    print(f"{'GPUs':>7} " + " ".join(f"{l['mode']:>5}/{l['restart_s']:<4}" for l in lines))
    for i, g in enumerate(GPUS):
        print(f"{g:>7} " + " ".join(f"{100 * l['points'][i]['ett']:>9.1f}%" for l in lines))


if __name__ == "__main__":
    main()

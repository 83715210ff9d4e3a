#!/usr/bin/env python3
"""Holds herd's step-time model against published training runs.

Reads tests/planner/published_runs.json (each run: source, hardware, full layout, the published figure and
the step time derived from it), runs `herd estimate ... --json` on every run and writes
docs/planner-validation.md (table, MAPE overall and by group) and docs/images/planner-validation.svg
(predicted against derived step time, log-log, y = x), with the p10-p90 step-time band's coverage (share of
runs inside it, mean half-width) on these runs and, on the published page, on the held-out runs beside them.
tests/planner/published_runs_cli_test.cpp runs the same estimates with the same flags and asserts the bounds
recorded in the JSON; `--write-bounds` rewrites those bounds from today's errors (the coordinator's step after
a model change, never automatic).

A run's optional system fields (software, attention, pipeline_sends, dp_overlap, layer_split, grad_acc_fusion,
tp_overlap, grad_dtype) and precisions other than bf16 are passed only when `herd estimate --help` lists the flag or
value, so the same data works before and after the planner gains those options; what was dropped is reported.

The held-out runs (tests/planner/held_out_runs.json, never used to tune the model) go through the same
script: --data tests/planner/held_out_runs.json --md docs/planner-held-out.md --svg
docs/images/planner-held-out.svg. A data file's optional "title" names its runs in the page's heading.

--what-if FIELD=VALUE (repeatable) sets a field in every run and only prints the errors that gives, --only TEXT
keeps the runs whose id contains TEXT: how the figures of docs/planner.md that compare an assumption (e.g.
tp_overlap=off) or another size of a run are made.

Usage: python3 tools/planner_validation.py [--herd build/herd] [--data tests/planner/published_runs.json]
       [--md docs/planner-validation.md] [--svg docs/images/planner-validation.svg] [--write-bounds]
       [--what-if FIELD=VALUE ...] [--only TEXT]
Python 3 standard library only.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(ROOT, "tests", "planner", "published_runs.json")
HELD_OUT_DATA = os.path.join(ROOT, "tests", "planner", "held_out_runs.json")

# Optional system fields of the flag contract (docs/planner.md): JSON key -> herd flag.
OPTIONAL_FLAGS = {
    "software": "--software",
    "attention": "--attention",
    "pipeline_sends": "--pipeline-sends",
    "dp_overlap": "--dp-overlap",
    "layer_split": "--layer-split",
    "grad_acc_fusion": "--grad-acc-fusion",
    "tp_overlap": "--tp-overlap",
    "grad_dtype": "--grad-dtype",
}


def fail(msg):
    sys.stderr.write("planner_validation: " + msg + "\n")
    sys.exit(1)


# The values each enumerated field may take (herd's flag contract, docs/planner.md).
ACCEPTED = {
    "recompute": ("none", "selective", "full"),
    "precision": ("bf16", "fp16", "fp8", "fp32"),
    "software": ("fused", "eager", "compiled"),
    "attention": ("flash", "materialized"),
    "pipeline_sends": ("async", "sync"),
    "dp_overlap": ("on", "off"),
    "grad_acc_fusion": ("on", "off"),
    "tp_overlap": ("on", "off"),
    "grad_dtype": ("fp32", "bf16"),
    "layer_split": ("auto", "even", "light-ends"),
}
POSITIVE_INTS = ("gpus", "tp", "cp", "pp", "dp", "v", "microbatch_size", "global_batch", "seq_len")
REQUIRED = ("id", "group", "source", "system", "model", "cluster", "accelerator", "recompute", "sequence_parallel",
            "precision", "zero", "published", "derived_step_time_s", "derivation") + POSITIVE_INTS


def validate_run(run, where):
    """One line naming the run, the field, the value and what is accepted, for the first thing wrong."""
    rid = run.get("id", "?") if isinstance(run, dict) else "?"
    if not isinstance(run, dict):
        fail(f"{where}: a run is not a JSON object; every run is an object with the fields listed in 'about'")
    for k in REQUIRED:
        if k not in run:
            fail(f"{where}: run '{rid}' has no field '{k}'; every run needs the fields listed in the JSON's 'about'")
    for k in POSITIVE_INTS:
        v = run[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            fail(f"{where}: run '{rid}': field '{k}' is {json.dumps(v)}; expected a positive integer")
    for k, ok in ACCEPTED.items():
        if k in run and run[k] not in ok:
            fail(f"{where}: run '{rid}': field '{k}' is {json.dumps(run[k])}; expected one of {', '.join(ok)}")
    if not isinstance(run["sequence_parallel"], bool):
        fail(f"{where}: run '{rid}': field 'sequence_parallel' is {json.dumps(run['sequence_parallel'])}; expected true or false")
    if run["zero"] not in (0, 1, 2, 3) or isinstance(run["zero"], bool):
        fail(f"{where}: run '{rid}': field 'zero' is {json.dumps(run['zero'])}; expected 0, 1, 2 or 3")
    d = run["derived_step_time_s"]
    if not isinstance(d, (int, float)) or isinstance(d, bool) or not d > 0:
        fail(f"{where}: run '{rid}': field 'derived_step_time_s' is {json.dumps(d)}; expected a positive number of seconds")
    if run["tp"] * run["cp"] * run["pp"] * run["dp"] != run["gpus"]:
        fail(f"{where}: run '{rid}': tp x cp x pp x dp = {run['tp'] * run['cp'] * run['pp'] * run['dp']} "
             f"is not gpus ({run['gpus']}); fix the layout or the GPU count")


def supported(herd):
    """Which optional flags and precisions this herd binary accepts (read once from --help)."""
    try:
        text = subprocess.run([herd, "estimate", "--help"], capture_output=True, text=True, check=False).stdout
    except OSError as e:
        fail(f"cannot run '{herd}': {e}; build it first (cmake --build build --target herd) or pass --herd PATH")
    flags = {k for k, f in OPTIONAL_FLAGS.items() if f + " " in text or f + "\n" in text or f + "," in text}
    # The --precision help may wrap: look at the text just after the flag.
    idx = text.find("--precision")
    window = text[idx: idx + 300] if idx >= 0 else ""
    precisions = {"bf16"} | {p for p in ("fp8", "fp16", "fp32") if p in window}
    return flags, precisions


def estimate_args(run, data_dir, model_path, flags, precisions):
    """The `herd estimate` arguments for one run, and the fields left out because herd lacks the flag."""
    cluster = run["cluster"]
    if cluster.endswith(".json"):
        cluster = os.path.join(data_dir, cluster)
    args = ["estimate", "--model", model_path, "--cluster", cluster, "--gpus", str(run["gpus"])]
    for k in ("tp", "cp", "pp", "dp", "v"):
        args += ["--" + k, str(run[k])]
    args += ["--microbatch-size", str(run["microbatch_size"]), "--global-batch", str(run["global_batch"]),
             "--seq-len", str(run["seq_len"]), "--recompute", run["recompute"],
             "--sequence-parallel", "true" if run["sequence_parallel"] else "false", "--zero", str(run["zero"])]
    if "reshard_after_forward" in run:
        args += ["--reshard-after-forward", "true" if run["reshard_after_forward"] else "false"]
    dropped = []
    prec = run["precision"]
    if prec in precisions:
        args += ["--precision", prec]
    else:
        dropped.append(f"precision={prec}")
    for key, flag in OPTIONAL_FLAGS.items():
        if key in run:
            if key in flags:
                args += [flag, str(run[key])]
            else:
                dropped.append(f"{key}={run[key]}")
    return args + ["--json"], dropped


def what_if_value(text):
    """A --what-if value as JSON would hold it: 8, true, 0.5, or else the text itself ("off")."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run_all(herd, data_path, what_if=(), only=""):
    data_dir = os.path.dirname(os.path.abspath(data_path))
    try:
        with open(data_path) as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        fail(f"{data_path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})")
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not isinstance(doc.get("bounds"), dict):
        fail(f"{data_path}: expected an object with a 'runs' list and a 'bounds' object")
    if only:
        doc["runs"] = [r for r in doc["runs"] if isinstance(r, dict) and only in str(r.get("id", ""))]
        if not doc["runs"]:
            fail(f"--only {only}: no run of {data_path} has an id containing it")
    ids = set()
    for run in doc["runs"]:
        for field, value in what_if:
            run[field] = what_if_value(value)
        validate_run(run, data_path)
        if run["id"] in ids:
            fail(f"{data_path}: run '{run['id']}' appears twice; ids must be unique")
        ids.add(run["id"])
    flags, precisions = supported(herd)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in doc["runs"]:
            model = run["model"]
            if isinstance(model, dict):
                model_path = os.path.join(tmp, run["id"] + ".json")
                with open(model_path, "w") as mf:
                    json.dump(model, mf)
            else:
                model_path = model
            try:
                args, dropped = estimate_args(run, data_dir, model_path, flags, precisions)
                run["derived_step_time_s"], run["group"], run["id"]
            except KeyError as e:
                fail(f"{data_path}: run '{run.get('id', '?')}' has no field {e}; every run needs the fields listed in the JSON's 'about'")
            p = subprocess.run([herd] + args, capture_output=True, text=True, check=False)
            r = {"run": run, "dropped": dropped, "args": args}
            if p.returncode != 0:
                r["error"] = (p.stdout + p.stderr).strip().splitlines()[-1] if (p.stdout + p.stderr).strip() else f"exit {p.returncode}"
            else:
                j = json.loads(p.stdout)
                r["predicted"] = j["step_time_s"]
                r["fits"] = j["fits"]
                r["mfu"] = j["mfu"]
                r["time"] = j["time"]
                r["err_pct"] = 100.0 * (j["step_time_s"] - run["derived_step_time_s"]) / run["derived_step_time_s"]
                if "step_time_band_s" in j:
                    r["band"] = (j["step_time_band_s"]["p10"], j["step_time_band_s"]["p90"])
            results.append(r)
    return doc, results, flags, precisions


def mape(rs):
    errs = [abs(r["err_pct"]) for r in rs if "err_pct" in r]
    return sum(errs) / len(errs) if errs else float("nan")


def mean_signed(rs):
    """Mean signed error in percent: negative = herd predicts faster steps than published (optimistic)."""
    errs = [r["err_pct"] for r in rs if "err_pct" in r]
    return sum(errs) / len(errs) if errs else float("nan")


def band_coverage(rs):
    """(runs with a band, share of them whose derived step time lies in p10-p90, mean half-width of the band
    as a share of the point estimate), or None when no run has a band."""
    banded = [r for r in rs if "band" in r]
    if not banded:
        return None
    inside = sum(1 for r in banded if r["band"][0] <= r["run"]["derived_step_time_s"] <= r["band"][1])
    half = sum((r["band"][1] - r["band"][0]) / 2 / r["predicted"] for r in banded) / len(banded)
    return len(banded), inside / len(banded), half


def coverage_text(rs):
    c = band_coverage(rs)
    if c is None:
        return "no step-time band in this herd's output"
    n, share, half = c
    return (f"p10-p90 band coverage {100 * share:.1f}% ({round(share * n)} of {n} runs inside), "
            f"mean half-width {100 * half:.1f}% of the point estimate")


def layout_text(run):
    s = f"TP{run['tp']} CP{run['cp']} PP{run['pp']} DP{run['dp']}"
    if run["v"] > 1:
        s += f" V{run['v']}"
    s += f", mbs {run['microbatch_size']}, GBS {run['global_batch']} x {run['seq_len']}, {run['recompute']}"
    if run["sequence_parallel"] and run["tp"] > 1:
        s += ", SP"
    s += f", ZeRO-{run['zero']}, {run['precision']}"
    return s


def model_text(run):
    m = run["model"]
    return m if isinstance(m, str) else m.get("name", "inline")


def fmt_published(run):
    p = run["published"]
    unit = {"tflops_per_gpu": "TFLOP/s/GPU", "tokens_per_s_per_gpu": "tokens/s/GPU", "step_time_s": "s/step",
            "mfu": "MFU"}.get(p["metric"], p["metric"])
    return f"{p['value']:,} {unit}"


# ------------------------------------------------------------------------------------------------ SVG

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def write_svg(results, path):
    pts = [(r["run"]["derived_step_time_s"], r["predicted"], r["run"]["group"], r["run"]["id"]) for r in results
           if "predicted" in r]
    groups = sorted({g for _, _, g, _ in pts})
    colour = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    ticks = [m * 10.0 ** e for e in range(-3, 6) for m in (1, 2, 5)]
    lo = max(t for t in ticks if t <= min(min(a, b) for a, b, _, _ in pts))
    hi = min(t for t in ticks if t >= max(max(a, b) for a, b, _, _ in pts))
    W, H, L, R, T, B = 900, 600, 70, 330, 40, 60
    pw, ph = W - L - R, H - T - B

    def x(v):
        return L + pw * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    def y(v):
        return T + ph - ph * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L + pw / 2}" y="22" text-anchor="middle" font-size="14">herd predicted vs published step time '
           f'({len(pts)} runs, MAPE {mape(results):.1f}%)</text>']
    for v in ticks:
        if lo <= v <= hi:
            out.append(f'<line x1="{x(v):.1f}" y1="{T}" x2="{x(v):.1f}" y2="{T + ph}" stroke="#e0e0e0"/>')
            out.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{L + pw}" y2="{y(v):.1f}" stroke="#e0e0e0"/>')
            lab = f"{v:g}"
            out.append(f'<text x="{x(v):.1f}" y="{T + ph + 16}" text-anchor="middle">{lab}</text>')
            out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{lab}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    # y = x and the +-15% band
    out.append(f'<line x1="{x(lo):.1f}" y1="{y(lo):.1f}" x2="{x(hi):.1f}" y2="{y(hi):.1f}" stroke="black"/>')
    for f in (0.85, 1.15):
        out.append(f'<line x1="{x(lo):.1f}" y1="{y(lo * f):.1f}" x2="{x(hi / f if f > 1 else hi):.1f}" '
                   f'y2="{y(hi if f > 1 else hi * f):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 18}" text-anchor="middle">published (derived) step time, s</text>')
    out.append(f'<text x="18" y="{T + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {T + ph / 2})">'
               'herd predicted step time, s</text>')
    for a, b, g, rid in pts:
        out.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="4" fill="{colour[g]}" fill-opacity="0.8">'
                   f'<title>{rid}: published {a:.3g} s, predicted {b:.3g} s</title></circle>')
    ly = T + 10
    for g in groups:
        out.append(f'<circle cx="{L + pw + 16}" cy="{ly}" r="5" fill="{colour[g]}"/>')
        out.append(f'<text x="{L + pw + 26}" y="{ly + 4}" font-size="11">{g}</text>')
        ly += 20
    out.append(f'<line x1="{L + pw + 10}" y1="{ly}" x2="{L + pw + 22}" y2="{ly}" stroke="black"/>'
               f'<text x="{L + pw + 26}" y="{ly + 4}" font-size="11">y = x</text>')
    ly += 18
    out.append(f'<line x1="{L + pw + 10}" y1="{ly}" x2="{L + pw + 22}" y2="{ly}" stroke="#999" stroke-dasharray="4 3"/>'
               f'<text x="{L + pw + 26}" y="{ly + 4}" font-size="11">+-15%</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ------------------------------------------------------------------------------------------------ Markdown

def write_md(doc, results, flags, precisions, path, svg_rel, herd_desc, data_path, band_rows=()):
    groups = sorted({r["run"]["group"] for r in results})
    ok = [r for r in results if "err_pct" in r]
    data_rel = os.path.relpath(os.path.abspath(data_path), ROOT)
    command = "python3 tools/planner_validation.py"
    if data_rel != os.path.join("tests", "planner", "published_runs.json"):
        command += f" --data {data_rel} --md {os.path.relpath(os.path.abspath(path), ROOT)} --svg " + \
            os.path.relpath(os.path.abspath(os.path.join(os.path.dirname(path), svg_rel)), ROOT)
    # A data file may name what its runs are ("title"); its "about" says where they come from.
    lines = [f"# Planner validation: {doc.get('title', 'published training runs')}", "",
             f"Generated by `{command}` (after `cmake --build build --target herd`) from "
             f"`{data_rel}` "
             f"({len(results)} runs; {herd_desc}). Every run's source (table, page), full layout and what was assumed "
             "(with the reason) are in the JSON; `derivation` there shows how the step time follows from the published "
             "figure using published numbers only. `tests/planner/published_runs_cli_test.cpp` runs the same estimates.", "",
             f"![predicted vs published step time]({svg_rel})", "",
             f"**MAPE {mape(results):.1f}%** over {len(ok)} runs "
             f"(within 15%: {sum(1 for r in ok if abs(r['err_pct']) <= 15)}; within 8%: "
             f"{sum(1 for r in ok if abs(r['err_pct']) <= 8)}; mean signed error {mean_signed(ok):+.1f}%).", "",
             "**Step-time band** (p10-p90, an 80% band; docs/planner.md section 5.1): the share of runs whose published "
             "step time lies inside herd's band, and the band's mean half-width as a share of the point estimate.", "",
             "| runs | count | inside p10-p90 | mean half-width |", "| --- | --- | --- | --- |"]
    own = "tuned on (this page)" if os.path.abspath(data_path) == os.path.abspath(DEFAULT_DATA) else "this page's runs"
    for label, rs in [(own, ok)] + list(band_rows):
        c = band_coverage(rs)
        if c is None:
            lines.append(f"| {label} | {len(rs)} | no band in this herd's output | |")
        else:
            lines.append(f"| {label} | {c[0]} | {100 * c[1]:.1f}% ({round(c[1] * c[0])} of {c[0]}) | {100 * c[2]:.1f}% |")
    lines += ["",
             "| group | runs | MAPE | mean error (sign) |", "| --- | --- | --- | --- |"]
    for g in groups:
        rs = [r for r in ok if r["run"]["group"] == g]
        mean = sum(r["err_pct"] for r in rs) / len(rs) if rs else float("nan")
        lines.append(f"| {g} | {len(rs)} | {mape(rs):.1f}% | {mean:+.1f}% |")
    for label, pred in (("A100", lambda r: "A100" in r["run"]["accelerator"]),
                        ("H100", lambda r: "H100" in r["run"]["accelerator"]),
                        ("H200", lambda r: "H200" in r["run"]["accelerator"]),
                        ("B200 / GB200", lambda r: "B200" in r["run"]["accelerator"]),
                        ("GPT-style (GELU MLP)", lambda r: isinstance(r["run"]["model"], dict)
                         and r["run"]["model"].get("mlp") == "gelu"),
                        ("Llama-style (SwiGLU)", lambda r: not isinstance(r["run"]["model"], dict)
                         or r["run"]["model"].get("mlp", "swiglu") == "swiglu"),
                        ("Megatron-style (TP x PP, PP > 1)", lambda r: r["run"]["pp"] > 1),
                        ("FSDP-style (ZeRO-3, no PP)", lambda r: r["run"]["zero"] == 3 and r["run"]["pp"] == 1),
                        ("fp8", lambda r: r["run"]["precision"] == "fp8"),
                        ("bf16 / fp16", lambda r: r["run"]["precision"] in ("bf16", "fp16"))):
        rs = [r for r in ok if pred(r)]
        if rs:
            mean = sum(r["err_pct"] for r in rs) / len(rs)
            lines.append(f"| *all {label}* | {len(rs)} | {mape(rs):.1f}% | {mean:+.1f}% |")
    missing = sorted(set(OPTIONAL_FLAGS) - flags)
    lines += ["", "Error = (predicted - published) / published; positive = herd predicts a slower step.",
              "Flags this herd binary lacks, so the runs' fields were not passed: "
              + (", ".join(OPTIONAL_FLAGS[k] for k in missing) if missing else "none") + ".", "",
              "| id | system | hardware | model | layout | published | derived step s | predicted s | error | fits |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        run = r["run"]
        pred = f"{r['predicted']:.3f}" if "predicted" in r else "error"
        err = f"{r['err_pct']:+.1f}%" if "err_pct" in r else r.get("error", "")
        fits = ("yes" if r.get("fits") else "no") if "fits" in r else ""
        lines.append(f"| {run['id']} | {run['system']} | {run['gpus']} x {run['accelerator']} | {model_text(run)} | "
                     f"{layout_text(run)} | {fmt_published(run)} | {run['derived_step_time_s']:.3f} | {pred} | {err} | {fits} |")
    lines += ["", "`fits` is herd's memory verdict; every run here did run, so `no` is a memory-model miss "
              "(or an assumed knob, e.g. recompute, that the real run set differently).", "",
              "## Largest misses and where herd puts the time", "",
              "herd's step-time breakdown (seconds) for the ten runs it misses most; `exposed` is communication "
              "not hidden behind compute. The run's notes and assumptions are in the JSON.", "",
              "| id | error | published s | predicted s | compute | bubble | exposed TP | exposed CP | exposed PP | "
              "exposed DP | optimizer + stragglers |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(ok, key=lambda r: -abs(r["err_pct"]))[:10]:
        t = r["time"]
        e = t["exposed_comm_s"]
        lines.append(f"| {r['run']['id']} | {r['err_pct']:+.1f}% | {r['run']['derived_step_time_s']:.3f} | "
                     f"{r['predicted']:.3f} | {t['compute_s']:.3f} | {t['bubble_s']:.3f} | {e['tp']:.3f} | "
                     f"{e['cp']:.3f} | {e['pp']:.3f} | {e['dp']:.3f} | {t['optimizer_s'] + t['straggler_s']:.3f} |")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--herd", default=os.path.join(ROOT, "build", "herd"))
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--md", default=None, help="the page (default: docs/planner-validation.md, or "
                    "docs/planner-held-out.md for tests/planner/held_out_runs.json)")
    ap.add_argument("--svg", default=None, help="the plot (default: beside the page's name in docs/images)")
    ap.add_argument("--write-bounds", action="store_true",
                    help="rewrite the JSON's bounds from today's errors (tight runs and overall MAPE bound)")
    ap.add_argument("--what-if", action="append", default=[], metavar="FIELD=VALUE",
                    help="set FIELD to VALUE in every run (e.g. tp_overlap=off) and print the errors that gives; "
                         "writes no page, plot or bounds (repeatable)")
    ap.add_argument("--only", default="", metavar="TEXT",
                    help="only the runs whose id contains TEXT; prints, writes no page, plot or bounds")
    a = ap.parse_args()
    page = "planner-held-out" if os.path.basename(a.data) == "held_out_runs.json" else "planner-validation"
    a.md = a.md or os.path.join(ROOT, "docs", page + ".md")
    a.svg = a.svg or os.path.join(ROOT, "docs", "images", page + ".svg")
    if not os.path.exists(a.data):
        fail(f"--data {a.data}: no such file")
    what_if = []
    for w in a.what_if:
        if "=" not in w:
            fail(f"--what-if {w}: expected FIELD=VALUE, e.g. tp_overlap=off")
        what_if.append(tuple(w.split("=", 1)))
    print_only = bool(what_if or a.only)
    if print_only and a.write_bounds:
        fail("--what-if or --only with --write-bounds: bounds are written from every run as published, drop one")
    doc, results, flags, precisions = run_all(a.herd, a.data, what_if, a.only)
    for r in results:
        e = f"{r['err_pct']:+7.1f}%" if "err_pct" in r else "  ERROR  " + r.get("error", "")
        print(f"{r['run']['id']:<52} published {r['run']['derived_step_time_s']:9.3f} s  "
              f"predicted {r.get('predicted', float('nan')):9.3f} s  {e}")
    print(f"MAPE {mape(results):.2f}% over {sum(1 for r in results if 'err_pct' in r)} runs "
          f"({sum(1 for r in results if 'error' in r)} errors), mean signed error {mean_signed(results):+.2f}%"
          + (" with " + ", ".join(f"{k}={v}" for k, v in what_if) + " in every run" if what_if else ""))
    print(coverage_text(results))
    if print_only:
        return
    os.makedirs(os.path.dirname(a.svg), exist_ok=True)
    write_svg(results, a.svg)
    svg_rel = os.path.relpath(a.svg, os.path.dirname(a.md))
    # The page of the tuned runs also shows the band's coverage on the held-out runs, side by side.
    band_rows = []
    if os.path.abspath(a.data) == os.path.abspath(DEFAULT_DATA) and os.path.exists(HELD_OUT_DATA):
        held = [r for r in run_all(a.herd, HELD_OUT_DATA)[1] if "err_pct" in r]
        band_rows.append(("held out, never tuned on ([planner-held-out.md](planner-held-out.md))", held))
        print("held out: " + coverage_text(held))
    write_md(doc, results, flags, precisions, a.md, svg_rel,
             "optional flags passed: " + (", ".join(sorted(flags)) if flags else "none"), a.data, band_rows)
    if a.write_bounds:
        b = doc["bounds"]
        b["tight_runs"] = [r["run"]["id"] for r in results if "err_pct" in r and abs(r["err_pct"]) <= b["per_run_pct"]]
        b["overall_mape_pct"] = math.ceil(mape(results) + 5)
        b["today"] = {r["run"]["id"]: round(r["err_pct"], 1) for r in results if "err_pct" in r}
        with open(a.data, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"bounds written: {len(b['tight_runs'])} tight runs, overall MAPE bound {b['overall_mape_pct']}%")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peer of herd_bench_train: the same Llama 3 preset, batch and optimizer step, timed the same way.

Builds the model of herd's `tiny` or `small` preset (RMSNorm, RoPE, GQA, SwiGLU, untied embeddings,
fp32 parameters), runs warm-up steps and N timed training steps (forward, cross-entropy, backward,
clipping, AdamW) on random tokens, and prints one JSON result with the same fields herd's benchmark
writes (tokens/s by wall clock and per CPU-second, achieved model GFLOP/s with the same FLOP count).

--mode compile wraps the model in torch.compile (inductor backend; forward and, through AOTAutograd,
backward are compiled, clipping and AdamW stay eager). The first warm-up step compiles; warm-up steps
(two in this mode) are not timed, and `compile_s` is the first step's wall time less the median timed
step (run.sh gives each run a fresh TORCHINDUCTOR_CACHE_DIR, so it is a cold compile). A torch without
torch.compile (Debian's 1.13) prints a record with `skipped` instead, as does a compile that fails
(the reason is in the record).
--precision bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16): fp32 master
weights, fp32 gradients and fp32 AdamW, bf16 matmul inputs (herd's train.precision = bf16 likewise).
The residual stream and the norms stay fp32; RoPE'd q and k are cast back to bf16 for the attention,
and the loss is taken on fp32 logits.

Thread control: torch.set_num_threads(n) does not limit the OpenBLAS inside Debian's torch, so
OPENBLAS_NUM_THREADS must be set in the environment too (run.sh does).
Run with Debian's torch: /usr/bin/python3 bench/train/torch_peer.py --model small --threads 1
or with a PyPI torch in a venv (bench/train/setup_torch_venv.sh): build/torch-venv/bin/python ...
  --mode eager|compile --precision fp32|bf16

Each PyTorch gets its best eager path: where F.scaled_dot_product_attention exists (torch >= 2.0) the
attention is its fused causal kernel (flash attention on the CPU) with GQA handled inside where the
version allows (enable_gqa, torch >= 2.5), and AdamW is the fused (or foreach) implementation; the
older path is the explicit softmax(QK^T + mask) V of torch 1.13. --attention manual forces the latter.
"""
import argparse
import contextlib
import json
import math
import os
import re
import resource
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {  # src/herd/model/config.cpp: small_model(name, hidden, ffn, layers, heads, kv_heads)
    "tiny": dict(hidden=256, ffn=768, layers=8, heads=8, kv_heads=4),
    "small": dict(hidden=512, ffn=1536, layers=8, heads=8, kv_heads=2),
}
VOCAB = 8192
ATTENTION = "manual"  # set in main(): "sdpa" or "manual"
SDPA_GQA = False  # scaled_dot_product_attention takes enable_gqa (torch >= 2.5)


class Block(torch.nn.Module):
    def __init__(self, d, f, h, kv):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.w_attn_norm = torch.nn.Parameter(torch.ones(d))
        self.w_mlp_norm = torch.nn.Parameter(torch.ones(d))
        self.wq = torch.nn.Linear(d, h * self.hd, bias=False)
        self.wk = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wv = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wo = torch.nn.Linear(h * self.hd, d, bias=False)
        self.w_gate = torch.nn.Linear(d, f, bias=False)
        self.w_up = torch.nn.Linear(d, f, bias=False)
        self.w_down = torch.nn.Linear(f, d, bias=False)

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.norm(x, self.w_attn_norm)
        q = self.wq(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        # Under autocast v is bf16 and RoPE's fp32 tables promote q, k to fp32: attend in v's dtype.
        q, k = rope(q, cos, sin).to(v.dtype), rope(k, cos, sin).to(v.dtype)
        if ATTENTION == "sdpa" and SDPA_GQA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
            if ATTENTION == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
                a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(a)
        h = self.norm(x, self.w_mlp_norm)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Llama(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        d = p["hidden"]
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.blocks = torch.nn.ModuleList(Block(d, p["ffn"], p["heads"], p["kv_heads"]) for _ in range(p["layers"]))
        self.w_final = torch.nn.Parameter(torch.ones(d))
        self.out = torch.nn.Linear(d, VOCAB, bias=False)
        self.hd = d // p["heads"]

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        inv = 500000.0 ** (-torch.arange(0, self.hd // 2, dtype=torch.float32) * 2 / self.hd)
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv
        cos, sin = torch.cos(ang), torch.sin(ang)
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        logits = self.out(Block.norm(x, self.w_final))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def matmul_peak(dtype, n=2048, reps=3):
    """This torch's own square matmul rate in `dtype` (GFLOP/s, best of `reps` after one warm-up), for
    reference beside herd's in-process peaks (the ones the fractions are taken against)."""
    a = torch.full((n, n), 0.5, dtype=dtype)
    best = 0.0
    for r in range(reps + 1):
        t0 = time.perf_counter()
        torch.mm(a, a)
        dt = time.perf_counter() - t0
        if r:
            best = max(best, 2.0 * n**3 / dt / 1e9)
        elif dt > 10:  # a matmul this slow (no fast kernel for the dtype): one sample is enough
            return 2.0 * n**3 / dt / 1e9
    return best


def matmul_shapes(tokens, reps=5):
    """This torch's matmul rate (GFLOP/s, median of `reps` after one warm-up, by process CPU time) at the
    small preset's GEMM shapes, as herd_bench_kernels names them (`tokens` rows: batch x sequence), in
    fp32 and bf16: what PyTorch's bundled BLAS and oneDNN reach where herd's libraries run."""
    dim, ffn, qkv = 512, 1536, 512 + 2 * 2 * 64
    shapes = [("gemm square 2048", "NN", 2048, 2048, 2048), ("gemm qkv fwd (NT)", "NT", tokens, qkv, dim),
              ("gemm wo fwd (NT)", "NT", tokens, dim, dim), ("gemm gate_up fwd (NT)", "NT", tokens, 2 * ffn, dim),
              ("gemm down fwd (NT)", "NT", tokens, dim, ffn), ("gemm gate_up dx (NN)", "NN", tokens, dim, 2 * ffn),
              ("gemm gate_up dw (TN)", "TN", 2 * ffn, dim, tokens)]
    out = []
    gen = torch.Generator().manual_seed(0)
    for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for name, trans, m, n, k in shapes:
            a = torch.randn(k, m, generator=gen).to(dtype).t() if trans[0] == "T" else torch.randn(m, k, generator=gen).to(dtype)
            b = torch.randn(n, k, generator=gen).to(dtype).t() if trans[1] == "T" else torch.randn(k, n, generator=gen).to(dtype)
            times = []
            for r in range(reps + 1):
                t0 = time.process_time()
                torch.mm(a, b)
                if r:
                    times.append(time.process_time() - t0)
            sec = sorted(times)[len(times) // 2]
            out.append({"kernel": f"{label} {name}", "dtype": label, "m": m, "n": n, "k": k, "seconds": sec,
                        "gflops": 2.0 * m * n * k / sec / 1e9})
            print(f"torch {label} {name:28s} {sec * 1e3:9.3f} ms {out[-1]['gflops']:8.1f} GFLOP/s", file=sys.stderr)
    return out


def cpu_has_bf16():
    """Whether this CPU executes bf16 dot products (AVX512-BF16 or AMX-BF16), as herd's gemm_bf16 asks."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return True  # unknown: time it
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="small", choices=PRESETS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--attention", default="auto", choices=("auto", "sdpa", "manual"))
    ap.add_argument("--mode", default="eager", choices=("eager", "compile"),
                    help="eager, or torch.compile with the inductor backend")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="fp32, or bf16 autocast around forward and loss (fp32 master weights and AdamW)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: 1 eager, 2 compile)")
    ap.add_argument("--matmul-shapes", action="store_true",
                    help="time torch.mm at the small preset's GEMM shapes in fp32 and bf16 (herd_bench_kernels' "
                         "gemm and gemm_bf16 rows) and print that JSON instead of training")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else (2 if args.mode == "compile" else 1)
    B, T = args.micro_batch, args.seq_len
    base = {"impl": "pytorch", "torch_version": torch.__version__, "model": args.model, "threads": args.threads,
            "micro_batch": B, "seq_len": T, "steps_timed": args.steps, "mode": args.mode, "precision": args.precision}

    def skipped(reason):
        print(f"torch_peer: {args.mode} {args.precision} skipped: {reason}", file=sys.stderr)
        print(json.dumps(dict(base, skipped=reason)))
        sys.exit(0)

    if args.mode == "compile" and not hasattr(torch, "compile"):
        skipped(f"torch {torch.__version__} has no torch.compile")
    global ATTENTION, SDPA_GQA
    have_sdpa = hasattr(F, "scaled_dot_product_attention")
    ATTENTION = "sdpa" if args.attention == "sdpa" or (args.attention == "auto" and have_sdpa) else "manual"
    if ATTENTION == "sdpa":
        try:
            z = torch.zeros(1, 2, 4, 8)
            F.scaled_dot_product_attention(z, z[:, :1], z[:, :1], is_causal=True, enable_gqa=True)
            SDPA_GQA = True
        except TypeError:
            SDPA_GQA = False
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        print("warning: set OPENBLAS_NUM_THREADS to --threads (Debian's torch ignores set_num_threads for BLAS)",
              file=sys.stderr)
    torch.set_num_threads(args.threads)
    if args.matmul_shapes:
        print(json.dumps({"impl": "pytorch", "torch_version": torch.__version__, "threads": args.threads,
                          "clock": "process cpu time", "tokens": B * T, "results": matmul_shapes(B * T)}))
        return
    torch.manual_seed(0)
    p = PRESETS[args.model]
    m = Llama(p)
    n_params = sum(x.numel() for x in m.parameters())
    tokens = torch.randint(0, VOCAB, (B, T))
    targets = torch.randint(0, VOCAB, (B, T))
    fwd = torch.compile(m, backend="inductor") if args.mode == "compile" else m
    bf16 = args.precision == "bf16"
    if bf16:
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.nn.Linear(4, 4)(torch.zeros(2, 4))
        except (TypeError, RuntimeError) as e:
            skipped(f"torch {torch.__version__} has no CPU bf16 autocast ({e})")
        if not cpu_has_bf16() and os.environ.get("TORCH_PEER_BF16_EMULATED") != "1":
            skipped("no bf16 instructions on this CPU (avx512_bf16, amx_bf16): PyTorch's bf16 autocast emulates "
                    "them, one row unfinished after 16 minutes on an AMD EPYC (Zen 3, AVX2); TORCH_PEER_BF16_EMULATED=1 times it")
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(opt):
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = fwd(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss.item()

    # The fastest AdamW this version runs on the CPU, probed on a scratch parameter (some versions
    # accept fused=True at construction and refuse it at the first step).
    adamw = "single-tensor"
    for kind in ("fused", "foreach"):
        try:
            z = torch.nn.Parameter(torch.zeros(4))
            z.grad = torch.ones(4)
            torch.optim.AdamW([z], lr=1e-4, **{kind: True}).step()
            adamw = kind
            break
        except (TypeError, RuntimeError, ValueError):
            pass
    extra = {adamw: True} if adamw != "single-tensor" else {}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, **extra)
    warm_s, losses = [], []
    for _ in range(warmup):
        t0 = time.perf_counter()
        try:
            losses.append(step(opt))
        except Exception as e:  # noqa: BLE001 - a compile that fails is a recorded result, not a crash
            if args.mode != "compile":
                raise
            skipped(f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        warm_s.append(time.perf_counter() - t0)
    wall, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.append(step(opt))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    loss = losses[-1]
    step_s, step_cpu_s = list(wall), list(cpu)
    wall.sort()
    cpu.sort()
    med = lambda v: v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    med_wall, med_cpu = med(wall), med(cpu)
    # The same model FLOPs per token as herd (model/flops.h, kSixN, causal): 6 x all parameters +
    # 12 x layers x hidden x (T + 1) / 2.
    fpt = 6 * n_params + 12 * p["layers"] * p["hidden"] * (T + 1) / 2
    n = B * T
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    r = dict(base)
    r.update({"torch_blas": blas.group(1) if blas else "?", "attention": ATTENTION + ("+gqa" if SDPA_GQA else ""),
              "adamw": adamw, "params": n_params,
              "autocast": "cpu bfloat16 (forward and loss)" if bf16 else None,
              "fp32_matmul_precision": getattr(torch, "get_float32_matmul_precision", lambda: "highest")(),
              "warmup_steps": warmup, "warmup_s": warm_s,
              "compile_s": max(0.0, warm_s[0] - med_wall) if args.mode == "compile" else 0.0,
              "step_s": step_s, "step_cpu_s": step_cpu_s, "step_s_median": med_wall, "step_cpu_s_median": med_cpu,
              "tokens_per_s": n / med_wall, "tokens_per_cpu_s": n / med_cpu * args.threads,
              "model_flops_per_token": fpt, "achieved_gflops": fpt * n / med_wall / 1e9,
              "achieved_gflops_cpu_time": fpt * n / med_cpu * args.threads / 1e9,
              "first_loss": losses[0], "final_loss": loss, "losses": losses,
              "torch_matmul_peak_gflops": matmul_peak(torch.bfloat16 if bf16 else torch.float32),
              "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})
    print(json.dumps(r))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the bf16 golden file: PyTorch's bf16 autocast on the tiny Llama 3 of tools/llama_golden.py.

The same model, weights (the splitmix64 hash of tools/llama_golden.py), packed batch and file format as
tests/train/golden/llama_tiny.bin. The fp32 parameters run under torch.autocast("cpu", torch.bfloat16),
written the way Llama reference code is (Meta's llama, torchtitan): every linear, the output head
included, is autocast (bf16 inputs, fp32 accumulation, bf16 output); RMSNorm runs in fp32 on x.float();
RoPE in fp32 on q.float() and k.float(); attention is F.scaled_dot_product_attention on bf16 q, k, v
under the causal document mask (PyTorch's CPU kernel: fp32 softmax and accumulation); the SwiGLU gate in
fp32 (silu(g.float()) * u.float()); the residual stream stays fp32 (fp32 + bf16 promotes); the loss is
cross_entropy on logits.float(). Autograd gives the backward; each bf16 op's gradient is cast back to
its fp32 parameter, so the stored gradients are fp32 values of bf16-computed gradients, as with any
autocast run.

Stored: the logits (as fp32), the loss, every parameter gradient, and the calibration a reader needs to
judge a tolerance: how far this bf16 run and PyTorch's own fp32 run are from the float64 reference
(max |a - b| / max |b| per tensor; the worst gradient tensor), and the unit roundoff of bf16 (2^-8).

Run in a throwaway venv with PyTorch from PyPI (bench/train/setup_torch_venv.sh makes build/torch-venv):
  build/torch-venv/bin/python tools/llama_golden_bf16.py tests/train/golden/llama_tiny_bf16.bin
CI does not need PyTorch; only this script does.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_golden import forward as forward_reference  # noqa: E402
from llama_golden import init_values, make_batch, param_specs, rope  # noqa: E402


def rmsnorm_fp32(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward_autocast(params, cfg, tokens, positions, doc_ids, targets):
    """(logits (B, T, V) as autocast returns them (bf16), loss) under bf16 autocast."""
    B, T = tokens.shape
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    eps = cfg["norm_eps"]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    allowed = (causal[None] & same_doc)[:, None]  # (B, 1, T, T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = params["tok_embedding"][tokens]  # fp32: embedding lookups are not autocast
        for layer in range(cfg["n_layers"]):
            p = lambda n: params[f"layers.{layer}.{n}"]  # noqa: E731
            h = rmsnorm_fp32(x, p("attn_norm"), eps)
            q = F.linear(h, p("wq")).view(B, T, H, hd)
            k = F.linear(h, p("wk")).view(B, T, KV, hd)
            v = F.linear(h, p("wv")).view(B, T, KV, hd)
            q = rope(q.float(), positions, cfg["rope_theta"], cfg["rope_style"])
            k = rope(k.float(), positions, cfg["rope_theta"], cfg["rope_style"])
            rep = H // KV  # query head j uses KV head j // rep
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2).bfloat16(), k.transpose(1, 2).bfloat16(),
                                               v.transpose(1, 2).bfloat16(), attn_mask=allowed)
            a = a.transpose(1, 2).reshape(B, T, H * hd)
            x = x + F.linear(a, p("wo"))
            h = rmsnorm_fp32(x, p("mlp_norm"), eps)
            g = F.linear(h, p("w_gate"))
            u = F.linear(h, p("w_up"))
            x = x + F.linear(F.silu(g.float()) * u.float(), p("w_down"))
        x = rmsnorm_fp32(x, params["final_norm"], eps)
        logits = F.linear(x, params["output"])
    loss = F.cross_entropy(logits.float().view(B * T, -1), targets.view(-1).long(), ignore_index=-1)
    return logits, loss


def run(cfg, dtype, fwd):
    specs = param_specs(cfg)
    params = {}
    for i, (name, shape, center, scale) in enumerate(specs):
        vals = init_values(i, int(np.prod(shape)), center, scale).reshape(shape)
        params[name] = torch.tensor(vals, dtype=dtype, requires_grad=True)
    rng = np.random.default_rng(cfg["batch_seed"])
    batch = tuple(torch.tensor(a) for a in make_batch(cfg, rng))
    logits, loss = fwd(params, cfg, *batch)
    loss.backward()
    grads = {n: params[n].grad.detach().double() for n, *_ in specs}
    return batch, logits.detach().double(), loss.item(), grads, specs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output file, e.g. tests/train/golden/llama_tiny_bf16.bin")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # tools/llama_golden.py's configuration, unchanged.
    cfg = dict(hidden=64, ffn_hidden=96, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab=256,
               seq_len=32, batch=2, rope_theta=10000.0, norm_eps=1e-5, rope_style="half", batch_seed=1234)

    batch, logits, loss, grads, specs = run(cfg, torch.float32, forward_autocast)
    _, l64, loss64, g64, _ = run(cfg, torch.float64, forward_reference)
    _, l32, loss32, g32, _ = run(cfg, torch.float32, forward_reference)
    rel = lambda a, b: (a - b).abs().max().item() / b.abs().max().item()  # noqa: E731

    def distances(lg, ls, gs):
        per = {n: rel(gs[n], g64[n]) for n in g64}
        worst = max(per, key=per.get)
        return {"logits": rel(lg, l64), "loss": abs(ls - loss64) / abs(loss64), "grads_worst": per[worst],
                "grads_worst_tensor": worst, "grads_median": float(np.median(list(per.values())))}

    calib = {"bf16_autocast_vs_float64": distances(logits, loss, grads),
             "fp32_vs_float64": distances(l32, loss32, g32), "bf16_unit_roundoff": 2.0 ** -8}

    tensors, blobs, offset = [], [], 0

    def add(name, arr, dtype):
        nonlocal offset
        data = np.ascontiguousarray(arr, dtype=dtype).tobytes()
        tensors.append({"name": name, "dtype": "f32" if dtype == np.float32 else "i32",
                        "shape": list(arr.shape), "offset": offset})
        blobs.append(data)
        offset += len(data)

    for name, arr in zip(["tokens", "positions", "doc_ids", "targets"], batch):
        add("batch." + name, arr.numpy(), np.int32)
    add("logits", logits.numpy(), np.float32)
    for name, *_ in specs:
        add("grad." + name, grads[name].numpy(), np.float32)
    header = {"format": "herd golden v1", "config": cfg, "loss": loss, "param_order": [s[0] for s in specs],
              "init": {s[0]: {"center": s[2], "scale": s[3]} for s in specs},
              "torch_version": torch.__version__, "reference_dtype": "bf16 autocast (fp32 parameters)",
              "calibration": calib, "tensors": tensors}
    head = json.dumps(header).encode()
    with open(args.out, "wb") as f:
        f.write(b"HERDGOLD" + struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)
    print(f"wrote {args.out}: loss {loss:.6f} (float64 {loss64:.6f}); {json.dumps(calib)}", file=sys.stderr)


if __name__ == "__main__":
    main()

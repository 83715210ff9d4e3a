#!/usr/bin/env python3
"""Writes the golden file herd's nn/ and train/ are checked against: a tiny Llama 3 in PyTorch.

The model is the Llama 3 architecture at toy size (RMSNorm, RoPE, grouped-query attention, SwiGLU,
untied input and output embeddings) run on one packed batch: every row holds several documents, the
attention mask is causal *within* each document, positions restart at every document, and a few
targets are -1 (ignored by the loss, the mean over the remaining tokens).

The file holds the batch, the logits, the loss, the gradient of every parameter and the losses of
10 AdamW steps (with gradient clipping). Weights are not stored: both sides generate them from the
same integer hash (splitmix64 of the tensor index and the element index, see `init_values`), which
keeps the file to a few hundred KB. Everything is computed in float64 from those weights (which are
exactly representable in float32), so the reference carries no float32 rounding of its own.

Format: b"HERDGOLD", a little-endian uint64 header length, a JSON header (config, optimizer,
scalar results, and for each tensor its name, dtype, shape and byte offset into the data that
follows), then the raw little-endian data.

Run with Debian's PyTorch: /usr/bin/python3 tools/llama_golden.py tests/nn/golden/llama_tiny.bin
CI does not need PyTorch; only this script does.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

MASK64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64 finaliser on a numpy uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def init_values(tensor_index, count, center, scale):
    """center + scale * u, u uniform in [-1, 1) from splitmix64(tensor_index << 32 | i).

    u = 2 * (h >> 11) * 2^-53 - 1 is exact in double; one rounding to float32 at the end, which the
    C++ side (tests/nn/golden_weights.h) reproduces bit for bit.
    """
    idx = (np.uint64(tensor_index) << np.uint64(32)) + np.arange(count, dtype=np.uint64)
    h = splitmix64(idx)
    u = (h >> np.uint64(11)).astype(np.float64) * (2.0 ** -53) * 2.0 - 1.0
    return (center + scale * u).astype(np.float32)


def param_specs(cfg):
    """(name, shape, center, scale) in the order of herd's flat buffers; weights are (out, in)."""
    d, f, v = cfg["hidden"], cfg["ffn_hidden"], cfg["vocab"]
    qd = cfg["n_heads"] * cfg["head_dim"]
    kvd = cfg["n_kv_heads"] * cfg["head_dim"]
    specs = [("tok_embedding", (v, d), 0.0, 1.0)]
    for layer in range(cfg["n_layers"]):
        p = f"layers.{layer}."
        specs += [
            (p + "attn_norm", (d,), 1.0, 0.2),
            (p + "wq", (qd, d), 0.0, 1.0 / math.sqrt(d)),
            (p + "wk", (kvd, d), 0.0, 1.0 / math.sqrt(d)),
            (p + "wv", (kvd, d), 0.0, 1.0 / math.sqrt(d)),
            (p + "wo", (d, qd), 0.0, 1.0 / math.sqrt(qd)),
            (p + "mlp_norm", (d,), 1.0, 0.2),
            (p + "w_gate", (f, d), 0.0, 1.0 / math.sqrt(d)),
            (p + "w_up", (f, d), 0.0, 1.0 / math.sqrt(d)),
            (p + "w_down", (d, f), 0.0, 1.0 / math.sqrt(f)),
        ]
    specs += [("final_norm", (d,), 1.0, 0.2), ("output", (v, d), 0.0, 1.0 / math.sqrt(d))]
    return specs


def rope(x, pos, theta, style):
    """x: (B, T, H, hd); pos: (B, T). Rotates pairs by pos * theta^(-2i/hd)."""
    hd = x.shape[-1]
    inv = theta ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
    ang = pos.to(torch.float64)[..., None] * inv  # (B, T, hd/2)
    cos = torch.cos(ang)[:, :, None, :].to(x.dtype)
    sin = torch.sin(ang)[:, :, None, :].to(x.dtype)
    if style == "half":
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out.flatten(-2)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(params, cfg, tokens, positions, doc_ids, targets):
    """Returns (logits (B, T, V), loss: mean cross-entropy over targets != -1)."""
    B, T = tokens.shape
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    eps = cfg["norm_eps"]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    allowed = (causal[None] & same_doc)[:, None]  # (B, 1, T, T)
    x = params["tok_embedding"][tokens]
    for layer in range(cfg["n_layers"]):
        p = lambda n: params[f"layers.{layer}.{n}"]  # noqa: E731
        h = rmsnorm(x, p("attn_norm"), eps)
        q = (h @ p("wq").T).view(B, T, H, hd)
        k = (h @ p("wk").T).view(B, T, KV, hd)
        v = (h @ p("wv").T).view(B, T, KV, hd)
        q = rope(q, positions, cfg["rope_theta"], cfg["rope_style"])
        k = rope(k, positions, cfg["rope_theta"], cfg["rope_style"])
        rep = H // KV  # query head j uses KV head j // rep
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v).reshape(B, T, H * hd)
        x = x + a @ p("wo").T
        h = rmsnorm(x, p("mlp_norm"), eps)
        g = h @ p("w_gate").T
        u = h @ p("w_up").T
        x = x + (torch.nn.functional.silu(g) * u) @ p("w_down").T
    x = rmsnorm(x, params["final_norm"], eps)
    logits = x @ params["output"].T
    loss = torch.nn.functional.cross_entropy(logits.view(B * T, -1), targets.view(-1).long(), ignore_index=-1)
    return logits, loss


def make_batch(cfg, rng):
    """Each row packs several documents; positions restart per document; doc ids count per row."""
    B, T, V = cfg["batch"], cfg["seq_len"], cfg["vocab"]
    rows_docs = [[10, 15, 7], [20, 12]][:B]
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int64)
    positions = np.zeros((B, T), dtype=np.int64)
    doc_ids = np.zeros((B, T), dtype=np.int64)
    targets = np.zeros((B, T), dtype=np.int64)
    for b, lengths in enumerate(rows_docs):
        assert sum(lengths) == T
        start = 0
        for i, n in enumerate(lengths):
            positions[b, start : start + n] = np.arange(n)
            doc_ids[b, start : start + n] = i
            targets[b, start : start + n - 1] = tokens[b, start + 1 : start + n]
            targets[b, start + n - 1] = rng.integers(0, V)  # the next document's first token, say
            start += n
        targets[b, T - 1] = -1  # nothing follows the row: ignored by the loss
    targets[0, 3] = -1  # an ignored target inside a document, as padding would make
    return tokens, positions, doc_ids, targets


def run(cfg, opt, dtype):
    specs = param_specs(cfg)
    params = {}
    for i, (name, shape, center, scale) in enumerate(specs):
        vals = init_values(i, int(np.prod(shape)), center, scale).reshape(shape)
        params[name] = torch.tensor(vals, dtype=dtype, requires_grad=True)
    rng = np.random.default_rng(cfg["batch_seed"])
    tokens, positions, doc_ids, targets = (torch.tensor(a) for a in make_batch(cfg, rng))
    logits, loss = forward(params, cfg, tokens, positions, doc_ids, targets)
    loss.backward()
    grads = {n: params[n].grad.detach().clone() for n, *_ in specs}
    batch = (tokens, positions, doc_ids, targets)
    first = (logits.detach().clone(), loss.item(), grads)

    plist = [params[n] for n, *_ in specs]
    optim = torch.optim.AdamW(plist, lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                              weight_decay=opt["weight_decay"])
    losses, norms = [], []
    for _ in range(opt["steps"]):
        optim.zero_grad()
        _, loss = forward(params, cfg, tokens, positions, doc_ids, targets)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(plist, opt["clip"]).item())
        losses.append(loss.item())
        optim.step()
    return batch, first, losses, norms, specs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output file, e.g. tests/nn/golden/llama_tiny.bin")
    ap.add_argument("--rope-style", choices=["half", "interleaved"], default="half")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = dict(hidden=64, ffn_hidden=96, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab=256,
               seq_len=32, batch=2, rope_theta=10000.0, norm_eps=1e-5, rope_style=args.rope_style, batch_seed=1234)
    opt = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip=1.0, steps=10)

    batch, (logits, loss, grads), losses, norms, specs = run(cfg, opt, torch.float64)
    # Calibration only: how far PyTorch's own float32 run is from the float64 reference.
    _, (l32, loss32, g32), losses32, _, _ = run(cfg, opt, torch.float32)
    rel = lambda a, b: (a.double() - b).abs().max().item() / b.abs().max().item()  # noqa: E731
    calib = {"logits": rel(l32, logits), "loss": abs(loss32 - loss) / abs(loss),
             "grads_worst": max(rel(g32[n], grads[n]) for n in grads),
             "step_losses_worst": max(abs(a - b) / abs(b) for a, b in zip(losses32, losses))}

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
    header = {"format": "herd golden v1", "config": cfg, "optimizer": opt, "loss": loss, "step_losses": losses,
              "step_grad_norms": norms, "param_order": [s[0] for s in specs],
              "init": {s[0]: {"center": s[2], "scale": s[3]} for s in specs},
              "torch_version": torch.__version__, "reference_dtype": "float64",
              "torch_float32_vs_float64_relative": calib, "tensors": tensors}
    head = json.dumps(header).encode()
    with open(args.out, "wb") as f:
        f.write(b"HERDGOLD" + struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)
    print(f"wrote {args.out}: loss {loss:.6f}, 10-step losses {losses[0]:.5f} -> {losses[-1]:.5f}; "
          f"PyTorch float32 vs float64: {json.dumps(calib)}", file=sys.stderr)


if __name__ == "__main__":
    main()

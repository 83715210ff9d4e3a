#!/usr/bin/env python3
"""Hugging Face interop fixtures and checks for herd (docs/interop.md).

  hf_fixture.py make OUT_DIR
      Builds two small random Llama models with `transformers` (CPU) and saves each as a Hugging Face
      directory plus what herd must reproduce, computed by transformers' LlamaForCausalLM:
        OUT_DIR/tiny/      untied embeddings, fp32, GQA (4 heads, 2 KV heads), Llama 3.1 rope scaling,
                           vocabulary 2048, 3 layers, one model.safetensors
        OUT_DIR/tied_bf16/ tied embeddings, bf16 tensors, sharded into model-0000N-of-0000M.safetensors
                           with model.safetensors.index.json
      and in each, expected.json: a fixed batch (tokens), its loss sum over next-token targets, a greedy
      continuation (prompt, ids), and logits.bin: the batch's logits, float32 little-endian (B, T, V).
      The committed fixtures under tests/train/golden/hf/ were made by this command.

  hf_fixture.py verify HF_DIR --herd HERD_BINARY
      Loads HF_DIR (e.g. a `herd train --export.hf` or `herd convert --to-hf` output) with transformers
      and checks it against herd itself: herd's logits of the last prompt position and its greedy ids
      (`herd generate --checkpoint HF_DIR --prompt-ids ... --greedy --json --logits`) must equal
      transformers' within 1e-5 and exactly. Prints the largest difference; exit status 1 on a mismatch.

  hf_fixture.py tokenizer TIKTOKEN_FILE OUT_DIR [--text-file F]
      Converts a tiktoken-format tokenizer (Llama 3's tokenizer.model, or one `herd data train-tokenizer`
      wrote) to Hugging Face's tokenizer.json with transformers' TikTokenConverter (Llama 3's
      pre-tokenizer regex, herd's special tokens: Meta's 256 after 128,000 ordinary tokens, else
      <|begin_of_text|>, <|end_of_text|>, <|pad|>), and writes OUT_DIR/tokenizer_expected.json: the ids
      Hugging Face's `tokenizers` gives each test text (no special tokens added). herd's
      tests/data/golden/hf_tokenizer/ was made from a 2,000-token vocabulary trained on corpus/.

Needs torch and transformers (and tiktoken for `tokenizer`) (a venv: pip install torch transformers); herd's tests do not.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}


def reinit(model, seed):
    """Weights with a wide logit spread, so greedy choices are not near-ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[1] ** 0.5))


def greedy(model, prompt, n):
    ids = list(prompt)
    gaps = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].double()
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], min(gaps)


def make_one(out, name, cfg, seed, dtype, shard):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    reinit(model, seed)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    # The expected outputs come from the weights as stored (bf16-rounded for the bf16 model), computed in fp32.
    model = model.to(dtype).float().eval()
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.to(dtype).save_pretrained(d, max_shard_size=shard) if shard else model.to(dtype).save_pretrained(d)
    model = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg.vocab_size, (2, 12), generator=g)
    with torch.no_grad():
        logits = model(tokens).logits.float()
    lp = torch.log_softmax(logits.double(), dim=-1)
    loss_sum = float(-lp[:, :-1].gather(-1, tokens[:, 1:].unsqueeze(-1)).sum())
    prompt = [int(t) for t in tokens[0, :5]]
    ids, gap = greedy(model, prompt, 10)
    assert gap > 1e-3, f"{name}: greedy top-2 gap {gap} is a near-tie; change the seed"
    logits.numpy().astype("<f4").tofile(os.path.join(d, "logits.bin"))
    expected = {"tokens": tokens.tolist(), "loss_sum": loss_sum, "loss_tokens": int(tokens[:, 1:].numel()),
                "prompt": prompt, "greedy": ids, "min_greedy_gap": gap,
                "logits_shape": list(logits.shape), "transformers": __import__("transformers").__version__,
                "torch": torch.__version__}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"{d}: loss_sum {loss_sum:.6f}, greedy {ids} (min top-2 gap {gap:.4f})")


def make(out):
    tiny = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=2048, max_position_embeddings=128, rope_theta=10000.0,
                       rope_scaling=dict(ROPE), rms_norm_eps=1e-5, tie_word_embeddings=False)
    make_one(out, "tiny", tiny, 17, torch.float32, None)
    tied = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=512, max_position_embeddings=64, rope_theta=500000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=True)
    make_one(out, "tied_bf16", tied, 23, torch.bfloat16, "40KB")


def verify(hf_dir, herd):
    model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    prompt = [int(x) for x in torch.randint(0, vocab, (7,), generator=torch.Generator().manual_seed(5))]
    with torch.no_grad():
        ref_logits = model(torch.tensor([prompt])).logits[0, -1].double().numpy()
    ref_ids, gap = greedy(model, prompt, 8)
    out = subprocess.run([herd, "generate", "--checkpoint", hf_dir, "--prompt-ids", ",".join(map(str, prompt)),
                          "--greedy", "--max-tokens", "8", "--json", "--logits"],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    diff = float(np.max(np.abs(np.array(got["logits"]) - ref_logits)))
    ok = diff <= 1e-5 and got["ids"] == ref_ids
    print(json.dumps({"hf_dir": hf_dir, "max_abs_logit_diff": diff, "herd_ids": got["ids"],
                      "transformers_ids": ref_ids, "min_greedy_gap": gap, "ok": ok}))
    return 0 if ok else 1


TEXTS = [
    "The State of the Union is strong.",
    "  Leading spaces, tabs\tand\nnew lines\r\n\n  ",
    "Numbers: 1234567 3.14159 -42 and 2024's budget, can't won't I'LL",
    "Unicode: caf\u00e9 na\u00efve \u00fcber \u4e2d\u6587 \U0001F600 \u0928\u092e\u0938\u094d\u0924\u0947",
    "Punctuation!!! ... ??? --- (parens) [brackets] {braces} <|tags|> ok",
    "",
]


def special_tokens(n):
    if n != 128000:
        return ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
    s = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
         "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
         "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    r = 3
    while len(s) < 256:
        s.append(f"<|reserved_special_token_{r}|>")
        r += 1
    return s


def tokenizer(model_file, out, text_file):
    from tokenizers import Tokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter
    with open(model_file) as f:
        n = sum(1 for line in f if line.strip())
    conv = TikTokenConverter(vocab_file=model_file, extra_special_tokens=special_tokens(n))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    conv.converted().save(path)
    tok = Tokenizer.from_file(path)
    texts = list(TEXTS)
    if text_file:
        with open(text_file) as f:
            texts += json.load(f)
    expected = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
    with open(os.path.join(out, "tokenizer_expected.json"), "w") as f:
        json.dump({"tokenizers": __import__("tokenizers").__version__, "cases": expected}, f, indent=0)
    print(f"{path}: {n} ordinary tokens, {len(expected)} texts")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    v = sub.add_parser("verify")
    v.add_argument("hf_dir")
    v.add_argument("--herd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("model_file")
    t.add_argument("out")
    t.add_argument("--text-file")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "tokenizer":
        tokenizer(a.model_file, a.out, a.text_file)
        return 0
    if a.cmd == "make":
        make(a.out)
        return 0
    return verify(a.hf_dir, a.herd)


if __name__ == "__main__":
    sys.exit(main())

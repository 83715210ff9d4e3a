"""Cross-check of herd's Llama 3 encoder against tiktoken (PyPI) on random strings built from every
character class the pre-split pattern distinguishes, ASCII and not (letters, marks, digits of other
scripts, Unicode spaces such as NEL, NBSP, U+2028, U+3000, emoji, CJK, apostrophes, the long s).

It writes the strings as a JSONL corpus, runs `herd data` on it (no held-out split), reads the shard
back (format in docs/data.md) and compares every document's ids with tiktoken.encode_ordinary.
Usage: python3 bench/data/tiktoken_parity.py [HERD_BINARY] [TOKENIZER_MODEL] [N]
Prints one JSON line: strings, mismatches and the first few differing strings.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
ATOMS = ["a", "Z", "s", "t", "re", "LL", "'", "0", "42", "1234", " ", "  ", "\t", "\n", "\r\n", "\v", "\f", "!", ".",
         "-", "(", "\x01", "\x7f", "é", "ï", "e\u0301", "\u00a0", "\u0085", "\u2028", "\u3000", "\u2009", "\u202f",
         "\u0663", "\u2160", "\u00bd", "ſ", "K", "—", "“", "日本", "テキスト", "🦙", "👍🏽", "\u200b", "\ufeff", "ß", "ǅ",
         "\u0640", "\u05d0"]


def read_shard(path):
    with open(path, "rb") as f:
        buf = f.read()
    width, _vocab, n_tokens, n_docs = struct.unpack_from("<IQQQ", buf, 12)
    offsets = struct.unpack_from(f"<{n_docs + 1}Q", buf, 64)
    fmt = "H" if width == 2 else "I"
    tokens = struct.unpack_from(f"<{n_tokens}{fmt}", buf, 64 + 8 * (n_docs + 1))
    return [list(tokens[offsets[d] + 1:offsets[d + 1] - 1]) for d in range(n_docs)]  # strip BOS, EOS


def main():
    herd = sys.argv[1] if len(sys.argv) > 1 else "build/herd"
    model = sys.argv[2] if len(sys.argv) > 2 else "assets/tokenizer/llama3/tokenizer.model"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    enc = tiktoken.Encoding(name="llama3", pat_str=PATTERN, mergeable_ranks=load_tiktoken_bpe(model),
                            special_tokens={})
    rng = random.Random(0)
    texts = ["".join(rng.choice(ATOMS) for _ in range(rng.randrange(1, 30))) for _ in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "c.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        subprocess.run([herd, "data", "--input", corpus, "--tokenizer", model, "--output", tmp + "/out",
                        "--val-fraction", "0"], check=True, stdout=subprocess.DEVNULL)
        got = read_shard(tmp + "/out/train-00000.bin")
    bad = [t for t, ids in zip(texts, got) if ids != enc.encode_ordinary(t)]
    print(json.dumps({"strings": n, "mismatches": len(bad), "tiktoken": tiktoken.__version__,
                      "examples": [repr(t) for t in bad[:5]]}, ensure_ascii=False))


if __name__ == "__main__":
    main()

"""The peer of bench/data/tokenizer_bench.cpp: tiktoken encoding the same corpus with the same
tokenizer.model and the Llama 3 pre-split pattern, single-threaded (encode_ordinary per document).

Prints one JSON object: passes (wall and thread CPU seconds), tokens, and a CRC-32 of every id (little-endian int32) so the
C++ side can check that both encoders produced identical ids, not just similar speed.
Usage: python3 tiktoken_peer.py TOKENIZER_MODEL CORPUS_JSONL_XZ PASSES
"""
import json
import lzma
import struct
import sys
import time
import zlib

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def main():
    model, corpus, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError as e:
        print(json.dumps({"available": False, "reason": f"tiktoken not importable: {e}; pip install tiktoken"}))
        return
    ranks = load_tiktoken_bpe(model)
    enc = tiktoken.Encoding(name="llama3", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={})
    with lzma.open(corpus, "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    times, cpu_times, crc, tokens = [], [], 0, 0
    for p in range(passes):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = [enc.encode_ordinary(d) for d in docs]
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.thread_time() - c0)
        if p == 0:
            for ids in out:
                tokens += len(ids)
                crc = zlib.crc32(struct.pack(f"<{len(ids)}i", *ids), crc)
    print(json.dumps({"available": True, "name": "tiktoken", "version": tiktoken.__version__,
                      "python": sys.version.split()[0], "passes_s": times, "cpu_passes_s": cpu_times, "tokens": tokens, "ids_crc32": crc}))


if __name__ == "__main__":
    main()

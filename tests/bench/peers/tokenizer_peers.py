#!/usr/bin/env python3
"""Tokenizer throughput of the peers, for scripts/bench-tokenizers.sh: Hugging Face `tokenizers` and
`tiktoken`, one thread, on the same text and vocabularies as tests/bench/tokenizer_bench.cpp.

usage: tokenizer_peers.py --data SHARED_DATA [--repetitions 3]

Cases (names match the C++ benchmark's):
  Llama3    Llama 3 (128,256 tokens) built offline from tokenizers/llama3/encoder.json + vocab.bpe:
            Hugging Face tokenizers (the same pipeline as Meta's tokenizer.json) and tiktoken
  LlamaSpm  Llama 2 SentencePiece BPE (32,000 tokens): Hugging Face tokenizers with
            tokenizers/hf/llama2.tokenizer.json (the vocabulary of ggml-vocab-llama-spm.gguf);
            tiktoken has no SentencePiece model
Modes: Whole (war-and-peace.txt in one call), 4KiB (cut at the last line end before every 4 KiB,
one call per piece) and WholeCold (the whole text with a freshly built tokenizer each run, build not
timed: Hugging Face keeps a per-model word cache, as Orchard keeps a per-thread one; tiktoken has none).
Each figure is the best of --repetitions runs, timed in CPU time of the process (time.process_time), as
Google Benchmark rates ours: on a shared machine, wall time mostly measures the other work. Prints one JSON object per line:
{"case", "mode", "peer", "bytes_per_second", "ids"}.
"""
import argparse
import json
import os
import sys
import time

# One thread for the Rust libraries (Hugging Face would use a thread pool for batches only, but be sure).
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tokenizers"))
import hf_reference  # noqa: E402  (tests/tokenizers/hf_reference.py: the offline Llama 3 builders)


def chunks(text, size=4096):
    out, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            nl = text.rfind(b"\n", start, end)
            if nl >= start:
                end = nl + 1
        out.append(text[start:end])
        start = end
    return out


def best_rate(fn, n_bytes, repetitions):
    best = None
    result = None
    for _ in range(repetitions):
        t0 = time.process_time()
        result = fn()
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    return n_bytes / best, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    with open(os.path.join(args.data, "corpus/war-and-peace.txt"), "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    pieces = [p.decode("utf-8") for p in chunks(raw)]
    assert "".join(pieces) == text

    llama3 = os.path.join(args.data, "tokenizers/llama3")
    llama2_json = os.path.join(args.data, "tokenizers/hf/llama2.tokenizer.json")
    # (case, peer, builder); a builder returns an encode function on a fresh tokenizer.
    builders = [
        ("Llama3", "hf-tokenizers",
         lambda: (lambda t: lambda s: t.encode(s, add_special_tokens=False).ids)(hf_reference.llama3_hf(llama3))),
        ("Llama3", "tiktoken",
         lambda: (lambda t: lambda s: t.encode_ordinary(s))(hf_reference.llama3_tiktoken(llama3))),
        ("LlamaSpm", "hf-tokenizers",
         lambda: (lambda t: lambda s: t.encode(s, add_special_tokens=False).ids)(
             hf_reference.load_hf_json(llama2_json))),
    ]

    for case, peer, build in builders:
        best = None
        for _ in range(args.repetitions):
            encode = build()
            t0 = time.process_time()
            n = len(encode(text))
            dt = time.process_time() - t0
            best = dt if best is None else min(best, dt)
        print(json.dumps({"case": case, "mode": "WholeCold", "peer": peer, "bytes_per_second": len(raw) / best,
                          "ids": n}), flush=True)
        encode = build()
        rate, ids = best_rate(lambda: encode(text), len(raw), args.repetitions)
        print(json.dumps({"case": case, "mode": "Whole", "peer": peer, "bytes_per_second": rate,
                          "ids": len(ids)}), flush=True)
        rate, n = best_rate(lambda: sum(len(encode(p)) for p in pieces), len(raw), args.repetitions)
        print(json.dumps({"case": case, "mode": "4KiB", "peer": peer, "bytes_per_second": rate, "ids": n}),
              flush=True)


if __name__ == "__main__":
    main()

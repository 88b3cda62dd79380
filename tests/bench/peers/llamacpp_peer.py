#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python's low-level API) timed exactly as orchard_bench_runner times Orchard:

- prefill: one sequence, PROMPT tokens in one llama_decode (n_batch = n_ubatch >= PROMPT), logits of the last;
- decode at batch B: B sequences (distinct seq ids) each given a 16-token context first, then STEPS timed
  llama_decode calls of B tokens (one per sequence), logits for every row.

Token ids are the same fixed pseudo-random stream as the C++ program; best of REPS; KV cache f16 (default),
no flash attention, same thread count for prompt and generation. Prints one JSON object.

    python tests/bench/peers/llamacpp_peer.py MODEL.gguf --threads 2 --prompt 128 --batches 1,4,16 --steps 16
"""
import argparse
import json
import sys
import time

import llama_cpp as L

DECODE_PROMPT = 16


class Tokens:
    """The LCG of runner_bench.cpp (state * 1664525 + 1013904223, ids (state >> 8) % n_vocab)."""

    def __init__(self, n_vocab):
        self.state, self.n_vocab = 12345, n_vocab

    def next(self):
        self.state = (self.state * 1664525 + 1013904223) & 0xFFFFFFFF
        return (self.state >> 8) % self.n_vocab


def decode(ctx, batch, items):
    """items: (token, pos, seq, want_logits) tuples, all in one llama_decode."""
    batch.n_tokens = len(items)
    for i, (tok, pos, seq, logits) in enumerate(items):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if logits else 0
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        sys.exit(f"llamacpp_peer: llama_decode returned {rc}")
    L.llama_synchronize(ctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    max_b = max(batches)

    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp holds the pointer
    L.llama_log_set(quiet, None)
    model = L.llama_model_load_from_file(a.model.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llamacpp_peer: cannot load {a.model}")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    p = L.llama_context_default_params()
    p.n_ctx = max(a.prompt, DECODE_PROMPT + a.steps) * max_b + 64
    p.n_batch = p.n_ubatch = max(a.prompt, max_b * DECODE_PROMPT)
    p.n_seq_max = max_b
    p.n_threads = p.n_threads_batch = a.threads
    ctx = L.llama_init_from_model(model, p)
    if not ctx:
        sys.exit("llamacpp_peer: cannot create a context")
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(p.n_batch, 0, 1)
    toks = Tokens(n_vocab)

    decode(ctx, batch, [(toks.next(), i, 0, i == 7) for i in range(8)])  # warm-up, as the C++ side
    L.llama_memory_clear(mem, True)

    prefill = 0.0
    for _ in range(a.reps):
        items = [(toks.next(), i, 0, i == a.prompt - 1) for i in range(a.prompt)]
        t0 = time.perf_counter()
        decode(ctx, batch, items)
        prefill = max(prefill, a.prompt / (time.perf_counter() - t0))
        L.llama_memory_clear(mem, True)

    dec = {}
    for b in batches:
        best = 0.0
        for _ in range(a.reps):
            items = []
            for s in range(b):
                items += [(toks.next(), i, s, i == DECODE_PROMPT - 1) for i in range(DECODE_PROMPT)]
            decode(ctx, batch, items)
            t0 = time.perf_counter()
            for step in range(a.steps):
                decode(ctx, batch, [(toks.next(), DECODE_PROMPT + step, s, True) for s in range(b)])
            best = max(best, b * a.steps / (time.perf_counter() - t0))
            L.llama_memory_clear(mem, True)
        dec[str(b)] = best

    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps({"engine": "llama.cpp", "version": L.__version__, "threads": a.threads, "prompt": a.prompt,
                      "steps": a.steps, "prefill_tok_s": prefill, "decode_tok_s": dec}))


if __name__ == "__main__":
    main()

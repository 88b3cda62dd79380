#!/usr/bin/env python3
"""Interop check: GGUF files written by `orchard convert` load and run in llama.cpp (llama-cpp-python).

For stories260K (llama2.c checkpoint) it converts to each --types, loads the GGUF in llama.cpp, feeds BOS
and takes 200 greedy tokens (positions 0..199, as llama2.c's run.c with temperature 0), and compares the
text with expected-greedy-200.txt (the reference implementation's output). f32 must match exactly; the
quantized types report how far they agree.

With --hf-goldens it also converts the random-weight Hugging Face models of tests/pie/runner/models (a
byte-level tokenizer.json is added, since they carry none), runs their golden prompt in llama.cpp and
compares the greedy continuation with transformers' (golden.json): this exercises the q/k row permutation
of NeoX llama/mistral and the llama3 rope_freqs.weight.

Needs: pip install llama-cpp-python gguf numpy (the model helper's venv: .venv-model). Usage:
  .venv-model/bin/python tools/gguf_interop.py --orchard build/pie/orchard [--types f32,f16,q8_0] [--hf-goldens]
Where llama-cpp-python cannot be installed next to the orchard build (another machine runs llama.cpp),
--convert-only DIR writes the GGUF files and --converted DIR checks them.
Exit status 0 when every f32 check matches, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

llama_cpp = None  # imported in main() unless --convert-only

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def convert(args, tmp, name, src, dtype):
    """The GGUF of `src` as `dtype`: written by orchard convert, or taken from --converted."""
    if args.converted:
        return os.path.join(args.converted, f"{name}-{dtype}.gguf"), "converted earlier"
    out = os.path.join(args.convert_only or tmp, f"{name}-{dtype}.gguf")
    r = subprocess.run([args.orchard, "convert", src, "-o", out, "--type", dtype], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"orchard convert {src} --type {dtype}: {r.stderr.strip()}")
    return out, r.stdout.strip()


def load(path, n_ctx):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=1, logits_all=True,
                           verbose=False, seed=0)


def greedy(llm, prompt, n, stop=None):
    """Greedy continuation of `prompt` (token ids) for n tokens, argmax over llama.cpp's logits."""
    llm.reset()
    llm.eval(prompt)
    out = []
    for _ in range(n):
        logits = np.asarray(llm.scores[llm.n_tokens - 1])
        tok = int(np.argmax(logits))
        out.append(tok)
        if stop is not None and tok == stop:
            break
        llm.eval([tok])
    return out


def run_c_text(llm, tokens):
    """Text as llama2.c's run.c prints it: each piece's bytes, the first piece's leading space dropped."""
    out = b""
    prev = 1
    for t in tokens:
        piece = llm.detokenize([t], special=False) if "special" in llm.detokenize.__code__.co_varnames else llm.detokenize([t])
        if prev == 1 and piece.startswith(b" "):
            piece = piece[1:]
        out += piece
        prev = t
    return out.decode("utf-8", errors="replace")


def stories(args, tmp):
    folder = os.path.join(args.shared_data, "models", "stories260K")
    src = os.path.join(folder, "stories260K.bin")
    with open(os.path.join(folder, "expected-greedy-200.txt"), encoding="utf-8") as f:
        expected = f.read()
    ok = True
    for dtype in args.types.split(","):
        out, summary = convert(args, tmp, "stories260K", src, dtype)
        if args.convert_only:
            print(summary)
            continue
        llm = load(out, 512)
        # BOS at position 0, then 200 greedy tokens: positions 0..199 run; run.c stops at a BOS.
        tokens = greedy(llm, [1], 200, stop=1)
        if tokens and tokens[-1] == 1:
            tokens = tokens[:-1]
        text = run_c_text(llm, tokens)
        same = text == expected
        common = next((i for i, (a, b) in enumerate(zip(text, expected)) if a != b), min(len(text), len(expected)))
        print(f"stories260K {dtype}: {'MATCH' if same else 'DIFFER'} "
              f"({common}/{len(expected)} characters agree; {summary})")
        if not same:
            print(f"  llama.cpp: {text[:160]!r}...")
        if dtype == "f32" and not same:
            ok = False
        del llm
    return ok


def byte_level_tokenizer_json(n_vocab):
    """A tokenizer.json of the 256 GPT-2 byte-level symbols (no merges) for models without a tokenizer."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    symbols = [chr(c) for _, c in sorted(zip(bs, cs))]
    vocab = {s: i for i, s in enumerate(symbols[:n_vocab])}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                            "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def hf_goldens(args, tmp):
    ok = True
    root = os.path.join(SOURCE, "tests", "pie", "runner", "models")
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "golden.json")) as f:
            golden = json.load(f)
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        work = os.path.join(tmp, name)
        if not args.converted:
            shutil.copytree(folder, work)
            with open(os.path.join(work, "tokenizer.json"), "w") as f:
                json.dump(byte_level_tokenizer_json(min(256, config["vocab_size"])), f)
        try:
            out, summary = convert(args, tmp, "hf-" + name, work, "f32")
            if args.convert_only:
                print(summary)
                continue
            llm = load(out, max(256, len(golden["prompt"]) + len(golden["greedy"]) + 8))
        except Exception as e:  # noqa: BLE001 - reported, counted as a failure
            print(f"hf {name}: ERROR {e}")
            ok = False
            continue
        got = greedy(llm, golden["prompt"], len(golden["greedy"]))
        agree = next((i for i, (a, b) in enumerate(zip(got, golden["greedy"])) if a != b), len(got))
        # Logits at the golden positions (the prompt's last ones), against transformers'.
        llm.reset()
        llm.eval(golden["prompt"])
        diffs = [float(np.max(np.abs(np.asarray(llm.scores[p]) - np.asarray(l))))
                 for p, l in zip(golden["logit_positions"], golden["logits"])]
        same = got == golden["greedy"]
        # llama.cpp's llama architecture (which Mistral is written as) has no sliding window.
        window = config.get("sliding_window") or 0
        expected_differ = 0 < window < len(golden["prompt"]) + len(golden["greedy"])
        note = f" (expected: llama.cpp ignores the {window}-token sliding window)" if expected_differ and not same else ""
        print(f"hf {name}: greedy {'MATCH' if same else 'DIFFER'} ({agree}/{len(got)} tokens agree), "
              f"max |logit - transformers| {max(diffs):.2e}{note}")
        ok = ok and (same or expected_differ)
        del llm
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orchard", default=os.path.join(SOURCE, "build", "pie", "orchard"))
    p.add_argument("--shared-data", default=os.environ.get("ORCHARD_SHARED_DATA", os.path.join(SOURCE, "..", "shared", "data")))
    p.add_argument("--types", default="f32,f16,q8_0")
    p.add_argument("--hf-goldens", action="store_true")
    p.add_argument("--convert-only", metavar="DIR", help="write the GGUF files to DIR and stop")
    p.add_argument("--converted", metavar="DIR", help="check the GGUF files of an earlier --convert-only DIR")
    args = p.parse_args()
    if not args.convert_only:
        global llama_cpp
        import llama_cpp as module
        llama_cpp = module
        print(f"llama-cpp-python {llama_cpp.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        ok = stories(args, tmp)
        if args.hf_goldens:
            ok = hf_goldens(args, tmp) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

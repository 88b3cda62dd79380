#!/usr/bin/env python3
"""Grammar-mask peers, side by side with `orchard grammar bench` (scripts/bench-grammar.sh runs both).

  grammar_peers.py workloads OUT_DIR     writes the benchmark workloads: per grammar a .gbnf (or .regex)
                                          file and a JSON array of valid documents
  grammar_peers.py run --grammar-kind gbnf|regex --grammar FILE --tokens TOKENS.json --encoder ENCODER.json
                                          times llguidance and xgrammar masks over the same token ids
                                          (written by `orchard grammar bench --save-tokens`) with the same
                                          Llama 3.1 vocabulary (encoder.json + 256 special tokens)

Prints one JSON object per peer: compile_ms, p50/p99/p999/max mask times in microseconds.
Peers: pip install -r scripts/requirements-bench.txt (llguidance, xgrammar).
"""
import argparse
import glob
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama3_vocab  # noqa: E402  (next to this script)


# --------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------

def json_docs(shared, n=100):
    docs = []
    for path in sorted(glob.glob(os.path.join(shared, "maskbench-dev", "*.json"))):
        with open(path, encoding="utf-8") as f:
            group = json.load(f)
        for t in group.get("tests", []):
            if t.get("valid") and isinstance(t.get("text"), str) and t["text"].startswith("{"):
                docs.append(t["text"])
                break
        if len(docs) >= n:
            break
    return docs


def arithmetic_docs(n=60, seed=1):
    rng = random.Random(seed)

    def term(depth):
        r = rng.random()
        if depth < 3 and r < 0.2:
            return "(" + rng.choice(["", " "]) + expr(depth + 1) + ")" + rng.choice(["", " "])
        if r < 0.6:
            return str(rng.randint(0, 99999)) + rng.choice(["", " "])
        name = rng.choice("abcxyz") + "".join(rng.choice("abc0123_") for _ in range(rng.randint(0, 6)))
        return name + rng.choice(["", " "])

    def expr(depth):
        out = term(depth)
        for _ in range(rng.randint(0, 4)):
            out += rng.choice("+-*/") + term(depth)
        return out

    return ["".join(expr(0) + "=" + rng.choice(["", " "]) + term(2) + "\n" for _ in range(rng.randint(2, 6)))
            for _ in range(n)]


C_DOCS = [
    "int main(){int x = 1;int y = x*2+3;while(x<10){x = x+1;}return x;}",
    "float area(float r){return r*r*314/100;}int twice(int v){return v+v;}",
    "int fib(int n){if(n<=1){return n;}return fib(n-1)+fib(n-2);}",
    "int sum(int n){int s = 0;for(int i = 0; i<n; i = i+1){s = s+i;}return s;}",
    "char first(char c){/* a comment */// another\nreturn c;}",
    "int gcd(int a){int b = 12;while(b!=0){int t = b;b = a-(a/b)*b;a = t;}return a;}",
]


def regex_docs(n=80, seed=2):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        user = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789._") for _ in range(rng.randint(3, 14)))
        host = ".".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                        for _ in range(rng.randint(1, 3)))
        date = f"{rng.randint(1990, 2030):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        time_ = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        phone = f"+{rng.randint(1, 99)} {rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
        out.append(f"{user}a@{host}.com {date}T{time_}Z {phone}")
    return out


# A regex-heavy grammar: e-mail, ISO date-time and phone number in one pattern.
REGEX = (r"[a-z0-9._]{1,64}@([a-z]{1,63}\.){1,4}(com|org|net) "
         r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z "
         r"\+[0-9]{1,3} [0-9]{3}-[0-9]{3}-[0-9]{4}")


def write_workloads(out_dir):
    shared = os.environ.get("ORCHARD_SHARED_DATA") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "data")
    os.makedirs(out_dir, exist_ok=True)
    grammars = os.path.join(shared, "grammars")
    work = {
        "json": ("gbnf", os.path.join(grammars, "json.gbnf"), json_docs(shared)),
        "arithmetic": ("gbnf", os.path.join(grammars, "arithmetic.gbnf"), arithmetic_docs()),
        "c": ("gbnf", os.path.join(grammars, "c.gbnf"), C_DOCS),
        "regex": ("regex", None, regex_docs()),
    }
    for name, (kind, gpath, docs) in work.items():
        if kind == "regex":
            gpath = os.path.join(out_dir, name + ".regex")
            with open(gpath, "w", encoding="utf-8") as f:
                f.write(REGEX)
        with open(os.path.join(out_dir, name + ".docs.json"), "w", encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)
        with open(os.path.join(out_dir, name + ".kind"), "w") as f:
            f.write(kind + " " + os.path.abspath(gpath) + "\n")
    print(" ".join(work))


# --------------------------------------------------------------------------------------------------
# Vocabulary: Llama 3.1 from encoder.json + 256 special tokens (llama3_vocab.py, shared with maskbench_peers.py)
# --------------------------------------------------------------------------------------------------

def stats(times_us):
    s = sorted(times_us)

    def q(p):
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]

    return {"masks": len(s), "p50_us": q(0.5), "p99_us": q(0.99), "p999_us": q(0.999), "max_us": s[-1],
            "mean_us": statistics.fmean(s)}


def run_llguidance(kind, grammar_text, docs_tokens, tokens, eos):
    import llguidance
    import llguidance.numpy
    from llguidance import LLMatcher

    tok = llama3_vocab.llguidance_tokenizer(tokens, eos)
    grm = llguidance.grammar_from("gbnf" if kind == "gbnf" else "regex", grammar_text)
    compile_ms = []
    for _ in range(5):
        t0 = time.perf_counter()
        m = LLMatcher(tok, grm, log_level=0)
        compile_ms.append((time.perf_counter() - t0) * 1000)
    if m.is_error():
        raise RuntimeError("llguidance: " + m.get_error())
    mask = llguidance.numpy.allocate_token_bitmask(1, len(tokens))
    times = []
    rejected = 0
    for ids in docs_tokens:
        m = LLMatcher(tok, grm, log_level=0)
        for t in list(ids) + [eos[0]]:
            t0 = time.perf_counter()
            llguidance.numpy.fill_next_token_bitmask(m, mask, 0)
            times.append((time.perf_counter() - t0) * 1e6)
            if not m.consume_token(t):
                rejected += 1
                break
    out = stats(times)
    out.update({"peer": "llguidance", "compile_ms": statistics.median(compile_ms), "rejected_documents": rejected})
    return out


def run_xgrammar(kind, grammar_text, docs_tokens, tokens, eos):
    import numpy as np
    import xgrammar as xgr

    info = llama3_vocab.xgrammar_tokenizer_info(tokens, eos)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compile_ms = []
    for _ in range(5):
        t0 = time.perf_counter()
        cg = compiler.compile_grammar(grammar_text) if kind == "gbnf" else compiler.compile_regex(grammar_text)
        compile_ms.append((time.perf_counter() - t0) * 1000)
    mask = xgr.allocate_token_bitmask(1, len(tokens))
    times = []
    rejected = 0
    for ids in docs_tokens:
        m = xgr.GrammarMatcher(cg)
        for t in list(ids) + [eos[0]]:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(mask)
            times.append((time.perf_counter() - t0) * 1e6)
            if not m.accept_token(t):
                rejected += 1
                break
    out = stats(times)
    out.update({"peer": "xgrammar", "compile_ms": statistics.median(compile_ms), "rejected_documents": rejected})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workloads")
    w.add_argument("out_dir")
    r = sub.add_parser("run")
    r.add_argument("--grammar-kind", choices=["gbnf", "regex"], required=True)
    r.add_argument("--grammar", required=True)
    r.add_argument("--tokens", required=True)
    r.add_argument("--encoder", required=True)
    r.add_argument("--peers", default="llguidance,xgrammar")
    a = ap.parse_args()
    if a.cmd == "workloads":
        write_workloads(a.out_dir)
        return 0
    with open(a.grammar, encoding="utf-8") as f:
        grammar_text = f.read()
    with open(a.tokens) as f:
        docs_tokens = json.load(f)
    tokens, eos = llama3_vocab.llama3_tokens(a.encoder)
    runners = {"llguidance": run_llguidance, "xgrammar": run_xgrammar}
    for name in a.peers.split(","):
        try:
            print(json.dumps(runners[name](a.grammar_kind, grammar_text, docs_tokens, tokens, eos)))
        except Exception as e:  # a missing or failing peer is reported, never fatal to the others
            print(json.dumps({"peer": name, "error": f"{type(e).__name__}: {e}"}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""MaskBench with llguidance and xgrammar (and Orchard), the same files, protocol and tokenizer in one run.

  maskbench_peers.py [--sample-every N] [--time-limit S] [--mem-limit GB] [--peers llguidance,xgrammar,...]
                     [--orchard BIN [--orchard-both]] [--jsonl DIR] [-t TOKENIZER_DIR] DIR|FILE...

  e.g. (from the repository root)
  flock /tmp/orchard-cpu-bench.lock .venv-bench/bin/python tests/bench/peers/maskbench_peers.py \\
      --sample-every 40 --orchard build/pie/orchard --orchard-both ../shared/data/maskbench-dev

Files: each FILE as given, each DIR as its *.json files; the whole list sorted by path (byte order) and,
with --sample-every N, every Nth file from the first (`ls *.json | sort | awk 'NR%N==1'`). Every file is
checked before anything runs (exit status 2 when one is not MaskBench JSON).

The protocol is `orchard grammar bench --maskbench` (pie/cli/grammar_maskbench.cpp), itself MaskBench's
runner.py: per schema, compile (timed: TTFM; a failure is a compile error); per test, a fresh matcher
(untimed), the test's `text` tokenized with the Llama 3.1 tokenizer without special tokens, and for each
token fill the mask and commit the token (timed together: TBM, one thread), stopping at the first rejected
token. A test is accepted when every token is and the matcher may then stop. A valid test rejected is a
validation error, an invalid one accepted an invalidation error (both counted in tests, as Orchard counts
them); a mask that disagrees with the commit is a crash, as in Orchard. A schema passes when it compiles and
every test comes out right.

Tokenizer: ../shared/data/tokenizers/llama3 (-t), built offline by llama3_vocab.py; the texts are encoded
once with tiktoken (Meta's own Llama 3 tokenizer is a tiktoken model) and the same ids go to every peer.

Peers, each with its documented defaults:
  llguidance  LLMatcher.grammar_from_json_schema(schema) with the default JsonCompileOptions (flexible
              whitespace, "," and ":" separators allowing whitespace, not lenient), then
              LLMatcher(tokenizer, grammar) with the default parser limits; is_error() is a compile error;
              a test runs on a deep copy of the compiled matcher (an error state survives reset());
              "may stop" is is_accepting().
  xgrammar    GrammarCompiler(max_threads=1, cache_enabled=False).compile_json_schema(schema) with the
              default options (any_whitespace=True, strict_mode=True, no whitespace bound); a test runs
              after GrammarMatcher.reset(); "may stop" is is_completed().
  orchard-python  Orchard's Python API (orchard.grammar, XGrammar's names; PYTHONPATH=build/python or pip
              install .): GrammarCompiler(cache_enabled=False).compile_json_schema(schema, strict_mode=False)
              (the schema as written, as the C++ run), a numpy bitmask; "may stop" is is_completed(). Beside
              --orchard's C++ run it measures what the Python call costs per mask. orchard-python-eager: the
              same with table_build="compile" (every token table built before compile returns).
Each peer frees a schema's matcher and grammar after its tests, outside the timed compile of the next.
Timing is the Python call around each peer's fill + commit, as in MaskBench (perf_counter; the garbage
collector is off inside the timed loops).

Limits: each peer runs in a worker process; a schema over --time-limit (default 30 s, compile and tests
together) is a timeout: the worker stops itself between tokens, and is killed 2 s past the limit when a
single call hangs (a fresh worker takes the next schema). A worker whose resident memory passes --mem-limit
(default 8 GB) is killed, and the schema counted as a crash, as is a worker that dies.

Output: per engine Orchard's summary lines (schemas, passing, compile errors, validation errors,
invalidation errors, timeouts, crashes; TBM in us and TTFM in ms at p25 p50 p75 p90 p95 p99 p99.9 max,
nearest rank), then the engines side by side. --orchard BIN runs `BIN grammar bench --maskbench` on the same
file list, tokenizer and time limit and reads its summary, with the engine's default (token tables built in
the background); --orchard-both runs it three times instead, with --tables compile, background and first-use.
--jsonl DIR
writes DIR/<engine>.jsonl, one MaskBench status line per schema (id, ttfm_us, max_ttfm_us, masks_us,
max_mask_us, num_tokens, num_tests, all_mask_us, num_valid_tests, num_invalid_tests, compile_error /
validation_error / timeout / crash, passed).
"""
import argparse
import gc
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama3_vocab  # noqa: E402  (next to this script)

PEERS = ("llguidance", "xgrammar", "orchard-python", "orchard-python-eager")
KILL_GRACE_S = 2.0
READY_TIMEOUT_S = 600.0  # a worker's start: imports and the 128,256-token vocabulary
PERCENTILES = (("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99),
               ("p99.9", 0.999))


class UsageError(Exception):
    pass


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------

def list_files(paths, sample_every):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files.extend(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".json"))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise UsageError(f"[maskbench] {p}: no such file or folder")
    files = sorted(set(files), key=lambda f: os.fsencode(f))
    if sample_every > 1:
        files = files[::sample_every]
    if not files:
        raise UsageError("[maskbench] no *.json files found")
    return files


def load_file(path):
    """(id, schema JSON text, [(valid, text)]); ValueError naming the file and the fault."""
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"[maskbench] {path}: not JSON: {e}") from None

    def bad(why):
        return ValueError(f"[maskbench] {path}: not a MaskBench file: {why}")

    if not isinstance(j, dict):
        raise bad(f"expected an object, got {type(j).__name__}")
    if "schema" not in j:
        raise bad('no "schema"')
    if not isinstance(j.get("tests"), list):
        raise bad('no "tests" array')
    tests = []
    for i, t in enumerate(j["tests"]):
        if not isinstance(t, dict) or not isinstance(t.get("valid"), bool):
            raise bad(f'tests[{i}] has no boolean "valid"')
        if not isinstance(t.get("text"), str):
            raise bad(f'tests[{i}] has no string "text"')
        tests.append((t["valid"], t["text"]))
    return os.path.basename(path), json.dumps(j["schema"], ensure_ascii=False), tests


# --------------------------------------------------------------------------------------------------
# Peers (inside the worker process)
# --------------------------------------------------------------------------------------------------

class CompileError(Exception):
    pass


class LlguidancePeer:
    def __init__(self, tokens, eos):
        import llguidance
        import llguidance.numpy as llnp
        from llguidance import LLMatcher

        self.LLMatcher = LLMatcher
        self.fill_mask = llnp.fill_next_token_bitmask
        self.tok = llama3_vocab.llguidance_tokenizer(tokens, eos)
        self.mask = llnp.allocate_token_bitmask(1, len(tokens))
        self.version = llguidance.__version__ if hasattr(llguidance, "__version__") else _version("llguidance")
        self.pristine = self.m = None

    def compile(self, schema_text):
        grammar = self.LLMatcher.grammar_from_json_schema(schema_text)
        m = self.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise CompileError(m.get_error())
        self.pristine = m

    def reset(self):
        self.m = self.pristine.deep_copy()

    def step(self, t):
        self.fill_mask(self.m, self.mask, 0)
        return self.m.consume_token(t)

    def allowed(self, t):
        return (int(self.mask[0, t >> 5]) >> (t & 31)) & 1 == 1

    def can_stop(self):
        return self.m.is_accepting()

    def release(self):
        self.pristine = self.m = None


class XgrammarPeer:
    def __init__(self, tokens, eos):
        import xgrammar as xgr

        self.xgr = xgr
        info = llama3_vocab.xgrammar_tokenizer_info(tokens, eos)
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.mask = xgr.allocate_token_bitmask(1, len(tokens))
        self.view = self.mask.numpy()  # the same memory, read without torch's per-element cost
        self.version = _version("xgrammar")
        self.m = None

    def compile(self, schema_text):
        self.m = self.xgr.GrammarMatcher(self.compiler.compile_json_schema(schema_text))

    def reset(self):
        self.m.reset()

    def step(self, t):
        self.m.fill_next_token_bitmask(self.mask)
        return self.m.accept_token(t)

    def allowed(self, t):
        return (int(self.view[0, t >> 5]) >> (t & 31)) & 1 == 1

    def can_stop(self):
        return self.m.is_completed()

    def release(self):
        self.m = None


class OrchardPythonPeer:
    """Orchard through its Python API (orchard.grammar, XGrammar's names): the package built at
    build/python (PYTHONPATH) or installed with pip. The schema as written (strict_mode=False), the
    defaults otherwise (token tables built in the background), as `orchard grammar bench --maskbench`
    compiles it; a numpy bitmask. OrchardPythonEagerPeer: every token table built in compile."""

    TABLE_BUILD = "background"

    def __init__(self, tokens, eos):
        import numpy as np
        import orchard.grammar as ogr

        self.ogr = ogr
        info = ogr.TokenizerInfo(list(tokens), ogr.VocabType.RAW, stop_token_ids=list(eos),
                                 special_token_ids=list(range(llama3_vocab.N_REGULAR, llama3_vocab.N_VOCAB)))
        self.compiler = ogr.GrammarCompiler(info, cache_enabled=False, table_build=self.TABLE_BUILD)
        self.mask = ogr.allocate_token_bitmask(1, len(tokens), library="numpy")
        self.view = self.mask.view(np.uint32)
        self.version = _version("orchard") if _version("orchard") != "?" else "build/python"
        self.m = None

    def compile(self, schema_text):
        self.m = self.ogr.GrammarMatcher(self.compiler.compile_json_schema(schema_text, strict_mode=False))

    def reset(self):
        self.m.reset()

    def step(self, t):
        self.m.fill_next_token_bitmask(self.mask)
        return self.m.accept_token(t)

    def allowed(self, t):
        return (int(self.view[0, t >> 5]) >> (t & 31)) & 1 == 1

    def can_stop(self):
        return self.m.is_completed()

    def release(self):
        self.m = None


class OrchardPythonEagerPeer(OrchardPythonPeer):
    TABLE_BUILD = "compile"


def _version(module):
    from importlib.metadata import version

    try:
        return version(module)
    except Exception:
        return "?"


def r3(us):
    return round(us, 3)


def run_schema(peer, job, time_limit_s, conn):
    """Orchard's run_schema over one peer. Sends ("compiled", ttfm_us) once compiled, so a kill later
    still keeps the TTFM; returns the outcome, never raises for the schema's own faults."""
    sid, schema_text, tests = job
    status = {"id": sid, "ttfm_us": 0, "max_ttfm_us": 0, "masks_us": 0, "max_mask_us": 0, "num_tokens": 0,
              "num_tests": len(tests), "all_mask_us": [], "num_valid_tests": 0, "num_invalid_tests": 0}
    out = {"compiled": False, "timed_out": False, "crashed": False, "validation_errors": 0,
           "invalidation_errors": 0, "ttfm_us": None, "mask_us": []}
    clock = time.perf_counter
    start = clock()
    try:
        peer.compile(schema_text)
    except Exception as e:
        if clock() - start >= time_limit_s:
            out["timed_out"] = True
            status["timeout"] = f"compile: over the {time_limit_s:g} s time limit: {e}"
        else:
            status["compile_error"] = f"{type(e).__name__}: {e}" if not isinstance(e, CompileError) else str(e)
        return status, out
    ttfm_us = (clock() - start) * 1e6
    if ttfm_us >= time_limit_s * 1e6:  # compiled, but too late: Orchard's compile bound makes this a timeout
        out["timed_out"] = True
        status["timeout"] = f"compile: over the {time_limit_s:g} s time limit"
        return status, out
    out["compiled"] = True
    out["ttfm_us"] = ttfm_us
    conn.send(("compiled", ttfm_us))
    status["ttfm_us"] = status["max_ttfm_us"] = r3(ttfm_us)

    mask_us = out["mask_us"]
    masks_total = max_mask = 0.0
    n_valid_ok = n_invalid_ok = 0
    gc.disable()
    try:
        for i, (valid, ids) in enumerate(tests):
            try:
                peer.reset()
                accepted = True
                for k, t in enumerate(ids):
                    t0 = clock()
                    ok = peer.step(t)
                    dt = (clock() - t0) * 1e6
                    mask_us.append(dt)
                    masks_total += dt
                    max_mask = max(max_mask, dt)
                    allowed = peer.allowed(t)
                    if allowed != bool(ok):
                        raise RuntimeError(f"token {k} (id {t}): the mask says "
                                           f"{'allowed' if allowed else 'not allowed'} but the commit says "
                                           f"{'accepted' if ok else 'rejected'}")
                    if not ok:
                        accepted = False
                        break
                    if clock() - start >= time_limit_s:
                        out["timed_out"] = True
                        break
                if out["timed_out"]:
                    status["timeout"] = f"test #{i}: over the {time_limit_s:g} s time limit"
                    break
                accepted = accepted and peer.can_stop()
                if accepted and not valid:
                    out["invalidation_errors"] += 1
                    status.setdefault("validation_error", f"test #{i}: should reject but didn't")
                elif not accepted and valid:
                    out["validation_errors"] += 1
                    status.setdefault("validation_error", f"test #{i}: should accept but didn't")
                elif valid:
                    n_valid_ok += 1
                else:
                    n_invalid_ok += 1
            except Exception as e:
                out["crashed"] = True
                status["validation_error"] = f"test #{i}: EXN {type(e).__name__}: {e}"
                break
    finally:
        gc.enable()
    status.update({"masks_us": r3(masks_total), "max_mask_us": r3(max_mask), "num_tokens": len(mask_us),
                   "all_mask_us": [r3(v) for v in mask_us], "num_valid_tests": n_valid_ok,
                   "num_invalid_tests": n_invalid_ok})
    return status, out


def worker_main(conn, peer_name, tokenizer_dir, time_limit_s):
    try:
        tokens, eos = llama3_vocab.llama3_tokens(tokenizer_dir)
        peer = {"llguidance": LlguidancePeer, "xgrammar": XgrammarPeer, "orchard-python": OrchardPythonPeer,
                "orchard-python-eager": OrchardPythonEagerPeer}[peer_name](tokens, eos)
    except Exception as e:
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", peer.version))
    while True:
        job = conn.recv()
        if job is None:
            return
        status, out = run_schema(peer, job, time_limit_s, conn)
        peer.release()  # the schema's matcher and grammar freed outside the next one's timed compile
        conn.send(("done", status, out))
        gc.collect()


# --------------------------------------------------------------------------------------------------
# Peers (the parent side: one worker process at a time, killed on a runaway)
# --------------------------------------------------------------------------------------------------

def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Worker:
    def __init__(self, peer, tokenizer_dir, time_limit_s, mem_limit_bytes):
        self.peer, self.tokenizer_dir = peer, tokenizer_dir
        self.time_limit_s, self.mem_limit_bytes = time_limit_s, mem_limit_bytes
        self.proc = self.conn = None
        self.version = "?"

    def start(self):
        ctx = multiprocessing.get_context("spawn")  # no fork of a parent with threads
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, self.peer, self.tokenizer_dir, self.time_limit_s),
                                daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(READY_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"{self.peer}: the worker did not start within {READY_TIMEOUT_S:g} s")
        try:
            msg = self.conn.recv()
        except EOFError:
            self.stop()
            raise RuntimeError(f"{self.peer}: the worker died while starting") from None
        if msg[0] != "ready":
            self.stop()
            raise RuntimeError(f"{self.peer}: {msg[1]}")
        self.version = msg[1]

    def stop(self):
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(10)
            except (OSError, ValueError):
                pass
        self.stop()

    def run(self, job):
        """(status, outcome) for one schema, whatever happens to the worker."""
        if self.proc is None:
            self.start()
        sid, _, tests = job
        self.conn.send(job)
        deadline = time.monotonic() + self.time_limit_s + KILL_GRACE_S
        ttfm_us = None
        while True:
            try:
                if self.conn.poll(0.05):
                    msg = self.conn.recv()
                    if msg[0] == "compiled":
                        ttfm_us = msg[1]
                        continue
                    return msg[1], msg[2]
            except (EOFError, OSError):
                self.proc.join(5)
                return self._lost(sid, tests, ttfm_us, "crash", f"the worker died (exit code {self.proc.exitcode})")
            if not self.proc.is_alive():
                return self._lost(sid, tests, ttfm_us, "crash", f"the worker died (exit code {self.proc.exitcode})")
            if self.mem_limit_bytes and rss_bytes(self.proc.pid) > self.mem_limit_bytes:
                return self._lost(sid, tests, ttfm_us, "crash",
                                  f"killed: resident memory over the {self.mem_limit_bytes / 2**30:g} GB limit")
            if time.monotonic() > deadline:
                where = "tests" if ttfm_us is not None else "compile"
                return self._lost(sid, tests, ttfm_us, "timeout",
                                  f"{where}: over the {self.time_limit_s:g} s time limit (killed)")

    def _lost(self, sid, tests, ttfm_us, kind, why):
        self.stop()
        status = {"id": sid, "ttfm_us": r3(ttfm_us or 0), "max_ttfm_us": r3(ttfm_us or 0), "masks_us": 0,
                  "max_mask_us": 0, "num_tokens": 0, "num_tests": len(tests), "all_mask_us": [],
                  "num_valid_tests": 0, "num_invalid_tests": 0, kind: why}
        out = {"compiled": ttfm_us is not None, "timed_out": kind == "timeout", "crashed": kind == "crash",
               "validation_errors": 0, "invalidation_errors": 0, "ttfm_us": ttfm_us, "mask_us": []}
        return status, out


def run_peer(peer, jobs, args, jsonl):
    w = Worker(peer, args.tokenizer, args.time_limit, int(args.mem_limit * 2**30))
    w.start()
    summary = {"schemas": len(jobs), "passing": 0, "compile_errors": 0, "validation_errors": 0,
               "invalidation_errors": 0, "timeouts": 0, "crashes": 0, "tests": 0}
    tbm, ttfm = [], []
    t_start = time.monotonic()
    try:
        for n, job in enumerate(jobs, 1):
            status, o = w.run(job)
            passed = (o["compiled"] and not o["timed_out"] and not o["crashed"] and o["validation_errors"] == 0
                      and o["invalidation_errors"] == 0)
            status["passed"] = passed
            summary["tests"] += len(job[2])
            if o["ttfm_us"] is not None:
                ttfm.append(o["ttfm_us"] / 1000)
            tbm.extend(o["mask_us"])
            summary["compile_errors"] += not o["compiled"] and not o["timed_out"] and not o["crashed"]
            summary["passing"] += passed
            summary["validation_errors"] += o["validation_errors"]
            summary["invalidation_errors"] += o["invalidation_errors"]
            summary["timeouts"] += o["timed_out"]
            summary["crashes"] += o["crashed"]
            if jsonl:
                jsonl.write(json.dumps(status, ensure_ascii=False) + "\n")
                jsonl.flush()
            if n % 50 == 0 or n == len(jobs):
                print(f"[{peer}] {n}/{len(jobs)} schemas, {time.monotonic() - t_start:.0f} s", file=sys.stderr)
    finally:
        w.close()
    summary["tbm"] = percentiles(tbm)
    summary["ttfm"] = percentiles(ttfm)
    return w.version, summary


# --------------------------------------------------------------------------------------------------
# Summaries: Orchard's lines, written and read
# --------------------------------------------------------------------------------------------------

def percentiles(values):
    """Orchard's nearest rank: the ceil(q * n)-th smallest."""
    v = sorted(values)
    out = {"n": len(v)}
    for name, q in PERCENTILES:
        i = min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1)) if v else 0
        out[name] = v[i] if v else 0.0
    out["max"] = v[-1] if v else 0.0
    return out


def percentile_text(p):
    return "".join(f" {name} {p[name]:.1f}" for name, _ in PERCENTILES) + f" max {p['max']:.1f}"


def summary_lines(s):
    return [f"maskbench: {s['schemas']} schemas, {s['passing']} passing, {s['compile_errors']} compile errors, "
            f"{s['validation_errors']} validation errors, {s['invalidation_errors']} invalidation errors, "
            f"{s['timeouts']} timeouts, {s['crashes']} crashes ({s['tests']} tests)",
            f"TBM us ({s['tbm']['n']} masks):{percentile_text(s['tbm'])}",
            f"TTFM ms ({s['ttfm']['n']} schemas):{percentile_text(s['ttfm'])}"]


_COUNTS = re.compile(r"^maskbench: (\d+) schemas, (\d+) passing, (\d+) compile errors, (\d+) validation errors, "
                     r"(\d+) invalidation errors, (\d+) timeouts, (\d+) crashes \((\d+) tests\)$")
_TIMES = re.compile(r"^(TBM us|TTFM ms) \((\d+) (?:masks|schemas)\):(.*)$")


def parse_summary(text):
    """Orchard's summary lines back into a summary; ValueError when they are missing."""
    s = {}
    for line in text.splitlines():
        m = _COUNTS.match(line.strip())
        if m:
            keys = ("schemas", "passing", "compile_errors", "validation_errors", "invalidation_errors", "timeouts",
                    "crashes", "tests")
            s.update(zip(keys, map(int, m.groups())))
            continue
        m = _TIMES.match(line.strip())
        if m:
            words = m.group(3).split()
            p = {"n": int(m.group(2))}
            p.update({words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)})
            s["tbm" if m.group(1) == "TBM us" else "ttfm"] = p
    if "schemas" not in s or "tbm" not in s or "ttfm" not in s:
        raise ValueError("no maskbench summary in orchard's output")
    return s


def run_orchard(binary, files, args, jsonl_path, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        out_path = jsonl_path or os.path.join(tmp, "orchard.jsonl")
        cmd = [binary, "grammar", "bench", "--maskbench", *files, "-t", args.tokenizer,
               "--time-limit", f"{args.time_limit:g}", "--jsonl", out_path, *extra]
        print(f"[orchard] {len(files)} schemas", file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"orchard exited with {r.returncode}: {r.stderr.strip()[-2000:]}")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return version.removeprefix("orchard ") or binary, parse_summary(r.stdout)


def side_by_side(results):
    names = [n for n, _, _ in results]
    rows = [(k.replace("_", " "), [str(s[k]) for _, _, s in results])
            for k in ("schemas", "passing", "compile_errors", "validation_errors", "invalidation_errors",
                      "timeouts", "crashes", "tests")]
    for key, unit in (("tbm", "TBM us"), ("ttfm", "TTFM ms")):
        rows.append((f"{unit} (n)", [str(s[key]["n"]) for _, _, s in results]))
        for name, _ in PERCENTILES + (("max", 1.0),):
            rows.append((f"{unit} {name}", [f"{s[key][name]:.1f}" for _, _, s in results]))
    w0 = max(len(r[0]) for r in rows)
    ws = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    lines = [" " * w0 + "".join(f"  {n:>{w}}" for n, w in zip(names, ws))]
    lines += [f"{label:<{w0}}" + "".join(f"  {v:>{w}}" for v, w in zip(vals, ws)) for label, vals in rows]
    return lines


# --------------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", metavar="DIR|FILE", help="MaskBench schema files or folders of them")
    ap.add_argument("--sample-every", type=int, default=1, metavar="N",
                    help="every Nth file of the sorted list, from the first (default 1: all)")
    ap.add_argument("-t", "--tokenizer", default=llama3_vocab.default_tokenizer_dir(), metavar="DIR",
                    help="the Llama 3 tokenizer folder (encoder.json; default ../shared/data/tokenizers/llama3)")
    ap.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                    help="seconds per schema, compile and tests together (default 30)")
    ap.add_argument("--mem-limit", type=float, default=8.0, metavar="GB",
                    help="resident memory of a peer's worker, in GiB (default 8; 0: none)")
    ap.add_argument("--peers", default=",".join(PEERS), metavar="LIST",
                    help="comma-separated peers to run (default llguidance,xgrammar,orchard-python; '' for none)")
    ap.add_argument("--orchard", metavar="BIN", help="also run BIN grammar bench --maskbench on the same files")
    ap.add_argument("--orchard-both", "--orchard-lazy", action="store_true", dest="orchard_both",
                    help="with --orchard: run it three times, with --tables compile (every token table built in "
                         "compile), background (the default) and first-use (each built at its first mask)")
    ap.add_argument("--jsonl", metavar="DIR", help="write DIR/<engine>.jsonl, one status line per schema")
    a = ap.parse_args(argv)
    if a.sample_every < 1:
        ap.error(f"--sample-every: expected a positive count, got {a.sample_every}")
    if not a.time_limit > 0:
        ap.error(f"--time-limit: expected a positive number of seconds, got {a.time_limit:g}")
    if not a.mem_limit >= 0:
        ap.error(f"--mem-limit: expected a non-negative number of GiB, got {a.mem_limit:g}")
    a.peers = [p for p in a.peers.split(",") if p]
    for p in a.peers:
        if p not in PEERS:
            ap.error(f"--peers: unknown peer '{p}' (known: {', '.join(PEERS)})")
    if not os.path.exists(llama3_vocab.encoder_path(a.tokenizer)):
        ap.error(f"--tokenizer: {llama3_vocab.encoder_path(a.tokenizer)}: no such file")
    if a.orchard and not os.access(a.orchard, os.X_OK):
        ap.error(f"--orchard: {a.orchard}: not an executable file")
    if not a.peers and not a.orchard:
        ap.error("nothing to run: no --peers and no --orchard")
    if a.orchard_both and not a.orchard:
        ap.error("--orchard-both needs --orchard")
    return a


def main(argv):
    args = parse_args(argv)
    try:
        files = list_files(args.paths, args.sample_every)
        loaded = [load_file(f) for f in files]  # every file checked before anything runs
    except (UsageError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    # One thread per peer (xgrammar imports torch; llguidance's pools are rayon's).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = "1"
    if args.jsonl:
        os.makedirs(args.jsonl, exist_ok=True)
    jobs = []
    if args.peers:
        tokens, _ = llama3_vocab.llama3_tokens(args.tokenizer)
        enc = llama3_vocab.tiktoken_encoding(tokens)
        jobs = [(sid, schema, [(valid, enc.encode_ordinary(text)) for valid, text in tests])
                for sid, schema, tests in loaded]

    results = []  # (engine, version, summary)
    for peer in args.peers:
        jsonl = open(os.path.join(args.jsonl, f"{peer}.jsonl"), "w", encoding="utf-8") if args.jsonl else None
        try:
            version, summary = run_peer(peer, jobs, args, jsonl)
        except RuntimeError as e:  # a peer that cannot start is reported, never fatal to the others
            print(f"== {peer}: not run: {e}", flush=True)
            continue
        finally:
            if jsonl:
                jsonl.close()
        results.append((peer, version, summary))
        print(f"== {peer} {version}", *summary_lines(summary), sep="\n", flush=True)
    orchard_runs = ([("orchard-eager", ("--tables", "compile")), ("orchard-background", ("--tables", "background")),
                     ("orchard-lazy", ("--tables", "first-use"))]
                    if args.orchard_both else [("orchard", ())])
    for name, extra in orchard_runs if args.orchard else []:
        try:
            version, summary = run_orchard(args.orchard, files, args,
                                           os.path.join(args.jsonl, f"{name}.jsonl") if args.jsonl else None, extra)
            results.append((name, version, summary))
            print(f"== {name} {version}", *summary_lines(summary), sep="\n", flush=True)
        except (RuntimeError, ValueError, OSError) as e:
            print(f"== {name}: not run: {e}", flush=True)
    if len(results) > 1:
        print(f"== side by side ({len(files)} schemas, Llama 3.1 vocabulary, one thread, "
              f"time limit {args.time_limit:g} s)")
        print(*side_by_side(results), sep="\n")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

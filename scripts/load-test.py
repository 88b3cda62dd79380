#!/usr/bin/env python3
"""Load test of `orchard serve`: N concurrent streaming chat clients for T seconds on loopback.

Checks that no request fails, that no token is lost or duplicated (each stream's concatenated deltas and its
usage equal a non-streamed replay of the same request and seed, made after the timed window), and that the
server's memory stays flat (RSS sampled every second; the last tenth of the run against the first tenth after
warm-up). Prints throughput and p50/p99 time to first token. Standard library only.

  scripts/load-test.py --orchard build/pie/orchard                 # starts the default model, 64 x 120 s
  scripts/load-test.py --url http://127.0.0.1:8080 --pid 1234 -c 16 -t 30   # a running server
Exit status 0 when every check passed, 1 otherwise.
"""
import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Target:
    def __init__(self, host, port, model, key):
        self.host, self.port, self.model, self.key = host, port, model, key

    def metric(self, name):
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.key}"} if self.key else {})
            text = conn.getresponse().read().decode()
            conn.close()
        except OSError:
            return None
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def request(self, body, stream):
        """One chat completion. Returns dict(text, usage, finish, ttft, error)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        body = dict(body, stream=stream)
        if stream:
            body["stream_options"] = {"include_usage": True}
        start = time.perf_counter()
        out = {"text": "", "usage": None, "finish": None, "ttft": None, "error": None}
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
            r = conn.getresponse()
            if r.status != 200:
                out["error"] = f"HTTP {r.status}: {r.read()[:300]!r}"
                return out
            if not stream:
                data = json.loads(r.read())
                out["text"] = data["choices"][0]["message"]["content"]
                out["finish"] = data["choices"][0]["finish_reason"]
                out["usage"] = data["usage"]
                return out
            done = False
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    out["error"] = f"stream error: {chunk['error']}"
                    return out
                if chunk.get("usage"):
                    out["usage"] = chunk["usage"]
                for ch in chunk.get("choices", []):
                    piece = ch["delta"].get("content") or ""
                    if piece and out["ttft"] is None:
                        out["ttft"] = time.perf_counter() - start
                    out["text"] += piece
                    out["finish"] = ch.get("finish_reason") or out["finish"]
            if not done:
                out["error"] = "stream ended without [DONE]"
            elif out["usage"] is None:
                out["error"] = "no usage chunk"
            return out
        except Exception as e:  # noqa: BLE001 - counted as an error
            out["error"] = repr(e)
            return out
        finally:
            conn.close()


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orchard", help="orchard binary: start `orchard serve` (default model unless --model)")
    ap.add_argument("--model", help="model file for the started server")
    ap.add_argument("--server-args", default="", help="extra arguments for the started server")
    ap.add_argument("--url", help="a running server instead (http://host:port)")
    ap.add_argument("--pid", type=int, help="the running server's pid, for RSS")
    ap.add_argument("--api-key", default="")
    ap.add_argument("-c", "--clients", type=int, default=64)
    ap.add_argument("-t", "--duration", type=float, default=120)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--replay-fraction", type=float, default=0.25,
                    help="share of streams replayed without streaming to compare tokens (default 0.25)")
    ap.add_argument("--rss-growth-limit", type=float, default=0.10, help="allowed RSS growth (fraction)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before the RSS baseline (default: 5 s after the KV pool first filled, at "
                         "most half the run)")
    args = ap.parse_args()

    proc = None
    if args.orchard:
        cmd = [args.orchard, "serve", "--port", "0", "--quiet", "--parallel", str(args.clients)]
        if args.model:
            cmd += ["-m", args.model]
        cmd += args.server_args.split()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        m = re.search(r"listening on http://([\d.]+):(\d+) \(model (.*)\)", proc.stdout.readline())
        if not m:
            proc.kill()
            sys.exit("the server did not start")
        host, port, model, pid = m.group(1), int(m.group(2)), m.group(3), proc.pid
    elif args.url:
        u = urllib.parse.urlparse(args.url)
        host, port, pid = u.hostname, u.port or 80, args.pid
        conn = http.client.HTTPConnection(host, port)
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {args.api_key}"} if args.api_key else {})
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
    else:
        sys.exit("give --orchard or --url")
    target = Target(host, port, model, args.api_key)

    prompts = ["Tell me a story about a dog.", "Write a poem about the sea.", "Explain why the sky is blue.",
               "List three fruits.", "What happened next?", "Describe a city at night."]
    results, lock = [], threading.Lock()
    seed_counter = iter(range(1, 1 << 62))
    stop_at = time.perf_counter() + args.duration
    rss = []

    def client(i):
        rng = random.Random(i)
        while time.perf_counter() < stop_at:
            with lock:
                seed = next(seed_counter)
            body = {"model": model, "max_tokens": args.max_tokens, "temperature": 0.8, "seed": seed,
                    "messages": [{"role": "user", "content": rng.choice(prompts)}]}
            r = target.request(body, stream=True)
            r["body"], r["end"] = body, time.perf_counter()
            with lock:
                results.append(r)

    pool_full_at = []  # when the KV pool first ran out of free pages (every page touched once)

    def sample_rss():
        while time.perf_counter() < stop_at:
            if pid:
                value = rss_bytes(pid)
                if value:
                    rss.append((time.perf_counter(), value))
            if not pool_full_at:
                free, total = target.metric("orchard_kv_pages_free"), target.metric("orchard_kv_pages")
                if free is not None and total and free < 0.05 * total:
                    pool_full_at.append(time.perf_counter())
            time.sleep(1)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    threads.append(threading.Thread(target=sample_rss))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0

    errors = [r for r in results if r["error"]]
    ok = [r for r in results if not r["error"]]
    tokens = sum(r["usage"]["completion_tokens"] for r in ok)
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]

    # Replays after the window: same body and seed, not streamed.
    rng = random.Random(0)
    sample = [r for r in ok if rng.random() < args.replay_fraction]
    mismatches = []
    for r in sample:
        replay = target.request(r["body"], stream=False)
        if replay["error"] or replay["text"] != r["text"] or \
                replay["usage"]["completion_tokens"] != r["usage"]["completion_tokens"]:
            mismatches.append((r["body"]["seed"], r["text"][:60], replay["text"][:60], replay["error"]))
    # Every stream's token count is what it may be: max_tokens unless it stopped.
    bad_counts = [r for r in ok if r["usage"]["completion_tokens"] != args.max_tokens and r["finish"] != "stop"]

    # Flat memory: the last tenth of the run against the first tenth after the warm-up, during which the
    # KV pool's pages are touched for the first time as the prefix cache fills it (RSS rises by the pool's
    # size, then stays).
    rss_verdict, rss_growth, rss_series = "not sampled", 0.0, []
    warmup = args.warmup if args.warmup is not None else (
        min(pool_full_at[0] - t0 + 5, args.duration / 2) if pool_full_at else args.duration / 2)
    warm = [v for t, v in rss if t - t0 > warmup]
    if len(warm) >= 10:
        tenth = max(1, len(warm) // 10)
        first, last = statistics.median(warm[:tenth]), statistics.median(warm[-tenth:])
        rss_growth = (last - first) / first
        rss_verdict = (f"{first / 2**20:.0f} MiB -> {last / 2**20:.0f} MiB ({rss_growth * 100:+.1f}%) after "
                       f"{warmup:.0f} s warm-up; max {max(v for _, v in rss) / 2**20:.0f} MiB")
    step = max(1, len(rss) // 12)
    rss_series = [f"{t - t0:.0f}s:{v / 2**20:.0f}" for t, v in rss[::step]]

    summary = {
        "clients": args.clients, "duration_s": round(elapsed, 1), "max_tokens": args.max_tokens,
        "requests": len(results), "errors": len(errors), "completion_tokens": tokens,
        "throughput_tok_s": round(tokens / elapsed, 1), "requests_per_s": round(len(ok) / elapsed, 2),
        "ttft_p50_ms": round(percentile(ttfts, 50) * 1000, 1), "ttft_p99_ms": round(percentile(ttfts, 99) * 1000, 1),
        "replayed": len(sample), "replay_mismatches": len(mismatches), "bad_token_counts": len(bad_counts),
        "kv_pool_full_at_s": round(pool_full_at[0] - t0, 1) if pool_full_at else None,
        "rss": rss_verdict, "rss_mib_series": " ".join(rss_series),
    }
    print(json.dumps(summary, indent=1))
    for e in errors[:5]:
        print("error:", e["error"])
    for m in mismatches[:5]:
        print("mismatch (seed, stream, replay, error):", m)

    if proc:
        proc.terminate()
        proc.wait(60)
    passed = not errors and not mismatches and not bad_counts and rss_growth <= args.rss_growth_limit and ok
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

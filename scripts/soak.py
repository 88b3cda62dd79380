#!/usr/bin/env python3
"""Soak test of `orchard serve` on loopback: CLIENTS clients for DURATION seconds mixing streaming and
non-streaming chats, abandoned requests, bad inputs and grammar-heavy requests against a real model (the
default model unless --model), while a monitor asks /health every half second and samples the server's
RSS. Bounded in time: the server is stopped (SIGTERM) at the end.

usage: scripts/soak.py [--orchard build/pie/orchard] [--model M] [--duration 600] [--warmup 60]
                       [--clients 16] [--actions plain,grammar,abandon,bad] [--json]

Checks, each printed PASS/FAIL with its figure, exit status 1 when one fails:
  - no crash: the server runs throughout and exits 0 on SIGTERM, within its grace period;
  - no 5xx: none answered to any client, none in the server's own request counts;
  - every abandoned request cancelled: orchard_http_requests_cancelled_total grows by the abandons;
  - RSS within 10% of its level at the end of the warm-up (levels: medians of 10 s windows);
  - /health answers within 1 s, every time.
Only the standard library; nothing leaves 127.0.0.1.
"""
import argparse
import http.client
import json
import random
import re
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time

KEY = "soak"


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = {}           # kind -> count
        self.statuses = {}        # status -> count
        self.server_errors = []   # (kind, status, body head)
        self.unexpected = []      # (kind, what)
        self.abandoned = 0
        self.health = []          # latencies (s); None for a failure
        self.rss = []             # (t, KiB)

    def count(self, kind, status):
        with self.lock:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def fail(self, kind, what):
        with self.lock:
            self.unexpected.append((kind, what))


class Soak:
    def __init__(self, args):
        self.args = args
        self.log = tempfile.NamedTemporaryFile(prefix="orchard-soak-", suffix=".log", delete=False)
        cmd = [args.orchard, "serve", "--port", "0", "--api-key", KEY, "--grace", str(args.grace),
               "--grammar-cache-mb", str(args.grammar_cache_mb), "--quiet"]
        if args.model:
            cmd += ["-m", args.model]
        cmd += args.serve_args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://([\d.]+):(\d+) \(model (.*)\)", line)
        if not m:
            self.proc.kill()
            sys.exit(f"soak.py: orchard serve did not start: {line!r}; log {self.log.name}")
        self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
        self.stats = Stats()
        self.stop_at = 0.0

    # --- HTTP -------------------------------------------------------------------------------------------
    def request(self, method, path, body=None, raw=None, headers=None, timeout=300, stream=False):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, text

    def raw(self, data, timeout=30):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            s.sendall(data)
        except OSError:
            pass
        got = b""
        try:
            while b"\r\n" not in got:
                part = s.recv(4096)
                if not part:
                    break
                got += part
        except OSError:
            pass
        s.close()
        m = re.match(rb"HTTP/1\.1 (\d+)", got)
        return int(m.group(1)) if m else None

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def server_5xx(self):
        _, text = self.request("GET", "/metrics")
        return sum(float(v) for v in re.findall(r'^orchard_http_requests_total\{[^}]*status="5\d\d"\} (\S+)$',
                                                   text, re.M))

    # --- the traffic ------------------------------------------------------------------------------------
    def chat_body(self, rng, **kw):
        topics = ["a cat", "the sea", "a city at night", "bread", "a train", "winter", "a lighthouse"]
        body = {"model": self.model, "max_tokens": rng.randint(8, 48), "temperature": 0.8, "seed": rng.randint(0, 9999),
                "messages": [{"role": "user", "content": f"Write one sentence about {rng.choice(topics)}."}]}
        body.update(kw)
        return body

    def expect(self, kind, status, text, ok=(200,)):
        self.stats.count(kind, status)
        if status >= 500:
            with self.stats.lock:
                self.stats.server_errors.append((kind, status, text[:300]))
        elif status not in ok:
            self.stats.fail(kind, f"status {status}: {text[:200]}")

    def plain(self, rng):
        stream = rng.random() < 0.5
        status, text = self.request("POST", "/v1/chat/completions", self.chat_body(rng, stream=stream))
        self.expect("stream" if stream else "chat", status, text)
        if status == 200 and stream and not text.rstrip().endswith("data: [DONE]"):
            self.stats.fail("stream", f"no [DONE]: {text[-200:]}")

    def grammar_heavy(self, rng):
        enum = ["".join(rng.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(rng.choice([5, 50, 500]))]
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                                   "tag": {"enum": enum}},
                  "required": ["name", "age", "tag"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]}}, "required": ["city"]}}}]
        choice = rng.randrange(6)
        kw = [dict(response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
                   max_tokens=96),
              dict(regex="[A-Z][a-z]{2,8} [0-9]{1,3}", max_tokens=16),
              dict(grammar='root ::= "answer: " ("yes" | "no" | "maybe") "."', max_tokens=12),
              dict(lark='start: "n=" %json {"type": "integer", "minimum": 0, "maximum": 999}\n', max_tokens=12),
              dict(tools=tools, tool_choice="required", max_tokens=64),
              dict(response_format={"type": "json_object"}, max_tokens=48)][choice]
        body = self.chat_body(rng, stream=rng.random() < 0.3, **kw)
        status, text = self.request("POST", "/v1/chat/completions", body)
        self.expect("grammar", status, text)

    def abandon(self, rng):
        # Long, and unable to end early: still running when its client goes away.
        body = json.dumps(self.chat_body(rng, max_tokens=1000, stream=rng.random() < 0.5, regex="[a-z ]{4000}"))
        s = socket.create_connection((self.host, self.port))
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        time.sleep(rng.uniform(0.2, 1.5))
        s.close()
        with self.stats.lock:
            self.stats.abandoned += 1
            self.stats.kinds["abandon"] = self.stats.kinds.get("abandon", 0) + 1

    def bad(self, rng):
        deep = "[" * 20000 + "]" * 20000
        x = '{"messages":[{"role":"user","content":"x"}],'
        cases = [
            ("POST", "/v1/chat/completions", '{"model": "x", "messages": [', (400,)),
            ("POST", "/v1/chat/completions", x + '"max_tokens":1e400}', (400,)),
            ("POST", "/v1/chat/completions", x + '"temperature":"hot"}', (400,)),
            ("POST", "/v1/chat/completions", x + '"response_format":'
             '{"type":"json_schema","json_schema":{"name":"d","schema":{"const":' + deep + '}}}}', (400,)),
            ("POST", "/v1/chat/completions", x + '"grammar":"root ::= ("}', (400,)),
            ("POST", "/v1/chat/completions", x + '"tools":[{"type":"function",'
             '"function":{"name":"f","parameters":{"type":"string"}}}],"tool_choice":"required"}', (400,)),
            ("POST", "/v1/chat/completions", '{"model":"nope","messages":[{"role":"user","content":"x"}]}', (404,)),
            ("GET", "/v1/chat/completions", None, (405,)),
            ("POST", "/api/chat",
             '{"model":"%s","messages":[{"role":"user","content":"x","images":["aGk="]}]}' % self.model, (400,)),
            ("POST", "/v1/completions", '{"prompt":[1,2,-3]}', (400,)),
        ]
        which = rng.randrange(len(cases) + 3)
        if which < len(cases):
            method, path, raw, ok = cases[which]
            status, text = self.request(method, path, raw=raw)
            self.expect("bad", status, text, ok)
            return
        if which == len(cases):
            chunk = b"100000\r\n" + b"a" * 0x100000 + b"\r\n"
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
            status = self.raw(head + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 20 + b"0\r\n\r\n")
            ok = (413,)
        elif which == len(cases) + 1:
            status = self.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            ok = (400,)
        else:
            status = self.raw(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n")
            ok = (431,)
        self.expect("bad", status or 0, "", ok)

    def client(self, seed):
        rng = random.Random(seed)
        mix = {"plain": (0.35, self.plain), "grammar": (0.2, self.grammar_heavy), "abandon": (0.2, self.abandon),
               "bad": (0.25, self.bad)}
        actions = [mix[k] for k in self.args.actions.split(",")]
        total = sum(w for w, _ in actions)
        actions = [(w / total, a) for w, a in actions]
        while time.time() < self.stop_at:
            r, acc = rng.random(), 0.0
            for weight, action in actions:
                acc += weight
                if r < acc:
                    break
            try:
                action(rng)
            except Exception as e:  # noqa: BLE001 - a broken connection is a finding, not the end of the soak
                self.stats.fail(action.__name__, repr(e))

    def monitor(self):
        while time.time() < self.stop_at:
            start = time.time()
            try:
                status, _ = self.request("GET", "/health", timeout=1)
                self.stats.health.append(time.time() - start if status == 200 else None)
            except Exception:  # noqa: BLE001 - a timeout is the failure this records
                self.stats.health.append(None)
            try:
                with open(f"/proc/{self.proc.pid}/status") as f:
                    rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                self.stats.rss.append((time.time(), rss))
            except OSError:
                self.stats.rss.append((time.time(), None))
            time.sleep(max(0.0, 0.5 - (time.time() - start)))

    def run(self):
        a = self.args
        start = time.time()
        self.stop_at = start + a.duration
        cancelled_before = self.metric("orchard_http_requests_cancelled_total")
        threads = [threading.Thread(target=self.client, args=(i,)) for i in range(a.clients)]
        threads.append(threading.Thread(target=self.monitor))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Abandoned requests end once the server notices: give it a moment, then read the counters.
        deadline = time.time() + 30
        while time.time() < deadline and self.metric("orchard_http_requests_in_flight") != 0:
            time.sleep(0.2)
        cancelled = self.metric("orchard_http_requests_cancelled_total") - cancelled_before
        server_5xx = self.server_5xx()
        alive = self.proc.poll() is None
        self.proc.send_signal(signal.SIGTERM)
        sent = time.time()
        try:
            code = self.proc.wait(a.grace + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        exit_seconds = time.time() - sent

        st = self.stats
        # RSS's level: the median of each 10 s window (a sample may catch a request's transient buffers,
        # a 16 MiB body in flight; the level is what stays). The peak of single samples is reported too.
        def level(t0):
            window = sorted(r for t, r in st.rss if r is not None and t0 <= t < t0 + 10)
            return window[len(window) // 2] if window else None
        warm_rss = level(start + a.warmup - 10)
        levels = [level(t0) for t0 in range(int(start + a.warmup), int(start + a.duration - 5), 10)]
        levels = [x for x in levels if x is not None]
        peak_rss = max(levels) if levels else None
        peak_sample = max((r for t, r in st.rss if r is not None and t > start + a.warmup), default=None)
        health_ok = [h for h in st.health if h is not None]
        # RSS every tenth of the run, for the record.
        timeline = []
        for k in range(11):
            at = start + k * a.duration / 10
            near = [r for t, r in st.rss if r is not None and abs(t - at) < 1]
            timeline.append(round(near[0] / 1024) if near else None)
        figures = {
            "duration_s": a.duration, "clients": a.clients, "model": self.model,
            "requests": sum(st.kinds.values()), "by_kind": st.kinds, "statuses": st.statuses,
            "abandoned": st.abandoned, "cancelled": cancelled,
            "client_5xx": len(st.server_errors), "server_5xx": server_5xx,
            "unexpected": len(st.unexpected),
            "rss_after_warmup_mib": warm_rss and round(warm_rss / 1024, 1),
            "rss_peak_level_after_warmup_mib": peak_rss and round(peak_rss / 1024, 1),
            "rss_peak_sample_after_warmup_mib": peak_sample and round(peak_sample / 1024, 1),
            "rss_timeline_mib": timeline,
            "health_checks": len(st.health), "health_failures": len(st.health) - len(health_ok),
            "health_max_ms": round(1000 * max(health_ok), 1) if health_ok else None,
            "exit_status": code, "exit_seconds": round(exit_seconds, 2), "grace_s": a.grace,
        }
        checks = [
            ("no crash", alive and code == 0 and exit_seconds <= a.grace + 1,
             f"alive to the end: {alive}, exit {code} after {exit_seconds:.1f} s (grace {a.grace} s)"),
            ("no 5xx", not st.server_errors and server_5xx == 0,
             f"{len(st.server_errors)} to clients, {server_5xx:.0f} counted by the server"),
            ("abandoned requests cancelled", cancelled >= st.abandoned,
             f"{st.abandoned} abandoned, {cancelled:.0f} cancelled"),
            ("RSS within 10% after warm-up",
             warm_rss is not None and peak_rss is not None and peak_rss <= 1.1 * warm_rss,
             f"level {figures['rss_after_warmup_mib']} MiB at the end of the {a.warmup:.0f} s warm-up, highest level "
             f"after it {figures['rss_peak_level_after_warmup_mib']} MiB (10 s medians; highest sample "
             f"{figures['rss_peak_sample_after_warmup_mib']} MiB)"),
            ("/health within 1 s", health_ok and len(health_ok) == len(st.health) and max(health_ok) < 1,
             f"{len(st.health)} checks, {figures['health_failures']} failed, slowest {figures['health_max_ms']} ms"),
            ("answers as expected", not st.unexpected, f"{len(st.unexpected)} unexpected answers"),
        ]
        for kind, what in st.unexpected[:10]:
            print(f"  unexpected {kind}: {what}")
        for kind, status, head in st.server_errors[:10]:
            print(f"  5xx {kind}: {status} {head}")
        failed = 0
        for name, ok, detail in checks:
            print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
            failed += 0 if ok else 1
        if a.json:
            print(json.dumps(figures))
        print(f"server log: {self.log.name}")
        return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orchard", default="build/pie/orchard")
    ap.add_argument("--model", default="", help="-m for orchard serve (default: its own default model)")
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--grace", type=float, default=5)
    # Small, so that the grammar caches fill (with distinct grammars) during the warm-up.
    ap.add_argument("--grammar-cache-mb", type=int, default=16)
    ap.add_argument("--actions", default="plain,grammar,abandon,bad",
                    help="the kinds of traffic, comma-separated (one alone shows what a finding comes from)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("serve_args", nargs="*", help="more options for orchard serve (after --)")
    args = ap.parse_args()
    if args.warmup >= args.duration:
        sys.exit("soak.py: --warmup must be shorter than --duration")
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()

"""What the end-to-end tests of `orchard serve` share: a live server on loopback (started, reached, stopped),
the default model's place in the model store, and the loop that runs a file's tests and reports each.
Standard library only: each test file imports it from its own folder.
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import traceback

STORE_NAME = "smollm2:135m-instruct-q4_1"  # the default model's name in the model store


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def store_dir():
    home = os.environ.get("ORCHARD_HOME")
    return os.path.join(home, "models") if home else os.path.expanduser("~/.cache/orchard/models")


def default_model_stored():
    """Whether the store holds the default model (its manifest and the blob it names), as
    tests/common/default_model.h finds it."""
    try:
        with open(os.path.join(store_dir(), "manifests", "smollm2", "135m-instruct-q4_1")) as f:
            m = re.search(r'"digest": "sha256:([0-9a-f]{64})"', f.read())
    except OSError:
        return False
    return bool(m) and os.path.exists(os.path.join(store_dir(), "blobs", "sha256-" + m.group(1)))


class LiveServer:
    """`orchard serve ARGS` on loopback (a free port unless ARGS name one), up once it prints the address it
    listens on. Its stderr goes to `log` (an open file), or to a temporary file named by `log_prefix`."""

    def __init__(self, binary, *args, log=None, log_prefix="orchard-serve-", env=None, key=None):
        self.log = log or tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)
        self.key = key
        if "--port" not in args:
            args = ("--port", "0", *args)
        self.proc = subprocess.Popen([binary, "serve", *args], stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://([\d.]+):(\d+)(?: \(model (.*)\))?", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"orchard serve did not start: {line!r}; log: {self.log.name}")
        self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
        self.base = f"http://{self.host}:{self.port}"

    def request(self, method, path, body=None, headers=None, key=None, raw=None, timeout=120,
                content_type="application/json"):
        """Plain HTTP: `body` sent as JSON or `raw` as it is, `key` as a bearer token. Returns (status,
        response, body text)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": content_type} if content_type else {}
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, r, text

    def metric(self, name):
        """A Prometheus sample of /metrics, or None where it is absent."""
        _, _, text = self.request("GET", "/metrics", key=self.key)
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` and waits for the exit (30 s, then kills)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_tests(cases, only="", on_failure=None):
    """Runs each (test, args) of `cases` whose name holds one of `only`'s comma-separated words (all when
    empty), printing PASS with its time or FAIL with the traceback; `on_failure(name)` after a failure.
    Returns the names of the failed tests."""
    failed = []
    for test, args in cases:
        if not any(word in test.__name__ for word in only.split(",")):
            continue
        start = time.time()
        try:
            test(*args)
            print(f"PASS {test.__name__} ({time.time() - start:.1f} s)", flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported
            failed.append(test.__name__)
            print(f"FAIL {test.__name__}\n{traceback.format_exc()}", flush=True)
            if on_failure:
                on_failure(test.__name__)
    return failed


def finish(failed, servers, work=None, passed="all passed"):
    """The end of a test file: on failures, names them with the servers' logs (and the `work` folder) kept
    for a look, and returns 1; else deletes them, prints `passed` and returns 0."""
    logs = " ".join(s.log.name for s in servers)
    if failed:
        print(f"{len(failed)} failed: {', '.join(failed)}; server log: {logs}" + (f"; work: {work}" if work else ""))
        return 1
    for s in servers:
        os.unlink(s.log.name)
    if work:
        shutil.rmtree(work, ignore_errors=True)
    print(passed)
    return 0

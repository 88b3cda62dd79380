#!/usr/bin/env python3
"""End-to-end tests of several models served at once and the model-store routes, driven by the official
`ollama` and `openai` clients against a live `orchard serve` on loopback.

The server runs orchard-random (always loaded) over a store of its own (a temporary ORCHARD_HOME) that holds
orchard-random written as a 3.5 MB GGUF under several names: pulled from a path and from a local http server
(interrupted, then resumed), created with a Modelfile's system prompt and parameters, copied and deleted.
Requests to the models are interleaved from several threads; one model is unloaded with keep_alive 0 and
reloaded; a server with --max-loaded-models 2 unloads the least recently used; every route's errors.

Run by CTest: test_store_e2e.py --orchard build/pie/orchard. Exit 0 pass, 1 fail, 77 skipped (the `ollama`
or `openai` package is absent: pip install -r scripts/requirements-test.txt).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

try:
    import ollama
    import openai
except ImportError as e:  # skip with the reason
    print(f"SKIP: {e.name} is not installed (pip install -r scripts/requirements-test.txt)")
    sys.exit(77)

from client_server import ClientServer, expect_error  # noqa: E402 - after the skip guard
from live_server import expect, finish, run_tests  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RANGE_SERVER = os.path.join(HERE, "..", "..", "..", "cli", "range_server.py")


class Server(ClientServer):
    def __init__(self, binary, home, *extra):
        super().__init__(binary, "-m", "orchard-random", "--ctx", "512", "--parallel", "4", "--threads", "2",
                         "--grace", "2", *extra,
                         log_prefix="orchard-store-serve-", env=dict(os.environ, ORCHARD_HOME=home))


def oa_chat(server, model, **kw):
    return server.openai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=4, temperature=0, **kw)


# --- the tests, in order (each builds on the store the ones before left) --------------------------------
def test_pull(s, ctx):
    # A path on the server's machine, streamed progress as Ollama sends it.
    statuses = [p.status for p in s.ollama.pull(ctx["second"], stream=True)]
    expect(statuses[-1] == "success" and any(st.startswith("pulling") for st in statuses), statuses)
    # An http URL whose first transfer is cut at 1 MB: an error, no name; the next pull resumes (Range).
    url = ctx["url"]
    expect_error(lambda: s.ollama.pull(url), 502, "stopped after 1000000", "resume")
    expect("remote:latest" not in [m.model for m in s.ollama.list().models], "a half file got a name")
    expect(s.ollama.pull(url).status == "success", "resumed pull")
    expect("GET bytes=1000000-" in open(ctx["range_log"]).read(), "no Range request resumed the pull")
    expect_error(lambda: s.ollama.pull("no-such-model"), 404, "no-such-model")


def test_create(s, ctx):
    r = s.ollama.create(model="brief", from_="tiny", system="Answer briefly.",
                        parameters={"num_predict": 3, "temperature": 0, "stop": ["\n\n"]})
    expect(r.status == "success", r)
    # Its SYSTEM starts the conversation: the same message makes a longer prompt than through 'tiny'.
    hi = [{"role": "user", "content": "Hi"}]
    with_system = s.ollama.chat(model="brief", messages=hi).prompt_eval_count
    without = s.ollama.chat(model="tiny", messages=hi, options={"num_predict": 1}).prompt_eval_count
    expect(with_system > without, f"prompt tokens: brief {with_system}, tiny {without}")
    status, text = s.http("POST", "/api/create",
                          {"model": "bad", "modelfile": "FROM tiny\nPARAMETER temperature 0\nFORM x\n",
                           "stream": False})
    expect(status == 400 and "modelfile:3:1: unknown instruction 'FORM'" in text, f"{status} {text}")
    status, text = s.http("POST", "/api/create",
                          {"model": "bad", "from": "tiny", "parameters": {"warmth": 1}, "stream": False})
    expect(status == 400 and "unknown parameter 'warmth'" in text, f"{status} {text}")
    expect_error(lambda: s.ollama.create(model="bad", from_="nothing:here"), 404, "nothing:here")


def test_list_and_show(s, ctx):
    names = [m.model for m in s.ollama.list().models]
    for want in ("orchard-random", "tiny:latest", "second:latest", "remote:latest", "brief:latest"):
        expect(want in names, f"{want} not listed: {names}")
    ids = [m.id for m in s.openai.models.list().data]
    expect(ids[0] == "orchard-random" and set(names) <= set(ids), f"openai models: {ids}")
    tiny = next(m for m in s.ollama.list().models if m.model == "tiny:latest")
    expect(tiny.size == ctx["size"] and tiny.details.quantization_level == "Q8_0", tiny)
    show = s.ollama.show("brief")
    expect(show.details.family == "llama" and show.details.parameter_size == "3.3M", show.details)
    expect("num_predict" in show.parameters and "temperature" in show.parameters, show.parameters)
    expect(show.modelinfo["llama.context_length"] == 2048, show.modelinfo)
    expect("SYSTEM Answer briefly." in show.modelfile, show.modelfile)
    expect_error(lambda: s.ollama.show("nope"), 404, "nope")


def test_interleaved(s, ctx):
    # Three stored models and the first one, requested at once from several threads, each answered by its own.
    results, errors = [], []

    def one(i):
        try:
            kind = i % 4
            if kind == 0:
                r = oa_chat(s, "tiny")
                results.append(("tiny:latest", r.model, r.usage.completion_tokens))
            elif kind == 1:
                r = s.ollama.chat(model="brief", messages=[{"role": "user", "content": "Hi"}])
                results.append(("brief:latest", r.model, r.eval_count))
            elif kind == 2:
                r = s.ollama.generate(model="second", prompt="Once", options={"num_predict": 5, "temperature": 0})
                results.append(("second:latest", r.model, r.eval_count))
            else:
                r = oa_chat(s, "orchard-random")
                results.append(("orchard-random", r.model, r.usage.completion_tokens))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, errors)
    expect(len(results) == 12, results)
    for want, got, n in results:
        expect(want.split(":")[0] == got.split(":")[0], f"asked {want}, answered by {got}")
        if want == "brief:latest":
            expect(n == 3, f"brief's num_predict 3 not applied: {n} tokens")
    loaded = s.loaded()
    for want in ("orchard-random", "tiny:latest", "brief:latest", "second:latest"):
        expect(want in loaded, f"{want} not loaded: {list(loaded)}")
    # The same greedy request to the same file under two names gives the same text (one engine each).
    a = oa_chat(s, "tiny").choices[0].message.content
    b = oa_chat(s, "second").choices[0].message.content
    expect(a == b, f"tiny {a!r} != second {b!r}")


def test_keep_alive(s, ctx):
    r = s.ollama.generate(model="tiny", keep_alive=0)
    expect(r.done_reason == "unload", r)
    expect("tiny:latest" not in s.loaded(), f"still loaded: {list(s.loaded())}")
    expect("second:latest" in s.loaded(), "another model went too")
    before = oa_chat(s, "tiny").choices[0].message.content  # reloaded on its first request
    expect("tiny:latest" in s.loaded(), "not reloaded")
    expect(before == oa_chat(s, "second").choices[0].message.content, "the reloaded model answers otherwise")
    # A request's own keep_alive: loaded for one second after it, then gone.
    s.ollama.generate(model="tiny", prompt="x", options={"num_predict": 1}, keep_alive="1s")
    expires = s.loaded()["tiny:latest"].expires_at
    expect(expires.timestamp() - time.time() < 5, f"expires at {expires}")
    deadline = time.time() + 10
    while "tiny:latest" in s.loaded() and time.time() < deadline:
        time.sleep(0.2)
    expect("tiny:latest" not in s.loaded(), "not unloaded after its keep_alive")
    # keep_alive 0 on a streamed request: answered whole, then unloaded.
    chunks = list(s.ollama.generate(model="second", prompt="Once", options={"num_predict": 4, "temperature": 0},
                                    keep_alive=0,
                                    stream=True))
    expect(chunks[-1].done and chunks[-1].eval_count == 4, chunks[-1])
    expect("second:latest" not in s.loaded(), f"still loaded: {list(s.loaded())}")
    r = s.ollama.generate(model="tiny", keep_alive=-1)
    expect(r.done_reason == "load" and s.loaded()["tiny:latest"].expires_at.year > 2200, s.loaded())
    expect_error(lambda: s.ollama.generate(model="tiny", prompt="x", keep_alive="soon"), 400, "keep_alive")
    out = subprocess.run([ctx["orchard"], "ps", "--host", s.base], capture_output=True, text=True, check=True).stdout
    expect("tiny:latest" in out and "Forever" in out and "orchard-random" in out, out)


def test_loading_does_not_block(s, ctx):
    # The real default model (98 MB) stored under another name: its first request hashes the file, maps it
    # and starts its engine; requests to a model already loaded are answered meanwhile.
    home = os.environ.get("ORCHARD_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "orchard")
    manifest = os.path.join(home, "models", "manifests", "smollm2", "135m-instruct-q4_1")
    if not os.path.exists(manifest):
        print("  (skipped: the default model is not in the store)")
        return
    digest = json.load(open(manifest))["layers"][0]["digest"].split(":")[1]
    status, text = s.http("POST", "/api/pull", {"model": os.path.join(home, "models", "blobs", "sha256-" + digest),
                                                "name": "big", "stream": False})
    expect(status == 200, f"{status} {text}")
    oa_chat(s, "tiny")
    big = {}

    def load_big():
        r = oa_chat(s, "big")
        big["done"] = time.time()
        big["model"] = r.model

    t = threading.Thread(target=load_big)
    t.start()
    time.sleep(0.1)
    oa_chat(s, "tiny")
    tiny_done = time.time()
    loading = "big:latest" not in s.loaded()
    t.join()
    expect(big.get("model") == "big:latest", big)
    expect(tiny_done < big["done"] and loading, f"tiny answered {big['done'] - tiny_done:.3f} s before big")
    s.ollama.generate(model="big", keep_alive=0)


def test_no_store_and_unwritable_store(s, ctx):
    # The store cannot be written (a file where its blobs go): 507 naming it, nothing named.
    blobs = os.path.join(ctx["home"], "models", "blobs")
    os.rename(blobs, blobs + ".away")
    open(blobs, "w").close()
    try:
        status, text = s.http("POST", "/api/pull", {"model": ctx["second"], "name": "nowhere", "stream": False})
        expect(status == 507 and "cannot" in text and "blobs" in text, f"{status} {text}")
    finally:
        os.remove(blobs)
        os.rename(blobs + ".away", blobs)
    expect("nowhere:latest" not in [m.model for m in s.ollama.list().models], "a name without its file")
    # --no-store: the first model alone.
    alone = Server(ctx["orchard"], ctx["home"], "--no-store")
    try:
        expect([m.id for m in alone.openai.models.list().data] == ["orchard-random"], "store models listed")
        expect_error(lambda: oa_chat(alone, "tiny"), 404, "tiny")
        status, text = alone.http("POST", "/api/create", {"model": "x", "from": "tiny", "stream": False})
        expect(status == 501 and "no model store" in text, f"{status} {text}")
    finally:
        alone.stop()


def test_copy_and_delete(s, ctx):
    expect(s.ollama.copy("tiny", "tiny2").status == "success", "copy")
    expect(oa_chat(s, "tiny2").model == "tiny2:latest", "the copy is not served")
    expect(s.ollama.delete("tiny2").status == "success", "delete")
    expect("tiny2:latest" not in [m.model for m in s.ollama.list().models], "deleted, still listed")
    expect_error(lambda: oa_chat(s, "tiny2"), 404, "tiny2")
    expect_error(lambda: s.ollama.delete("tiny2"), 404, "tiny2")
    expect_error(lambda: s.ollama.copy("nope", "x"), 404, "nope")
    expect_error(lambda: s.ollama.chat(model="nope", messages=[{"role": "user", "content": "x"}]), 404, "nope")
    expect_error(lambda: oa_chat(s, "nope"), 404, "nope")
    status, text = s.http("DELETE", "/api/delete", {})
    expect(status == 400 and "'model' is required" in text, f"{status} {text}")
    # The blob stays while a name is on it.
    expect(os.path.exists(os.path.join(ctx["home"], "models", "blobs", "sha256-" + ctx["sha"])), "blob removed")


def test_least_recently_used(ctx):
    # Room for the first model and one more: each new one unloads the one used least recently.
    s = Server(ctx["orchard"], ctx["home"], "--max-loaded-models", "2")
    try:
        oa_chat(s, "tiny")
        expect(set(s.loaded()) == {"orchard-random", "tiny:latest"}, list(s.loaded()))
        oa_chat(s, "second")
        expect(set(s.loaded()) == {"orchard-random", "second:latest"}, list(s.loaded()))
        oa_chat(s, "orchard-random")
        expect(set(s.loaded()) == {"orchard-random", "second:latest"}, "the first model is never unloaded")
    finally:
        s.stop()


TESTS = [test_pull, test_create, test_list_and_show, test_interleaved, test_keep_alive, test_loading_does_not_block,
         test_no_store_and_unwritable_store, test_copy_and_delete]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orchard", required=True, help="the orchard binary")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="orchard-store-e2e-")
    home = os.path.join(work, "home")
    env = dict(os.environ, ORCHARD_HOME=home)
    tiny = os.path.join(work, "tiny.gguf")
    subprocess.run([args.orchard, "convert", "orchard-random", "-o", tiny, "--type", "q8_0"], check=True,
                   capture_output=True, env=env)
    subprocess.run([args.orchard, "pull", tiny, "-q"], check=True, capture_output=True, env=env)
    second = os.path.join(work, "Second.gguf")
    shutil.copy(tiny, second)
    import hashlib
    sha = hashlib.sha256(open(tiny, "rb").read()).hexdigest()
    range_log = os.path.join(work, "range.log")
    port_file = os.path.join(work, "port")
    files = os.path.join(work, "files")
    os.makedirs(files)
    shutil.copy(tiny, os.path.join(files, "Remote.gguf"))
    ranger = subprocess.Popen([sys.executable, RANGE_SERVER, os.path.join(files, "Remote.gguf"), port_file,
                               range_log, "--cut-after", "1000000"])
    for _ in range(100):
        if os.path.exists(port_file):
            break
        time.sleep(0.05)
    ctx = {"orchard": args.orchard, "home": home, "second": second, "sha": sha, "size": os.path.getsize(tiny),
           "url": f"http://127.0.0.1:{open(port_file).read()}/models/Remote.gguf", "range_log": range_log}
    server = Server(args.orchard, home, "--keep-alive", "60")
    try:
        failed = run_tests([(test, (server, ctx)) for test in TESTS])  # test_copy_and_delete last
        server.stop()
        failed += run_tests([(test_least_recently_used, (ctx,))])  # its own servers
    finally:
        server.stop()
        ranger.kill()
    return finish(failed, [server], work)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""End-to-end test of issue 39's "done when": the official `ollama` and `openai` clients drive every route of
the issue against ONE `orchard serve` holding two generative models and one embedding model from its store,
with requests to all three interleaved from threads and models unloaded (keep_alive 0) and reloaded between.

The store (a temporary ORCHARD_HOME) holds:
  smollm2  the real default model (SmolLM2-135M-Instruct Q4_1), the model the server starts with (-m smollm2);
  tiny     orchard-random written as a 3.5 MB Q8_0 GGUF (a second generative model);
  minilm   all-MiniLM-L6-v2 written by `orchard convert` as llama.cpp's bert GGUF, pulled through /api/pull;
and, for a while, tiny uploaded again as a blob (POST /api/blobs) and created from it (create(files=...)).
Answers are checked, not only their shapes: embeddings against `orchard embed` on the same files (and MiniLM's
against the HF folder's within cosine 0.9999: the GGUF holds f16 matrices), greedy text against the same
request made alone.

Run by CTest: test_embed_store_e2e.py --orchard build/pie/orchard. Exit 0 pass, 1 fail, 77 skipped with a
one-line reason (the `ollama` or `openai` package, the default model or all-MiniLM-L6-v2 is absent).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    import ollama
    import openai
except ImportError as e:  # skip with the reason
    print(f"SKIP: {e.name} is not installed (pip install -r scripts/requirements-test.txt)")
    sys.exit(77)

from client_server import ClientServer, expect_error  # noqa: E402 - after the skip guard
from live_server import expect, finish, run_tests  # noqa: E402

TEXTS = ["why is the sky blue?", "Müller's café, 東京, and 3.75%!", "A man is eating food."]


def close(a, b, what, tol=1e-5):
    expect(len(a) == len(b), f"{what}: lengths {len(a)} and {len(b)}")
    worst = max(abs(x - y) for x, y in zip(a, b))
    expect(worst <= tol, f"{what}: differs by {worst} (more than {tol})")


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


class Server(ClientServer):
    def __init__(self, binary, home):
        super().__init__(binary, "-m", "smollm2", "--ctx", "1024", "--parallel", "4", "--threads", "2",
                         "--grace", "2", "--keep-alive", "60",
                         log_prefix="orchard-embed-store-", env=dict(os.environ, ORCHARD_HOME=home))


def direct_embeddings(orchard, model, env):
    """`orchard embed -m MODEL`: one JSON vector a line, for TEXTS."""
    out = subprocess.run([orchard, "embed", "-m", model, "--threads", "2"], input="\n".join(TEXTS) + "\n",
                         capture_output=True, text=True, check=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def oa_chat(s, model, content="Name a color.", **kw):
    return s.openai.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                            max_tokens=8, temperature=0, **kw)


# --- the tests, in order (each builds on the store the ones before left) --------------------------------
def test_pull_create_list_show(s, ctx):
    # /api/pull: the bert GGUF from a path, progress streamed as Ollama sends it.
    statuses = [p.status for p in s.ollama.pull(ctx["minilm_gguf"], stream=True)]
    expect(statuses[-1] == "success", statuses)
    # /api/create from a stored embedding model (the same blob under a second name), then /api/copy and
    # DELETE /api/delete of it.
    expect(s.ollama.create(model="minilm-copy", from_="minilm").status == "success", "create from minilm")
    expect(s.ollama.copy("minilm-copy", "minilm-third").status == "success", "copy")
    names = [m.model for m in s.ollama.list().models]
    for want in ("smollm2:latest", "tiny:latest", "minilm:latest", "minilm-copy:latest", "minilm-third:latest"):
        expect(want in names, f"{want} not listed: {names}")
    for gone in ("minilm-copy", "minilm-third"):
        expect(s.ollama.delete(gone).status == "success", f"delete {gone}")
    names = [m.model for m in s.ollama.list().models]
    expect("minilm-copy:latest" not in names and "minilm:latest" in names, names)
    ids = [m.id for m in s.openai.models.list().data]
    expect({"smollm2:latest", "tiny:latest", "minilm:latest"} <= set(ids), f"openai models: {ids}")
    # /api/tags and /api/show describe the embedding model as one.
    minilm = next(m for m in s.ollama.list().models if m.model == "minilm:latest")
    expect(minilm.details.family == "bert" and minilm.details.parameter_size == "22.6M", minilm.details)
    expect(minilm.size == os.path.getsize(ctx["minilm_gguf"]), (minilm.size, os.path.getsize(ctx["minilm_gguf"])))
    show = s.ollama.show("minilm")
    expect(list(show.capabilities) == ["embedding"], show.capabilities)
    info = show.modelinfo
    expect(info["general.architecture"] == "bert" and info["bert.embedding_length"] == 384
           and info["bert.pooling_type"] == "mean" and info["bert.block_count"] == 6, info)
    expect(s.ollama.show("tiny").details.family == "llama", "tiny's family")
    expect("completion" in s.ollama.show("smollm2").capabilities, "smollm2's capabilities")


def test_blob_upload_and_create_from_files(s, ctx):
    # The ollama client's create(files=...): the file uploaded as a blob (POST /api/blobs/sha256:<hex>, its
    # digest checked), then named; HEAD says whether a blob is stored.
    digest = s.ollama.create_blob(ctx["tiny"])
    head = urllib.request.Request(f"{s.base}/api/blobs/{digest}", method="HEAD")
    with urllib.request.urlopen(head, timeout=30) as r:
        expect(r.status == 200, f"HEAD {r.status}")
    expect(s.ollama.create(model="uploaded", files={"tiny.gguf": digest}).status == "success", "create from files")
    alone = s.ollama.generate(model="tiny", prompt="Once", options={"num_predict": 4, "temperature": 0}).response
    got = s.ollama.generate(model="uploaded", prompt="Once", options={"num_predict": 4, "temperature": 0})
    expect(got.response == alone and got.model == "uploaded:latest", f"{got.model}: {got.response!r} != {alone!r}")
    expect(s.ollama.delete("uploaded").status == "success", "delete uploaded")
    # Bad input: a body whose sha256 is not its digest, a digest of another form, a blob never uploaded.
    wrong = "sha256:" + "0" * 64
    status, text = s.http_raw("POST", f"/api/blobs/{wrong}", b"not the bytes of that digest")
    expect(status == 400 and "nothing stored" in text and wrong in text, f"{status} {text}")
    status, text = s.http_raw("POST", "/api/blobs/md5:abc", b"x")
    expect(status == 400 and "not a blob digest" in text, f"{status} {text}")
    try:
        urllib.request.urlopen(urllib.request.Request(f"{s.base}/api/blobs/{wrong}", method="HEAD"), timeout=30)
        raise AssertionError("HEAD of a blob never uploaded answered 200")
    except urllib.error.HTTPError as e:
        expect(e.code == 404, f"HEAD {e.code}")
    expect_error(lambda: s.ollama.create(model="x", files={"a.gguf": wrong}), 400, "not on the server")
    expect_error(lambda: s.ollama.create(model="x", from_="tiny", quantize="q4_K_M"), 400, "quantize")


def test_embeddings_match_the_direct_embedder(s, ctx):
    ref = ctx["ref"]
    # OpenAI /v1/embeddings, Ollama /api/embed and the older /api/embeddings, each against `orchard embed` on
    # the GGUF file; that file's vectors against the HF folder's (f16 matrices: within cosine 0.9999).
    for i, (v, f) in enumerate(zip(ref["minilm"], ref["minilm_folder"])):
        expect(cosine(v, f) >= 0.9999, f"the GGUF's vector #{i} against the folder's: cosine {cosine(v, f)}")
    r = s.openai.embeddings.create(model="minilm", input=TEXTS)
    expect(r.model == "minilm:latest" and r.usage.prompt_tokens > len(TEXTS), (r.model, r.usage))
    for i, d in enumerate(r.data):
        close(d.embedding, ref["minilm"][i], f"/v1/embeddings minilm #{i}")
    e = s.ollama.embed(model="minilm", input=TEXTS)
    for i, v in enumerate(e.embeddings):
        close(v, ref["minilm"][i], f"/api/embed minilm #{i}")
    legacy = s.ollama.embeddings(model="minilm", prompt=TEXTS[1])
    close(legacy.embedding, ref["minilm"][1], "/api/embeddings minilm")
    cut = s.openai.embeddings.create(model="minilm", input=TEXTS[0], dimensions=64).data[0].embedding
    expect(len(cut) == 64 and abs(sum(x * x for x in cut) - 1) < 1e-4, "dimensions 64 renormalized")
    expect(cosine(cut, ref["minilm"][0][:64]) > 0.99999, "dimensions keep the first values")
    # The generative models' hidden states (last token, normalized), as `orchard embed` gives them.
    for name, key in (("tiny", "tiny"), ("smollm2", "smollm2")):
        got = s.openai.embeddings.create(model=name, input=TEXTS).data
        for i, d in enumerate(got):
            close(d.embedding, ref[key][i], f"/v1/embeddings {name} #{i}", tol=1e-4)
    # Bad input: an unknown name (404 naming it), generation asked of the embedding model (400 naming it).
    expect_error(lambda: s.openai.embeddings.create(model="nope", input="x"), 404, "nope")
    expect_error(lambda: s.ollama.embed(model="nope", input="x"), 404, "nope")
    expect_error(lambda: oa_chat(s, "minilm"), 400, "minilm:latest", "is an embedding model")
    expect_error(lambda: s.openai.completions.create(model="minilm", prompt="x", max_tokens=2), 400,
                 "is an embedding model")
    expect_error(lambda: s.ollama.chat(model="minilm", messages=[{"role": "user", "content": "x"}]), 400,
                 "is an embedding model")
    expect_error(lambda: s.ollama.generate(model="minilm", prompt="x"), 400, "is an embedding model")


def test_interleaved_with_unload_and_reload(s, ctx):
    ref = ctx["ref"]
    alone = {"smollm2": oa_chat(s, "smollm2").choices[0].message.content,
             "tiny": s.ollama.generate(model="tiny", prompt="Once", options={"num_predict": 6, "temperature": 0}).response,
             "tiny-completion": s.openai.completions.create(model="tiny", prompt="Once upon", max_tokens=5,
                                                            temperature=0).choices[0].text}
    results, errors = [], []

    def one(i):
        try:
            kind = i % 6
            if kind == 0:
                results.append(("smollm2", oa_chat(s, "smollm2").choices[0].message.content))
            elif kind == 1:
                r = s.ollama.generate(model="tiny", prompt="Once", options={"num_predict": 6, "temperature": 0})
                results.append(("tiny", r.response))
            elif kind == 2:
                r = s.openai.embeddings.create(model="minilm", input=TEXTS)
                results.append(("minilm", [d.embedding for d in r.data]))
            elif kind == 3:
                r = s.ollama.chat(model="smollm2", messages=[{"role": "user", "content": "Name a color."}],
                                  options={"num_predict": 8, "temperature": 0})
                results.append(("smollm2-ollama", r.message.content))
            elif kind == 4:
                results.append(("minilm", s.ollama.embed(model="minilm", input=TEXTS).embeddings))
            else:
                r = s.openai.completions.create(model="tiny", prompt="Once upon", max_tokens=5, temperature=0)
                results.append(("tiny-completion", r.choices[0].text))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def round_of(n):
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    round_of(12)
    loaded = s.loaded()
    for want in ("smollm2:latest", "tiny:latest", "minilm:latest"):
        expect(any(k.startswith(want.split(":")[0]) for k in loaded), f"{want} not loaded: {list(loaded)}")
    # /api/ps describes the loaded embedding model.
    minilm = loaded["minilm:latest"]
    expect(minilm.details.family == "bert" and minilm.size == os.path.getsize(ctx["minilm_gguf"]), minilm)
    # Unloaded with keep_alive 0 (an embed request's, and a generate with nothing to generate), then reloaded
    # by the next round's requests.
    e = s.ollama.embed(model="minilm", input=TEXTS[0], keep_alive=0)
    close(e.embeddings[0], ref["minilm"][0], "the keep_alive 0 request's answer")
    expect(s.ollama.generate(model="tiny", keep_alive=0).done_reason == "unload", "tiny unload")
    loaded = s.loaded()
    expect("minilm:latest" not in loaded and "tiny:latest" not in loaded, f"still loaded: {list(loaded)}")
    round_of(12)
    loaded = s.loaded()
    expect("minilm:latest" in loaded and "tiny:latest" in loaded, f"not reloaded: {list(loaded)}")
    expect(not errors, errors)
    expect(len(results) == 24, f"{len(results)} answers")
    for kind, got in results:
        if kind == "minilm":
            for i, v in enumerate(got):
                close(v, ref["minilm"][i], f"interleaved minilm #{i}")
        elif kind == "smollm2-ollama":
            expect(got == alone["smollm2"], f"ollama chat {got!r} != {alone['smollm2']!r}")
        else:
            expect(got == alone[kind], f"{kind}: {got!r} != {alone[kind]!r}")


TESTS = [test_pull_create_list_show, test_blob_upload_and_create_from_files, test_embeddings_match_the_direct_embedder,
         test_interleaved_with_unload_and_reload]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orchard", required=True, help="the orchard binary")
    args = ap.parse_args()
    real_home = os.environ.get("ORCHARD_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "orchard")
    manifest = os.path.join(real_home, "models", "manifests", "smollm2", "135m-instruct-q4_1")
    folder = os.path.join(real_home, "folders", "all-minilm-l6-v2")
    if not os.path.exists(manifest):
        print(f"SKIP: the default model is not in the store ({manifest}; run scripts/setup.sh)")
        return 77
    if not os.path.exists(os.path.join(folder, ".source")):
        print(f"SKIP: all-MiniLM-L6-v2 is absent ({folder}; run scripts/fetch-models.sh)")
        return 77
    digest = json.load(open(manifest))["layers"][0]["digest"].split(":")[1]
    smollm2_blob = os.path.join(real_home, "models", "blobs", "sha256-" + digest)
    work = tempfile.mkdtemp(prefix="orchard-embed-store-e2e-")
    home = os.path.join(work, "home")
    env = dict(os.environ, ORCHARD_HOME=home)
    start = time.time()
    tiny = os.path.join(work, "tiny.gguf")
    minilm_gguf = os.path.join(work, "minilm.gguf")
    subprocess.run([args.orchard, "convert", "orchard-random", "-o", tiny, "--type", "q8_0"], check=True,
                   capture_output=True, env=env)
    subprocess.run([args.orchard, "convert", folder, "-o", minilm_gguf], check=True, capture_output=True, env=env)
    subprocess.run([args.orchard, "pull", tiny, "-q"], check=True, capture_output=True, env=env)
    subprocess.run([args.orchard, "pull", smollm2_blob, "--name", "smollm2", "-q"], check=True, capture_output=True,
                   env=env)
    ref = {"minilm": direct_embeddings(args.orchard, minilm_gguf, env),
           "minilm_folder": direct_embeddings(args.orchard, folder, env),
           "tiny": direct_embeddings(args.orchard, tiny, env),
           "smollm2": direct_embeddings(args.orchard, smollm2_blob, env)}
    print(f"set-up ({time.time() - start:.1f} s)", flush=True)
    ctx = {"orchard": args.orchard, "home": home, "minilm_gguf": minilm_gguf, "tiny": tiny, "ref": ref}
    server = Server(args.orchard, home)
    try:
        failed = run_tests([(test, (server, ctx)) for test in TESTS])
    finally:
        server.stop()
    return finish(failed, [server], work)


if __name__ == "__main__":
    sys.exit(main())

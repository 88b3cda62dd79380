#!/usr/bin/env python3
"""Reference token ids from the Hugging Face `tokenizers` library and from `tiktoken`.

usage: hf_reference.py --data SHARED_DATA --tokenizer NAME --out IDS.txt

NAME is one of
  llama2, phi-3, phi-2, falcon-tokenizer   tokenizers/hf/NAME.tokenizer.json through Hugging Face tokenizers
  llama3-tiktoken                          Llama 3 (tokenizers/llama3) through tiktoken
  llama3-hf                                Llama 3 through Hugging Face tokenizers (built offline, as
                                           Meta's tokenizer.json: the regex split, byte-level, ignore_merges)
The texts are the 46 strings of the llama.cpp tokenizer vectors (ggml-vocab-llama-spm.gguf.inp, split on
"\\n__ggml_vocab_test__\\n", the last, empty piece dropped) and then corpus/war-and-peace.txt. IDS.txt gets
one line per text: its ids, space-separated. No BOS/EOS is added (add_special_tokens=False): the
comparison is about the text, and Orchard's encode adds none by default either. Special-token text is
left as plain text for tiktoken (disallowed_special=()); none of the texts holds any.

Exit status 77 when a needed Python package is missing (the C++ test then skips).
Used by tests/tokenizers/hf_conformance.cpp and tests/bench/peers/tokenizer_peers.py.
"""
import argparse
import json
import os
import sys

VECTOR_SEPARATOR = "\n__ggml_vocab_test__\n"
HF_NAMES = ("llama2", "phi-3", "phi-2", "falcon-tokenizer")

# Llama 3's pre-tokenizer (see the shared data README).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_special_tokens():
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    names += [f"<|reserved_special_token_{n}|>" for n in range(3, 248)]
    assert len(names) == 256
    return {name: 128000 + i for i, name in enumerate(names)}


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_llama3_encoder(folder):
    with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
        return json.load(f)


def load_llama3_merges(folder):
    merges = []
    with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            a, b = line.split(" ")
            merges.append((a, b))
    return merges


def llama3_tiktoken(folder):
    import tiktoken
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes(decoder[c] for c in token): rank for token, rank in load_llama3_encoder(folder).items()}
    return tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                             special_tokens=llama3_special_tokens())


def llama3_hf(folder):
    """A Hugging Face tokenizer equal to Meta's Llama 3 tokenizer.json, built from encoder.json/vocab.bpe."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    bpe = models.BPE(vocab=load_llama3_encoder(folder), merges=load_llama3_merges(folder),
                     ignore_merges=True)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False)
                            for name, _ in sorted(llama3_special_tokens().items(), key=lambda kv: kv[1])])
    return tok


def load_hf_json(path):
    """Loads a tokenizer.json. Merges written as one string with more than one space (llama2's "   ",
    which today's `tokenizers` refuses to parse) are split at the space that leaves two vocabulary tokens;
    such merges only involve raw spaces, which the llama2 normalizer never leaves in text."""
    from tokenizers import Tokenizer
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    model = spec.get("model", {})
    if isinstance(model.get("merges"), list):
        vocab = model.get("vocab", {})
        fixed = []
        for m in model["merges"]:
            if isinstance(m, str) and len(m.split(" ")) != 2:
                fixed += [[m[:i], m[i + 1:]] for i in range(len(m))
                          if m[i] == " " and m[:i] in vocab and m[i + 1:] in vocab]
            elif isinstance(m, str):
                fixed.append(m.split(" "))
            else:
                fixed.append(m)
        model["merges"] = fixed
    return Tokenizer.from_str(json.dumps(spec))


def texts(data):
    with open(os.path.join(data, "tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8",
              newline="") as f:
        vectors = f.read().split(VECTOR_SEPARATOR)
    if vectors and vectors[-1] == "":
        vectors.pop()
    with open(os.path.join(data, "corpus/war-and-peace.txt"), encoding="utf-8", newline="") as f:
        corpus = f.read()
    return vectors + [corpus]


def encoder_for(name, data):
    """A function text -> list of ids."""
    if name in HF_NAMES:
        tok = load_hf_json(os.path.join(data, f"tokenizers/hf/{name}.tokenizer.json"))
        return lambda text: tok.encode(text, add_special_tokens=False).ids
    if name == "llama3-tiktoken":
        enc = llama3_tiktoken(os.path.join(data, "tokenizers/llama3"))
        return lambda text: enc.encode(text, disallowed_special=())
    if name == "llama3-hf":
        tok = llama3_hf(os.path.join(data, "tokenizers/llama3"))
        return lambda text: tok.encode(text, add_special_tokens=False).ids
    raise SystemExit(f"hf_reference.py: unknown tokenizer {name!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        encode = encoder_for(args.tokenizer, args.data)
    except ImportError as e:
        print(f"hf_reference.py: {e}", file=sys.stderr)
        sys.exit(77)
    with open(args.out, "w", encoding="ascii") as f:
        for text in texts(args.data):
            f.write(" ".join(map(str, encode(text))) + "\n")


if __name__ == "__main__":
    main()

"""The Llama 3.1 vocabulary built offline from ../shared/data/tokenizers/llama3, for the grammar peers.

One construction shared by grammar_peers.py and maskbench_peers.py, so every peer (and the text
tokenization) sees the same 128,256 tokens: the 128,000 byte-level tokens of encoder.json (GPT-2
byte-to-unicode) followed by the 256 special tokens (../shared/data/README.md, "Llama 3 special tokens").
"""
import json
import os

N_VOCAB = 128256
N_REGULAR = 128000
EOS_IDS = [128001, 128008, 128009]  # <|end_of_text|>, <|eom_id|>, <|eot_id|>

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def default_tokenizer_dir():
    shared = os.environ.get("ORCHARD_SHARED_DATA") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "data")
    return os.path.normpath(os.path.join(shared, "tokenizers", "llama3"))


def encoder_path(path):
    """encoder.json itself, or the folder holding it."""
    return os.path.join(path, "encoder.json") if os.path.isdir(path) else path


def _byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def special_token_names():
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    return [named[i] if i < len(named) else f"<|reserved_special_token_{i - 8}|>" for i in range(256)]


def llama3_tokens(path):
    """(tokens, eos_ids): tokens[i] is the bytes of token i (special tokens as their names)."""
    u2b = _byte_decoder()
    with open(encoder_path(path), encoding="utf-8") as f:
        enc = json.load(f)
    if len(enc) != N_REGULAR:
        raise ValueError(f"{encoder_path(path)}: expected {N_REGULAR} tokens, got {len(enc)}")
    tokens = [b""] * N_VOCAB
    for text, i in enc.items():
        tokens[i] = bytes(u2b[ch] for ch in text)
    for i, name in enumerate(special_token_names()):
        tokens[N_REGULAR + i] = name.encode()
    return tokens, list(EOS_IDS)


def tiktoken_encoding(tokens):
    """The Llama 3 tokenizer itself (Meta ships it as a tiktoken model: rank = id)."""
    import tiktoken

    return tiktoken.Encoding(
        name="llama3", pat_str=LLAMA3_PATTERN,
        mergeable_ranks={tokens[i]: i for i in range(N_REGULAR)},
        special_tokens={tokens[i].decode(): i for i in range(N_REGULAR, N_VOCAB)})


def llguidance_tokenizer(tokens, eos):
    from llguidance import LLTokenizer

    return LLTokenizer.from_tiktoken(
        encoder={tokens[i]: i for i in range(N_REGULAR)},
        special_tokens={tokens[i].decode(): i for i in range(N_REGULAR, N_VOCAB)},
        pattern=LLAMA3_PATTERN, eos_token=eos[0], n_vocab=len(tokens))


def xgrammar_tokenizer_info(tokens, eos):
    import xgrammar as xgr

    return xgr.TokenizerInfo(list(tokens), vocab_type=xgr.VocabType.RAW, vocab_size=len(tokens),
                             stop_token_ids=list(eos), add_prefix_space=False)

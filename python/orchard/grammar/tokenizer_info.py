"""TokenizerInfo: the vocabulary a grammar is compiled against (token id -> the bytes it produces, special
and stop ids, the model's logits rows), from a Hugging Face tokenizer, a GGUF or other tokenizer file Orchard
reads, or a plain list of token strings, as XGrammar's TokenizerInfo takes them."""
import enum
import json

from orchard import _orchard


class VocabType(enum.Enum):
    """How the token strings of a vocabulary spell their bytes (XGrammar's names)."""
    RAW = 0            # the strings (or bytes) are the tokens' bytes (tiktoken vocabularies)
    BYTE_FALLBACK = 1  # SentencePiece: "▁" is a space, "<0x0A>" a byte (Llama 2, Mistral, Phi-3)
    BYTE_LEVEL = 2     # GPT-2 byte-to-unicode: "Ġthe" is " the" (Llama 3, Qwen2, GPT-2)


# End-of-sequence token names, for vocabularies given without stop_token_ids.
_STOP_NAMES = ("</s>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>",
               "<end_of_turn>", "<eos>", "<|eos|>")


def _byte_level_table():
    """str.translate table of GPT-2's byte-to-unicode map: each printable stand-in -> chr(byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {c: chr(b) for b, c in zip(bs, cs)}


_BYTE_LEVEL = _byte_level_table()


def _decode_token(token, vocab_type):
    """The bytes a token string of `vocab_type` stands for."""
    if isinstance(token, bytes):
        return token
    if not isinstance(token, str):
        raise TypeError(f"TokenizerInfo: a token must be str or bytes, got {type(token).__name__}")
    if vocab_type is VocabType.BYTE_LEVEL:
        try:
            return token.translate(_BYTE_LEVEL).encode("latin-1")
        except UnicodeEncodeError:
            return token.encode()  # not in the byte-level alphabet: an added token's plain text
    if vocab_type is VocabType.BYTE_FALLBACK:
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            try:
                return bytes([int(token[3:5], 16)])
            except ValueError:
                pass
        return token.replace("\u2581", " ").encode()
    return token.encode()


def _id_list(ids, what):
    if ids is None:
        return None
    if isinstance(ids, int):
        ids = [ids]
    out = []
    for i in ids:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"TokenizerInfo: {what} must be token ids (int), got {i!r}")
        out.append(int(i))
    return out


class TokenizerInfo:
    """The vocabulary a grammar compiles against.

    TokenizerInfo(encoded_vocab, vocab_type=VocabType.RAW, *, vocab_size=None, stop_token_ids=None,
                  add_prefix_space=False, special_token_ids=None)

    encoded_vocab[i] is token i as the tokenizer stores it (str, spelled per vocab_type, or its raw bytes);
    vocab_size is the model's logits rows (default: len(encoded_vocab); a larger one pads rows that are never
    allowed; a smaller one is a ValueError). stop_token_ids end the output (default: the tokens named like
    an end of sequence, e.g. "</s>", "<|eot_id|>"); special_token_ids are never text (allowed only where a
    grammar names them). Stop ids are special too.
    """

    def __init__(self, encoded_vocab, vocab_type=VocabType.RAW, *, vocab_size=None, stop_token_ids=None,
                 add_prefix_space=False, special_token_ids=None):
        if not isinstance(vocab_type, VocabType):
            raise TypeError(f"TokenizerInfo: vocab_type must be a VocabType, got {vocab_type!r}")
        if isinstance(encoded_vocab, (str, bytes)) or not hasattr(encoded_vocab, "__len__"):
            raise TypeError("TokenizerInfo: encoded_vocab must be a list of token strings or bytes")
        tokens = [_decode_token(t, vocab_type) for t in encoded_vocab]
        stop = _id_list(stop_token_ids, "stop_token_ids")
        if stop is None:
            stop = [i for i, t in enumerate(encoded_vocab) if (t.decode(errors="replace") if isinstance(t, bytes) else t)
                    in _STOP_NAMES]
        special = sorted(set(_id_list(special_token_ids, "special_token_ids") or []) | set(stop))
        self._init(_orchard.Vocabulary(tokens, special, stop, self._rows(vocab_size, len(tokens))), vocab_type,
                   add_prefix_space)

    @staticmethod
    def _rows(vocab_size, n_tokens):
        if vocab_size is None:
            return n_tokens
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size <= 0:
            raise ValueError(f"TokenizerInfo: vocab_size must be a positive int, got {vocab_size!r}")
        if vocab_size < n_tokens:
            raise ValueError(f"TokenizerInfo: vocab_size {vocab_size} is smaller than the tokenizer's {n_tokens} "
                             f"tokens (vocab_size is the model's logits rows, at least the tokenizer's size)")
        return vocab_size

    def _init(self, native, vocab_type, add_prefix_space):
        self._vocab = native
        self._vocab_type = vocab_type
        self._add_prefix_space = bool(add_prefix_space)

    @classmethod
    def _from_native(cls, native, vocab_type=VocabType.RAW, add_prefix_space=False):
        self = cls.__new__(cls)
        self._init(native, vocab_type, add_prefix_space)
        return self

    @classmethod
    def from_vocab(cls, encoded_vocab, vocab_type=VocabType.RAW, *, vocab_size=None, stop_token_ids=None,
                   add_prefix_space=False, special_token_ids=None):
        """The same as the constructor."""
        return cls(encoded_vocab, vocab_type, vocab_size=vocab_size, stop_token_ids=stop_token_ids,
                   add_prefix_space=add_prefix_space, special_token_ids=special_token_ids)

    @classmethod
    def from_gguf(cls, path, *, vocab_size=None):
        """The vocabulary of a tokenizer file as Orchard's engine builds it: a .gguf (a whole model or
        vocab-only), and also a Hugging Face tokenizer.json, a llama2.c tokenizer.bin, or a folder with
        encoder.json + vocab.bpe. Stop ids: the tokenizer's end-of-generation tokens. Raises TokenizerError
        for a file it cannot read, ValueError for a vocab_size smaller than the tokenizer."""
        tok = _orchard.Tokenizer.load(str(path))
        rows = cls._rows(vocab_size, tok.vocab_size)
        return cls._from_native(_orchard.Vocabulary.from_tokenizer(tok, rows))

    @classmethod
    def from_huggingface(cls, tokenizer, *, vocab_size=None, stop_token_ids=None):
        """From a transformers tokenizer (fast or slow). vocab_size: the model's logits rows
        (model.config.vocab_size; default the tokenizer's size). stop_token_ids: default the tokenizer's
        eos_token_id. Special tokens: its special ids and its added tokens marked special."""
        vocab = tokenizer.get_vocab()
        n = max(vocab.values()) + 1 if vocab else 0
        encoded = [""] * n
        for text, i in vocab.items():
            encoded[i] = text
        backend = getattr(tokenizer, "backend_tokenizer", None)
        spec = json.loads(backend.to_str()) if backend is not None else None
        vocab_type = _detect_vocab_type(tokenizer, spec, vocab)
        tokens = [_decode_token(t, vocab_type) for t in encoded]
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        for i, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
            if i < n:
                tokens[i] = added.content.encode()  # added tokens are plain text, not in the vocabulary's spelling
                if getattr(added, "special", False):
                    special.add(i)
        stop = _id_list(stop_token_ids, "stop_token_ids")
        if stop is None:
            eos = getattr(tokenizer, "eos_token_id", None)
            stop = [] if eos is None else _id_list(eos, "eos_token_id")
        special |= set(stop)
        native = _orchard.Vocabulary(tokens, sorted(i for i in special if 0 <= i < n), stop, cls._rows(vocab_size, n))
        return cls._from_native(native, vocab_type, _add_prefix_space(tokenizer, spec))

    @property
    def vocab_size(self):
        """The logits rows (>= the tokenizer's tokens)."""
        return self._vocab.n_rows

    @property
    def vocab_type(self):
        return self._vocab_type

    @property
    def add_prefix_space(self):
        return self._add_prefix_space

    @property
    def stop_token_ids(self):
        return list(self._vocab.eos_ids)

    @property
    def special_token_ids(self):
        return list(self._vocab.special_ids)

    @property
    def decoded_vocab(self):
        """The bytes of each token (special tokens: their names), by id."""
        return [self._vocab.token_bytes(i) for i in range(self._vocab.n_tokens)]

    def __repr__(self):
        return (f"TokenizerInfo(vocab_size={self.vocab_size}, vocab_type={self._vocab_type.name}, "
                f"stop_token_ids={self.stop_token_ids})")


def _detect_vocab_type(tokenizer, spec, vocab):
    """The spelling, from a fast tokenizer's decoder (spec: its tokenizer.json), else from the slow one."""
    if spec is not None:
        decoder = spec.get("decoder") or {}
        kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", []) or []}
        if "ByteLevel" in kinds:
            return VocabType.BYTE_LEVEL
        if "ByteFallback" in kinds or "Metaspace" in kinds or any(
                d.get("type") == "Replace" and (d.get("pattern") or {}).get("String") == "\u2581"
                for d in decoder.get("decoders", []) or []):
            return VocabType.BYTE_FALLBACK
        return VocabType.RAW
    if getattr(tokenizer, "sp_model", None) is not None:
        return VocabType.BYTE_FALLBACK
    # A slow tokenizer without a model file: GPT-2's spelling shows in its space-led tokens.
    spelled = sum(1 for t in vocab if t.startswith("\u0120"))
    return VocabType.BYTE_LEVEL if spelled > len(vocab) // 20 else VocabType.RAW


def _add_prefix_space(tokenizer, spec):
    if spec is None:
        return bool(getattr(tokenizer, "add_prefix_space", False))
    pre = spec.get("pre_tokenizer") or {}
    return bool(pre.get("add_prefix_space", False)) or pre.get("prepend_scheme") in ("always", "first")

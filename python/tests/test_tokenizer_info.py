"""TokenizerInfo: from a plain vocabulary (each spelling), from a tokenizer file, from a Hugging Face
tokenizer; its properties and its errors."""
import json

import pytest

import orchard
import orchard.grammar as xgr
from conftest import SMALL_TEXT, shared_path


def test_raw_vocabulary(small_info):
    assert small_info.vocab_size == len(SMALL_TEXT) + 2
    assert small_info.vocab_type is xgr.VocabType.RAW
    assert small_info.stop_token_ids == [len(SMALL_TEXT) + 1]
    assert small_info.special_token_ids == [len(SMALL_TEXT), len(SMALL_TEXT) + 1]
    assert small_info.decoded_vocab[:3] == [b" ", b"!", b'"']


def test_byte_level_and_byte_fallback_spellings():
    bl = xgr.TokenizerInfo(["\u0120the", "\u010a", "a"], xgr.VocabType.BYTE_LEVEL, stop_token_ids=[])
    assert bl.decoded_vocab == [b" the", b"\n", b"a"]
    bf = xgr.TokenizerInfo(["\u2581the", "<0x0A>", "<0xE2>", "</s>"], xgr.VocabType.BYTE_FALLBACK)
    assert bf.decoded_vocab[:3] == [b" the", b"\n", b"\xe2"]
    assert bf.stop_token_ids == [3]  # found by its name
    assert xgr.TokenizerInfo.from_vocab([b"\xff", "x"], stop_token_ids=1).decoded_vocab == [b"\xff", b"x"]


def test_vocab_size_pads_rows():
    info = xgr.TokenizerInfo(["a", "b", "</s>"], vocab_size=64)
    assert info.vocab_size == 64
    assert xgr.get_bitmask_shape(1, info.vocab_size) == (1, 2)


def test_vocab_size_smaller_than_the_tokenizer_is_an_error():
    with pytest.raises(ValueError, match="smaller than the tokenizer's 3 tokens"):
        xgr.TokenizerInfo(["a", "b", "</s>"], vocab_size=2)
    with pytest.raises(ValueError, match="positive int"):
        xgr.TokenizerInfo(["a"], vocab_size=0)


def test_bad_arguments():
    with pytest.raises(TypeError, match="VocabType"):
        xgr.TokenizerInfo(["a"], vocab_type="raw")
    with pytest.raises(TypeError, match="list of token strings"):
        xgr.TokenizerInfo("abc")
    with pytest.raises(TypeError, match="str or bytes"):
        xgr.TokenizerInfo(["a", 3])
    with pytest.raises(TypeError, match="token ids"):
        xgr.TokenizerInfo(["a"], stop_token_ids=["a"])
    with pytest.raises(ValueError):  # a stop id out of range (native check)
        xgr.TokenizerInfo(["a"], stop_token_ids=[5])


def test_from_gguf():
    path = shared_path("tokenizers", "llama.cpp", "ggml-vocab-gpt-2.gguf")
    info = xgr.TokenizerInfo.from_gguf(path)
    assert info.vocab_size == 50257
    assert info.decoded_vocab[262] == b" the"  # GPT-2's id of " the"
    assert xgr.TokenizerInfo.from_gguf(path, vocab_size=50304).vocab_size == 50304
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        xgr.TokenizerInfo.from_gguf(path, vocab_size=100)


def test_from_gguf_missing_file():
    with pytest.raises(orchard.TokenizerError):
        xgr.TokenizerInfo.from_gguf("/nonexistent/tokenizer.gguf")


class _HfLike:
    """The parts of a transformers fast tokenizer that from_huggingface reads, over a `tokenizers`
    Tokenizer (transformers itself is not needed for this test)."""

    def __init__(self, path):
        from tokenizers import Tokenizer
        self.backend_tokenizer = Tokenizer.from_file(path)
        spec = json.load(open(path, encoding="utf-8"))
        added = spec.get("added_tokens", [])

        class Added:
            def __init__(self, a):
                self.content, self.special = a["content"], a["special"]

        self.added_tokens_decoder = {a["id"]: Added(a) for a in added}
        self.all_special_ids = [a["id"] for a in added if a["special"]]
        self.eos_token_id = self.all_special_ids[-1] if self.all_special_ids else None

    def get_vocab(self):
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)


@pytest.mark.parametrize("name, vocab_type", [("phi-2", xgr.VocabType.BYTE_LEVEL),
                                              ("phi-3", xgr.VocabType.BYTE_FALLBACK)])
def test_from_huggingface_matches_orchards_own_reading(name, vocab_type):
    pytest.importorskip("tokenizers")
    path = shared_path("tokenizers", "hf", f"{name}.tokenizer.json")
    hf = xgr.TokenizerInfo.from_huggingface(_HfLike(path))
    ours = xgr.TokenizerInfo.from_gguf(path)  # Orchard's own tokenizer.json reader
    assert hf.vocab_type is vocab_type
    assert hf.vocab_size == ours.vocab_size
    special = set(hf.special_token_ids)
    mine, theirs = hf.decoded_vocab, ours.decoded_vocab
    different = [i for i in range(hf.vocab_size) if i not in special and mine[i] != theirs[i]]
    assert different == [], f"token bytes differ at ids {different[:10]}"
    with pytest.raises(ValueError, match="smaller"):
        xgr.TokenizerInfo.from_huggingface(_HfLike(path), vocab_size=10)

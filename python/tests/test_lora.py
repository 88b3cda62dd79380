"""LoRA adapters through orchard.Engine: attach (a PEFT folder made by transformers + PEFT, committed with the
C++ tests), select per request (a name, names, {name: scale}), detach, and each error. The llama test model
(tests/pie/runner/models/llama) gets a byte-level tokenizer of its 256 tokens, as the C++ LoRA tests give it."""
import json
import os
import shutil

import pytest

import orchard

from conftest import REPO

MODEL = os.path.join(REPO, "tests", "pie", "runner", "models", "llama")
ADAPTERS = os.path.join(REPO, "tests", "pie", "lora", "adapters", "llama")


def byte_level_tokenizer():
    """tokenizer.json of a byte-level BPE whose 256 tokens are the bytes, without merges (GPT-2's byte map)."""
    vocab, extra = {}, 0
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
        cp = b if printable else 256 + extra
        extra += 0 if printable else 1
        vocab[chr(cp)] = b
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "pre_tokenizer": level, "decoder": level,
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora-model")
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(MODEL, f), folder / f)
    (folder / "tokenizer.json").write_text(json.dumps(byte_level_tokenizer()))
    e = orchard.load(str(folder), threads=1, context_length=128)
    yield e
    e.close()


def greedy(engine, **kw):
    return engine.generate(prompt=[3, 17, 42, 99, 5], max_tokens=12, temperature=0, **kw)


def test_attach_select_stack_and_detach(engine):
    base = greedy(engine)
    info = engine.attach_lora("a", os.path.join(ADAPTERS, "a"))
    assert info["name"] == "a" and info["rank"] == 4 and info["bytes"] > 0
    engine.attach_lora("b", os.path.join(ADAPTERS, "b"))
    assert sorted(l["name"] for l in engine.loras) == ["a", "b"]
    assert greedy(engine).text == base.text  # attached, not selected: the base alone
    with_a = greedy(engine, lora="a")
    assert with_a.text != base.text
    assert greedy(engine, lora=["a"]).text == with_a.text
    assert greedy(engine, lora={"a": 1.0}).text == with_a.text
    assert greedy(engine, lora={"a": 0.0}).text == base.text  # scale 0 adds nothing
    stacked = greedy(engine, lora={"a": 1.0, "b": 0.5})
    assert stacked.text not in (base.text, with_a.text)
    batch = engine.generate(prompt=[[3, 17, 42, 99, 5]] * 2, max_tokens=12, temperature=0, lora="a")
    assert [c.text for c in batch] == [with_a.text] * 2
    engine.detach_lora("a")
    engine.detach_lora("b")
    assert engine.loras == []
    assert greedy(engine).text == base.text


def test_errors(engine):
    with pytest.raises(orchard.RequestError) as e:
        greedy(engine, lora="nope")
    assert "nope" in str(e.value) and e.value.param.startswith("lora")
    with pytest.raises(orchard.RequestError):
        engine.detach_lora("nope")
    with pytest.raises(orchard.ModelError) as e:
        engine.attach_lora("missing", os.path.join(ADAPTERS, "no-such-adapter"))
    assert "no-such-adapter" in str(e.value)
    with pytest.raises(orchard.ModelError):  # a qwen2 adapter's shapes do not fit the llama model
        engine.attach_lora("other", os.path.join(REPO, "tests", "pie", "lora", "adapters", "qwen2", "a"))
    for bad in (3, [1], {"a": "x"}, {"a": True}):
        with pytest.raises(TypeError):
            greedy(engine, lora=bad)
    with pytest.raises(TypeError):
        engine.attach_lora("", os.path.join(ADAPTERS, "a"))
    assert engine.loras == []

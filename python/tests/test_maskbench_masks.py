"""Masks through Python equal the C++ masks: every 20th schema of the shared MaskBench dev sample, every test,
every step. The C++ side (python_mask_reference, mask_reference.cpp) reads the Llama 3 tokenizer folder with
Orchard's tokenizer and compiles through pse directly; the Python side builds its TokenizerInfo on its own
from the same encoder.json (byte-level spellings, the 256 special tokens), compiles through GrammarCompiler
(strict_mode=False: the schema as written, as the C++ side) and fills numpy bitmasks, feeding the C++ side's
token ids. Compile failures must agree too, message for message."""
import json
import os
import subprocess

import numpy as np
import pytest

import orchard.grammar as xgr
from conftest import REPO, shared_path

SAMPLE_EVERY = 20
EOS_IDS = [128001, 128008, 128009]  # <|end_of_text|>, <|eom_id|>, <|eot_id|>


def reference_binary():
    path = os.environ.get("ORCHARD_MASK_REFERENCE") or os.path.join(REPO, "build", "python", "python_mask_reference")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path}: not built (the python_mask_reference target)")
    return path


def llama3_info(folder):
    with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    vocab = [""] * 128256
    for text, i in encoder.items():
        vocab[i] = text
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    for i in range(256):
        vocab[128000 + i] = named[i] if i < len(named) else f"<|reserved_special_token_{i - 8}|>"
    return xgr.TokenizerInfo(vocab, xgr.VocabType.BYTE_LEVEL, stop_token_ids=EOS_IDS,
                             special_token_ids=list(range(128000, 128256)))


def digest(mask):
    words = mask.view(np.uint32).astype(np.uint64)
    weights = np.arange(1, 2 * len(words), 2, dtype=np.uint64)
    return [int((words * weights).sum(dtype=np.uint64)), int(np.unpackbits(mask.view(np.uint8)).sum())]


def test_python_masks_equal_cpp_masks():
    folder = shared_path("tokenizers", "llama3")
    data = shared_path("maskbench-dev")
    binary = reference_binary()
    files = sorted((os.path.join(data, n) for n in os.listdir(data) if n.endswith(".json")), key=os.fsencode)
    files = files[::SAMPLE_EVERY]
    run = subprocess.run([binary, folder, *files], capture_output=True, text=True, check=True)
    reference = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(reference) == len(files)

    info = llama3_info(folder)
    assert info._vocab.hash == reference[0]["vocab_hash"], "the two vocabularies differ"
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    mask = xgr.allocate_token_bitmask(1, info.vocab_size, library="numpy")
    n_steps = n_compiled = 0
    for path, ref in zip(files, reference):
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)["schema"]
        if "error" in ref:
            with pytest.raises(xgr.OrchardError) as err:
                compiler.compile_json_schema(schema, strict_mode=False)
            assert str(err.value) == ref["error"], ref["id"]
            continue
        matcher = xgr.GrammarMatcher(compiler.compile_json_schema(schema, strict_mode=False))
        n_compiled += 1
        for k, test in enumerate(ref["tests"]):
            matcher.reset()
            for step, (token, want) in enumerate(zip(test["tokens"], test["masks"])):
                matcher.fill_next_token_bitmask(mask)
                assert digest(mask[0]) == want, f"{ref['id']} test {k} step {step}: the masks differ"
                n_steps += 1
                if not matcher.accept_token(token):
                    break
    assert n_compiled > len(files) // 2 and n_steps > 1000  # the sample really ran

"""transformers generate() with orchard.grammar's LogitsProcessor on a small random-weight Hugging Face model
(made by make_tiny_hf_model.py): over the MaskBench dev schemas (every 20th file of the sorted list), every
sampled output that ends (an end-of-sequence token within MAX_NEW_TOKENS) is JSON that validates against its
schema, and at least 50 schemas get such an output. Outputs still running at MAX_NEW_TOKENS are counted, not
judged (a random model may wander in a long string); a schema Orchard does not compile is skipped and counted. Skips, with the reason, when
torch or transformers is absent (they are not in CI's environment: torch alone is a 5 GB install).

A random model samples nearly uniformly among the allowed tokens, so a string would close only when one of
the few tokens holding a quote comes up. A second processor (CloseBias, outside Orchard) adds CLOSE_BIAS to the
logits of the tokens that hold '"', '}' or ']' and of the end-of-sequence token, so that outputs end within a
few hundred tokens; which of them are allowed is still the grammar's call, and any wrong mask shows as an
output that does not parse or validate. (Inside a string with a pattern the boosted tokens are mostly not
the way out, and such an output may run to the limit.)"""
import json
import os

import pytest

import orchard.grammar as xgr
from conftest import shared_path

N_SCHEMAS = 50
SAMPLE_EVERY = 20
MAX_NEW_TOKENS = 400
CLOSE_BIAS = 8.0


def close_bias(transformers, torch, tokenizer, n_logits):
    ids = [i for t, i in tokenizer.get_vocab().items() if any(c in tokenizer.convert_tokens_to_string([t])
                                                             for c in '"}]')] + [tokenizer.eos_token_id]
    bias = torch.zeros(n_logits)
    bias[ids] = CLOSE_BIAS

    class CloseBias(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores + bias

    return CloseBias()


def test_generate_with_the_processor_validates(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch transformers)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    jsonschema = pytest.importorskip("jsonschema")
    from make_tiny_hf_model import make
    from orchard.grammar.contrib.hf import LogitsProcessor

    data = shared_path("maskbench-dev")
    files = sorted((os.path.join(data, n) for n in os.listdir(data) if n.endswith(".json")), key=os.fsencode)
    model_dir = make(str(tmp_path / "tiny"), files)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiler = xgr.GrammarCompiler(info)
    inputs = tokenizer("A JSON value:", return_tensors="pt")
    bias = close_bias(transformers, torch, tokenizer, model.config.vocab_size)

    checked, not_compiled, unfinished = [], [], []
    for path in files[::SAMPLE_EVERY]:
        if len(checked) == N_SCHEMAS:
            break
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)["schema"]
        try:
            compiled = compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))
        except xgr.OrchardError:
            not_compiled.append(os.path.basename(path))
            continue
        torch.manual_seed(len(checked))
        out = model.generate(**inputs, logits_processor=[bias, LogitsProcessor(compiled)], do_sample=True,
                             max_new_tokens=MAX_NEW_TOKENS)
        ids = out[0, inputs["input_ids"].shape[1]:].tolist()
        if not ids or ids[-1] != tokenizer.eos_token_id:
            unfinished.append(os.path.basename(path))
            continue
        text = tokenizer.decode(ids[:-1])
        value = json.loads(text)
        jsonschema.validate(value, schema)
        checked.append(os.path.basename(path))
        print(f"{os.path.basename(path)}: {len(ids)} tokens, valid")
    print(f"{len(checked)} outputs valid; {len(unfinished)} unfinished at {MAX_NEW_TOKENS} tokens {unfinished}; "
          f"{len(not_compiled)} schemas not compiled {not_compiled}")
    assert len(checked) == N_SCHEMAS, (f"only {len(checked)} finished outputs (unfinished: {unfinished}; "
                                       f"not compiled: {not_compiled})")

#!/usr/bin/env python3
"""Schema-valid JSON from a Hugging Face model through transformers' generate() and Orchard's grammar engine:
the same code as with XGrammar, with `import orchard.grammar as xgr` instead of `import xgrammar as xgr`.

  PYTHONPATH=build/python python examples/python/transformers_generate.py MODEL_DIR_OR_HUB_NAME
Needs torch and transformers (scripts/requirements-bench.txt). python/tests/make_tiny_hf_model.py makes a small
random-weight model to try it on (its output is valid JSON, and nonsense).
"""
import json
import sys

import transformers

import orchard.grammar as xgr
from orchard.grammar.contrib.hf import LogitsProcessor

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}

model_name = sys.argv[1] if len(sys.argv) > 1 else "HuggingFaceTB/SmolLM2-135M-Instruct"
tokenizer = transformers.AutoTokenizer.from_pretrained(model_name)
model = transformers.AutoModelForCausalLM.from_pretrained(model_name)

info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
compiled = xgr.GrammarCompiler(info).compile_json_schema(SCHEMA, any_whitespace=False, separators=(",", ":"))

inputs = tokenizer("A person as JSON: ", return_tensors="pt")
out = model.generate(**inputs, logits_processor=[LogitsProcessor(compiled)], do_sample=False, max_new_tokens=128)
text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
print(text)
print(json.loads(text))  # always parses (when the model stopped before max_new_tokens); validates against SCHEMA

#!/usr/bin/env python3
"""Extraction with orchard.load() on the default model (SmolLM2-135M-Instruct, from the model store):
a contact record out of a paragraph, constrained by a JSON Schema, and a tool call.

  PYTHONPATH=build/python .venv/bin/python examples/python/extract.py      (after building, or pip install .)
"""
import json
import os

import orchard

HERE = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(HERE, "..", "contact.schema.json")) as f:
    schema = json.load(f)
with open(os.path.join(HERE, "..", "contact.txt")) as f:
    text = f.read()

with orchard.load() as engine:  # the default model; a path or a stored name also works
    record = engine.generate(messages=[{"role": "user", "content": text}], schema=schema, temperature=0)
    print(record.json)  # a dict that validates against the schema

    # The same as a stream of text pieces.
    for delta in engine.generate(messages=[{"role": "user", "content": text}], schema=schema, temperature=0,
                                 stream=True):
        print(delta.text, end="", flush=True)
    print()

    with open(os.path.join(HERE, "..", "tools.json")) as f:
        tools = json.load(f)
    answer = engine.generate(messages=[{"role": "user", "content": "What is the weather like in Paris today?"}],
                             tools=tools, tool_choice="required", parallel_tool_calls=False,
                             temperature=0)
    for call in answer.tool_calls:
        print(call.name, call.arguments)

#!/usr/bin/env python3
"""Writes the chat-template references the C++ conformance test compares against, byte for byte.

Every template of ../shared/data/chat-templates is rendered with Python jinja2 under the settings Hugging Face
transformers uses in apply_chat_template (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
with the loopcontrols extension, HF's tojson filter, raise_exception and strftime_now globals; strftime_now
sees a fixed date) over a set of conversations, each with add_generation_prompt false and true.

Output: tests/pie/chat/references/conversations.json (the render contexts, by name: messages, tools (null
when none, as HF passes it), add_generation_prompt, bos_token, eos_token, and for one conversation more keys) and one
<template>.json per template: [{"conversation": name, "output": text} or {"conversation": name,
"error_type": "...", "error": message}].

Usage: .venv/bin/python tools/render_chat_templates.py [--data ../shared/data] [--out tests/pie/chat/references]
"""

import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The C++ test gives strftime_now the same local time.
FIXED_NOW = datetime(2024, 7, 26, 12, 0, 0)
BOS = "<s>"
EOS = "</s>"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the top results",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for"},
                    "max_results": {"type": "integer", "description": "How many results", "default": 5},
                    "safe": {"type": "boolean"},
                    "threshold": {"type": "number", "minimum": 0.5},
                },
                "required": ["query"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer concisely."}
USER = {"role": "user", "content": "What's the weather like in Paris today?"}


def tool_turn(arguments_as_string, call_content):
    args = {"location": "Paris, France", "unit": "celsius"}
    call = {
        "id": "call12345",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(args) if arguments_as_string else args},
    }
    return [
        USER,
        {"role": "assistant", "content": call_content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
         "content": json.dumps({"temperature": 22, "condition": "sunny"})},
        {"role": "assistant", "content": "It is sunny and 22 °C in Paris."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ]


def parallel_calls():
    calls = [
        {"id": "call00001", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"location": "Paris, France"})}},
        {"id": "call00002", "type": "function",
         "function": {"name": "search_web", "arguments": json.dumps({"query": "événements à Paris", "max_results": 3,
                                                                      "threshold": 0.75, "safe": True})}},
    ]
    return [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris, and what's on?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "sunny, 22"},
        {"role": "tool", "tool_call_id": "call00002", "name": "search_web", "content": "[\"Fête de la musique\"]"},
    ]


CONVERSATIONS = {
    "user": ([{"role": "user", "content": "Hello!"}], None),
    "system_user": ([SYSTEM, USER], None),
    "multi_turn": ([
        SYSTEM,
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "  I am an assistant.\nHow can I help?  "},
        {"role": "user", "content": "Tell me a joke about \"quotes\" & <tags>."},
    ], None),
    "alternating": ([
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "  Hello there.  "},
        {"role": "user", "content": "Écris «bonjour» en 中文."},
    ], None),
    "with_tools": ([SYSTEM, USER], TOOLS),
    # OpenAI sends content null beside tool_calls; templates differ in what they accept, so both shapes.
    "tool_calls_string_arguments": ([SYSTEM] + tool_turn(True, ""), TOOLS),
    "tool_calls_object_arguments": (tool_turn(False, None), TOOLS),
    "parallel_tool_calls": (parallel_calls(), TOOLS),
    # Every parameter described (Command R+ concatenates each description, so it fails without one).
    "described_tool_calls": ([SYSTEM] + tool_turn(True, ""), TOOLS[:1]),
}

# Variables some templates read beyond HF's defaults (Firefunction's functions and datetime, Command R's
# documents), for one more conversation.
EXTRA_VARIABLES = {
    "functions": json.dumps([t["function"] for t in TOOLS], indent=2),
    "datetime": "Jul 26 2024",
    "documents": [{"title": "Paris weather", "text": "Sunny, 22 degrees."}],
}


def make_environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # HF's override: json.dumps without Jinja's HTML escaping.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def contexts():
    for name, (messages, tools) in CONVERSATIONS.items():
        for add_generation_prompt in (False, True):
            key = f"{name}{'+gen' if add_generation_prompt else ''}"
            yield key, {
                "messages": messages,
                "tools": tools,
                "add_generation_prompt": add_generation_prompt,
                "bos_token": BOS,
                "eos_token": EOS,
            }
    for add_generation_prompt in (False, True):
        yield f"extra_variables{'+gen' if add_generation_prompt else ''}", {
            "messages": [SYSTEM, USER],
            "tools": TOOLS,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": BOS,
            "eos_token": EOS,
            **EXTRA_VARIABLES,
        }


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    parser.add_argument("--out", default=os.path.join(root, "tests", "pie", "chat", "references"))
    args = parser.parse_args()

    template_dir = os.path.join(args.data, "chat-templates")
    os.makedirs(args.out, exist_ok=True)
    env = make_environment()
    all_contexts = dict(contexts())
    with open(os.path.join(args.out, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(all_contexts, f, ensure_ascii=False, indent=1)
        f.write("\n")

    for file in sorted(os.listdir(template_dir)):
        if not file.endswith(".jinja"):
            continue
        with open(os.path.join(template_dir, file), encoding="utf-8") as f:
            source = f.read()
        template = env.from_string(source)
        cases = []
        for key, context in all_contexts.items():
            case = {"conversation": key}
            try:
                case["output"] = template.render(**context)
            except Exception as e:  # every failure is a reference too: ours must fail as well
                case["error_type"] = type(e).__name__
                case["error"] = str(e)
            cases.append(case)
        out = os.path.join(args.out, file[: -len(".jinja")] + ".json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum("error" in c for c in cases)
        print(f"{file}: {len(cases)} cases, {n_err} errors", file=sys.stderr)


if __name__ == "__main__":
    main()

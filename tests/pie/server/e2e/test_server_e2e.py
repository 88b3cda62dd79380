#!/usr/bin/env python3
"""End-to-end tests of a live `orchard serve` (the random-weight model, loopback, a free port) driven by the official
`openai` client, plus the Ollama endpoints and the error paths with plain HTTP.

Run by CTest: test_server_e2e.py --orchard build/pie/orchard. Exit 0 pass, 1 fail, 77 skipped (the
`openai` or `jsonschema` package is absent: pip install -r scripts/requirements-test.txt).
"""
import argparse
import json
import re
import signal
import socket
import sys
import threading
import time

from live_server import LiveServer, expect, finish, run_tests

try:
    import jsonschema
    import openai
except ImportError as e:  # skip with the reason
    print(f"SKIP: {e.name} is not installed (pip install -r scripts/requirements-test.txt)")
    sys.exit(77)

KEY = "e2e-secret"
ALIAS = "e2e-alias"
MAX_BODY = 65536


class Server(LiveServer):
    def __init__(self, binary):
        super().__init__(binary, "-m", "orchard-random", "--api-key", KEY, "--ctx", "2048", "--parallel", "8",
                         "--threads", "2", "--max-body", str(MAX_BODY), "--grace", "3", "--alias", ALIAS, key=KEY)

    def http(self, method, path, body=None, headers=None, key=KEY, raw=None):
        """Plain HTTP: returns (status, body text)."""
        status, _, text = self.request(method, path, body, headers, key, raw)
        return status, text


def client(server, key=KEY):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=120)


def chat(c, server, **kw):
    args = dict(model=server.model, messages=[{"role": "user", "content": "Tell me a story."}],
                max_tokens=12, temperature=0)
    args.update(kw)
    return c.chat.completions.create(**args)


def expect_serving(server):
    r = chat(client(server), server, max_tokens=2)
    expect(r.choices[0].message.content is not None, "server no longer answers a plain chat")


# --- OpenAI ------------------------------------------------------------------------------------------
def test_models(server):
    ids = [m.id for m in client(server).models.list().data]
    # The served model and its alias first; the model store's models (served on demand) after them.
    expect(ids[:2] == [server.model, ALIAS], f"models: {ids}")
    expect(" " not in server.model, f"served name {server.model!r} is not a slug")
    for name in ("default", ALIAS, server.model + ":latest"):
        r = chat(client(server), server, model=name, max_tokens=2)
        expect(r.model == server.model, f"{name}: answered as {r.model}")
    status, text = server.http("GET", "/api/tags")
    expect([m["name"] for m in json.loads(text)["models"]][:2] == [server.model, ALIAS], text)


def test_chat(server):
    r = chat(client(server), server)
    expect(r.object == "chat.completion", r.object)
    expect(isinstance(r.choices[0].message.content, str), "content")
    expect(r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
    expect(r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 12, f"usage {r.usage}")
    expect(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")


def test_stream_with_usage_matches_non_stream(server):
    c = client(server)
    kw = dict(max_tokens=16, temperature=0.8, seed=11)
    whole = chat(c, server, **kw)
    text, usage, finish, roles = "", None, None, 0
    for chunk in chat(c, server, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            roles += ch.delta.role == "assistant"
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    expect(roles == 1, f"role chunks: {roles}")
    expect(usage is not None, "no usage chunk")
    expect(usage.completion_tokens == whole.usage.completion_tokens, f"{usage} vs {whole.usage}")
    expect(text == whole.choices[0].message.content, f"stream {text!r} != {whole.choices[0].message.content!r}")
    expect(finish == whole.choices[0].finish_reason, f"finish {finish}")


def test_seed_reproducibility(server):
    c = client(server)
    a = chat(c, server, temperature=1.0, seed=1234, max_tokens=20).choices[0].message.content
    b = chat(c, server, temperature=1.0, seed=1234, max_tokens=20).choices[0].message.content
    d = chat(c, server, temperature=1.0, seed=999, max_tokens=20).choices[0].message.content
    expect(a == b, f"same seed, different text: {a!r} / {b!r}")
    expect(a != d, "different seeds gave the same 20 tokens")


def test_n2(server):
    r = chat(client(server), server, n=2, temperature=1.0, seed=5, max_tokens=10)
    expect(sorted(ch.index for ch in r.choices) == [0, 1], "indexes")
    expect(r.choices[0].message.content != r.choices[1].message.content, "n=2 samples are identical")
    expect(0 < r.usage.completion_tokens <= 20, f"usage sums both samples: {r.usage}")


def test_stop(server):
    c = client(server)
    full = chat(c, server, max_tokens=30, seed=3, temperature=0.9).choices[0].message.content
    stop = full[8:11]
    expect(len(stop) == 3, f"output too short for the stop test: {full!r}")
    r = chat(c, server, max_tokens=30, seed=3, temperature=0.9, stop=[stop])
    expect(r.choices[0].finish_reason == "stop", r.choices[0].finish_reason)
    expect(r.choices[0].message.content == full[:full.index(stop)],
           f"stop {stop!r}: {r.choices[0].message.content!r} vs {full!r}")


def test_logprobs(server):
    r = chat(client(server), server, logprobs=True, top_logprobs=3, max_tokens=6, temperature=0)
    content = r.choices[0].logprobs.content
    expect(len(content) == r.usage.completion_tokens, f"{len(content)} logprobs for {r.usage.completion_tokens} tokens")
    for t in content:
        expect(t.logprob <= 0 and len(t.top_logprobs) == 3, f"entry {t}")
        # Greedy: the chosen token is the most likely one.
        expect(abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, f"greedy token not the top: {t}")


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    },
    "required": ["name", "age", "color", "tags"],
    "additionalProperties": False,
}


def test_json_schema(server):
    c = client(server)
    for seed in (1, 2, 3):
        r = chat(c, server, max_tokens=200, temperature=0.8, seed=seed,
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
        expect(r.choices[0].finish_reason == "stop", f"finish {r.choices[0].finish_reason}")
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    r = chat(c, server, max_tokens=200, temperature=0.5, seed=4, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        expect(isinstance(json.loads(r.choices[0].message.content), dict), "json_object")


def test_grammar_and_regex(server):
    c = client(server)
    r = chat(c, server, max_tokens=20, temperature=1.0, seed=2, extra_body={"regex": "[0-9]{3}-[a-z]{2}"})
    expect(re.fullmatch("[0-9]{3}-[a-z]{2}", r.choices[0].message.content), r.choices[0].message.content)
    r = chat(c, server, max_tokens=20, temperature=1.0, seed=2,
             extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    expect(r.choices[0].message.content in ("yes!", "no!"), r.choices[0].message.content)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"enum": ["Paris", "Oslo", "Lima"]},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"],
            "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two small numbers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 99},
            "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"],
            "additionalProperties": False}}},
]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls(calls, only=None):
    expect(calls, "no tool calls")
    for call in calls:
        expect(call.id and call.type == "function", f"call {call}")
        expect(call.function.name in TOOL_SCHEMAS, call.function.name)
        if only:
            expect(call.function.name == only, f"called {call.function.name}, not {only}")
        jsonschema.validate(json.loads(call.function.arguments), TOOL_SCHEMAS[call.function.name])


def test_tools(server):
    c = client(server)
    # Up to 16 parallel calls: a random model may use many tokens.
    base = dict(max_tokens=1200, temperature=0.7, tools=TOOLS,
                messages=[{"role": "user", "content": "Weather in Paris?"}])
    for seed in (1, 2):
        r = chat(c, server, tool_choice="required", seed=seed, **base)
        expect(r.choices[0].finish_reason == "tool_calls", r.choices[0].finish_reason)
        check_calls(r.choices[0].message.tool_calls)
    r = chat(c, server, tool_choice={"type": "function", "function": {"name": "add"}}, seed=3, **base)
    check_calls(r.choices[0].message.tool_calls, only="add")
    r = chat(c, server, tool_choice="required", parallel_tool_calls=False, seed=4, **base)
    expect(len(r.choices[0].message.tool_calls) == 1, "parallel_tool_calls=false gave several calls")
    r = chat(c, server, tool_choice="none", seed=5, **dict(base, max_tokens=10))
    expect(not r.choices[0].message.tool_calls, "tool_choice none called a tool")
    r = chat(c, server, tool_choice="auto", seed=6, **base)
    if r.choices[0].message.tool_calls:
        check_calls(r.choices[0].message.tool_calls)
    else:
        expect(isinstance(r.choices[0].message.content, str), "auto: neither calls nor content")
    # A conversation with a call and its result renders and answers.
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "21"}]
    r = chat(c, server, messages=history, tools=TOOLS, max_tokens=5)
    expect(r.choices[0].finish_reason in ("stop", "length"), "tool result turn")


def test_streamed_tool_calls(server):
    c = client(server)
    kw = dict(max_tokens=1200, temperature=0.7, seed=8, tools=TOOLS, tool_choice="required",
              messages=[{"role": "user", "content": "Add 2 and 3, and the weather in Oslo."}])
    whole = chat(c, server, **kw).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in chat(c, server, stream=True, **kw):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for d in ch.delta.tool_calls or []:
                if d.index not in calls:
                    expect(d.id and d.function.name, f"first delta of call {d.index} lacks id or name: {d}")
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                calls[d.index]["arguments"] += d.function.arguments or ""
    expect(finish == "tool_calls", f"finish {finish}")
    got = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
    streamed_ids = [calls[i]["id"] for i in sorted(calls)]
    want = [(t.function.name, json.loads(t.function.arguments)) for t in whole]
    expect(got == want, f"streamed {got} != {want}")
    for name, args in got:
        jsonschema.validate(args, TOOL_SCHEMAS[name])
    # The client's own stream helper accumulates the deltas into the same message.
    kw.pop("max_tokens")
    with c.chat.completions.stream(model=server.model, max_tokens=1200, **kw) as s:
        final = s.get_final_completion()
    calls = final.choices[0].message.tool_calls
    expect(final.choices[0].finish_reason == "tool_calls", f"helper finish {final.choices[0].finish_reason}")
    helper = [(t.function.name, json.loads(t.function.arguments)) for t in calls]
    expect(helper == want, f"client-assembled {helper} != {want}")
    # Ids are fresh per request (never from the seed): the three requests above share none.
    ids = [t.id for t in calls] + [t.id for t in whole] + [calls_id for calls_id in streamed_ids]
    expect(len(set(ids)) == len(ids), f"call ids repeat across requests: {ids}")


def test_completions(server):
    c = client(server)
    r = c.completions.create(model=server.model, prompt="Once upon a time", max_tokens=8, temperature=0)
    expect(r.object == "text_completion" and isinstance(r.choices[0].text, str), "completion")
    expect(r.usage.completion_tokens <= 8, "usage")
    ids = c.completions.create(model=server.model, prompt=[1, 100, 200], max_tokens=4, temperature=0)
    expect(ids.usage.prompt_tokens == 3, f"token-id prompt: {ids.usage}")
    echo = c.completions.create(model=server.model, prompt="Hello", max_tokens=3, temperature=0, echo=True,
                                logprobs=2)
    expect(echo.choices[0].text.startswith("Hello"), "echo")
    lp = echo.choices[0].logprobs
    n_tokens = echo.usage.prompt_tokens + echo.usage.completion_tokens
    expect(len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == n_tokens, f"echo logprobs: {lp}")
    expect(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "the first prompt token has a logprob")
    expect(all(x <= 0 for x in lp.token_logprobs[1:]), f"logprobs: {lp.token_logprobs}")
    expect(all(len(t) == 2 for t in lp.top_logprobs[1:]), f"alternatives: {lp.top_logprobs}")
    expect("".join(lp.tokens) == echo.choices[0].text, f"tokens {lp.tokens} do not spell the text")
    # Streamed: the echo chunk carries the prompt's logprobs, the later chunks the output's.
    streamed = {"tokens": [], "token_logprobs": []}
    for chunk in c.completions.create(model=server.model, prompt="Hello", max_tokens=3, temperature=0, echo=True,
                                      logprobs=2, stream=True):
        for ch in chunk.choices:
            if ch.logprobs:
                streamed["tokens"] += ch.logprobs.tokens
                streamed["token_logprobs"] += ch.logprobs.token_logprobs
    expect(streamed["tokens"] == lp.tokens, f"streamed {streamed['tokens']} != {lp.tokens}")
    expect(streamed["token_logprobs"] == lp.token_logprobs, "streamed logprobs differ")
    text = ""
    for chunk in c.completions.create(model=server.model, prompt="Once upon a time", max_tokens=8,
                                      temperature=0, stream=True):
        text += "".join(ch.text for ch in chunk.choices)
    expect(text == r.choices[0].text, f"stream {text!r} != {r.choices[0].text!r}")
    rx = c.completions.create(model=server.model, prompt="Code:", max_tokens=10, temperature=1, seed=1,
                              extra_body={"regex": "[A-Z]{4}"})
    expect(re.fullmatch("[A-Z]{4}", rx.choices[0].text), rx.choices[0].text)


# --- Ollama ------------------------------------------------------------------------------------------
def test_ollama(server):
    status, text = server.http("GET", "/api/version")
    expect(status == 200 and "version" in json.loads(text), text)
    status, text = server.http("GET", "/api/tags")
    expect(json.loads(text)["models"][0]["name"] == server.model, text)
    status, text = server.http("POST", "/api/show", {"model": server.model})
    expect(status == 200 and "details" in json.loads(text), text)
    status, text = server.http("POST", "/api/show", {"model": "nope"})
    expect(status == 404 and isinstance(json.loads(text)["error"], str), text)

    body = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}],
            "options": {"num_predict": 6, "temperature": 0}}
    status, text = server.http("POST", "/api/chat", dict(body, stream=False))
    whole = json.loads(text)
    expect(status == 200 and whole["done"] and whole["eval_count"] == 6, text)
    status, text = server.http("POST", "/api/chat", body)  # streams by default
    lines = [json.loads(l) for l in text.splitlines() if l]
    expect(lines[-1]["done"] and not any(l["done"] for l in lines[:-1]), "NDJSON done flags")
    streamed = "".join(l["message"]["content"] for l in lines)
    expect(streamed == whole["message"]["content"], f"{streamed!r} != {whole['message']['content']!r}")

    status, text = server.http("POST", "/api/generate",
                               {"model": server.model, "prompt": "Describe a cat.", "stream": False,
                                "format": SCHEMA, "options": {"num_predict": 200, "temperature": 0.8, "seed": 3}})
    out = json.loads(text)
    expect(out["done"] and out["done_reason"] == "stop", text)
    jsonschema.validate(json.loads(out["response"]), SCHEMA)
    status, text = server.http("POST", "/api/generate",
                               {"model": server.model, "prompt": "x", "raw": True,
                                "options": {"num_predict": 3}})
    lines = [json.loads(l) for l in text.splitlines() if l]
    expect(lines[-1]["done"] and lines[-1]["eval_count"] == 3, text)
    status, text = server.http("POST", "/api/chat",
                               {"model": server.model, "stream": False, "tools": TOOLS,
                                "messages": [{"role": "user", "content": "add 1 and 2"}],
                                "options": {"num_predict": 1200, "seed": 2}})
    expect(status == 200, text)


# --- errors: each leaves the server serving ------------------------------------------------------------
def test_errors(server):
    status, text = server.http("POST", "/v1/chat/completions", raw='{"model": "x", "messages": [')
    expect(status == 400 and json.loads(text)["error"]["type"] == "invalid_request_error", text)
    expect_serving(server)

    try:
        chat(client(server), server, model="gpt-unknown")
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        expect(e.status_code == 404 and "gpt-unknown" in str(e), str(e))
    expect_serving(server)

    try:
        chat(client(server), server, response_format={"type": "json_schema", "json_schema": {
            "name": "bad", "schema": {"type": 12}}})
        raise AssertionError("invalid schema accepted")
    except openai.BadRequestError as e:
        expect(e.status_code == 400, str(e))
    expect_serving(server)

    try:
        chat(client(server), server, response_format={"type": "json_schema", "json_schema": {
            "name": "bad", "schema": {"type": "object", "$dynamicRef": "#meta"}}})
        raise AssertionError("unsupported keyword accepted")
    except openai.BadRequestError as e:
        expect("$dynamicRef" in str(e), f"keyword not named: {e}")
        expect(e.body.get("param") == "response_format.json_schema.schema", f"param: {e.body}")
    expect_serving(server)

    status, text = server.http("POST", "/v1/chat/completions", raw="x" * (MAX_BODY + 1))
    expect(status == 413 and json.loads(text)["error"]["code"] == "request_too_large", f"{status} {text}")
    expect_serving(server)

    status, text = server.http("POST", "/v1/chat/completions", {"model": server.model}, key=None)
    expect(status == 401, f"missing key: {status}")
    try:
        chat(client(server, key="wrong"), server)
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError as e:
        expect(e.status_code == 401, str(e))
    expect_serving(server)

    try:
        chat(client(server), server, temperature=-3)
        raise AssertionError("temperature -3 accepted")
    except openai.BadRequestError as e:
        expect(e.body.get("param") == "temperature", f"param: {e.body}")
    expect_serving(server)


def test_client_gone_mid_stream(server):
    before_cancelled = server.metric("orchard_http_requests_cancelled_total")
    body = json.dumps({"model": server.model, "messages": [{"role": "user", "content": "Go on."}],
                       "max_tokens": 800, "stream": True, "temperature": 1,
                       "regex": "[a-z]{2000}"})  # cannot end early: the stream outlives the disconnect
    s = socket.create_connection((server.host, server.port))
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while got.count(b"data:") < 4:
        part = s.recv(4096)
        expect(part, "stream closed early")
        got += part
    expect(server.metric("orchard_http_requests_in_flight") >= 1, "stream not in flight")
    s.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        if (server.metric("orchard_http_requests_in_flight") == 0
                and server.metric("orchard_engine_requests_running") == 0):
            break
        time.sleep(0.05)
    expect(server.metric("orchard_http_requests_in_flight") == 0, "disconnected stream still in flight")
    expect(server.metric("orchard_engine_requests_running") == 0, "sequence not freed")
    expect(server.metric("orchard_kv_pages_used") == 0, "KV pages still held")
    expect(server.metric("orchard_http_requests_cancelled_total") > before_cancelled, "not counted as cancelled")
    expect_serving(server)


def test_sigterm_finishes_streams_and_exits_0(server):
    """Last: SIGTERM while a stream runs; the stream still ends properly and the server exits 0."""
    result, started = {}, threading.Event()

    def stream():
        finish = None
        try:
            for chunk in chat(client(server), server, stream=True, max_tokens=200, temperature=1,
                              extra_body={"regex": "[a-z]{500}"}):
                started.set()
                for ch in chunk.choices:
                    finish = ch.finish_reason or finish
            result["finish"] = finish
        except Exception as e:  # noqa: BLE001 - reported below
            result["error"] = repr(e)
        started.set()

    t = threading.Thread(target=stream)
    t.start()
    expect(started.wait(60), "the stream did not start")
    sent = time.time()
    server.proc.send_signal(signal.SIGTERM)
    t.join(60)
    code = server.proc.wait(60)
    took = time.time() - sent
    # The stream ends normally (within the 3 s grace or cancelled after it), and the process exits 0.
    expect("finish" in result and result["finish"] is not None, f"stream during shutdown: {result}")
    expect(code == 0, f"exit status {code}")
    expect(took < 20, f"shutdown took {took:.1f} s")


TESTS = [test_models, test_chat, test_stream_with_usage_matches_non_stream, test_seed_reproducibility, test_n2,
         test_stop, test_logprobs, test_json_schema, test_grammar_and_regex, test_tools, test_streamed_tool_calls,
         test_completions, test_ollama, test_errors, test_client_gone_mid_stream,
         test_sigterm_finishes_streams_and_exits_0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orchard", required=True, help="the orchard binary")
    ap.add_argument("-k", default="", help="run only tests whose name contains one of these (comma-separated)")
    args = ap.parse_args()
    server = Server(args.orchard)
    try:
        failed = run_tests([(test, (server,)) for test in TESTS], args.k)
    finally:
        server.stop()
    return finish(failed, [server])


if __name__ == "__main__":
    sys.exit(main())

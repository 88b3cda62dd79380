"""orchard.load / Engine on the embedded random-weight model (any machine) and, where the model store has
it, the default model: free text, each constraint, tools, streaming, batches, threads, asyncio, the
tokenizer, and every error."""
import asyncio
import json
import re
import threading

import pytest

import orchard

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "ok": {"type": "boolean"}}, "required": ["n", "ok"],
          "additionalProperties": False}
CHAT = [{"role": "user", "content": "Give me a record."}]


def validate(value, schema):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, schema)


def test_free_text_greedy_is_reproducible(random_engine):
    a = random_engine.generate(prompt="Once upon", max_tokens=8, temperature=0)
    b = random_engine.generate(prompt="Once upon", max_tokens=8, temperature=0)
    assert isinstance(a, orchard.Completion) and a.text == b.text and str(a) == a.text
    assert a.finish_reason == "length" and a.usage["completion_tokens"] == 8 and a.json is None
    ids = random_engine.tokenizer.encode("Once upon")
    assert random_engine.generate(prompt=ids, max_tokens=8, temperature=0).text == a.text


def test_schema_output_validates(random_engine):
    for seed in range(3):
        out = random_engine.generate(messages=CHAT, schema=SCHEMA, max_tokens=64, temperature=1.0, seed=seed)
        assert out.finish_reason == "stop", out
        validate(out.json, SCHEMA)
        assert json.loads(out.text) == out.json


def test_grammar_lark_and_regex(random_engine):
    out = random_engine.generate(prompt="x", grammar='root ::= "yes" | "no"', temperature=1.0, seed=1)
    assert out.text in ("yes", "no")
    out = random_engine.generate(prompt="x", lark='start: "a" DIGIT\nDIGIT: /[0-9]/', temperature=1.0, seed=2)
    assert re.fullmatch(r"a[0-9]", out.text)
    out = random_engine.generate(prompt="x", regex="[0-9]{3}-[0-9]{2}", temperature=1.0, seed=3)
    assert re.fullmatch(r"[0-9]{3}-[0-9]{2}", out.text)


def test_tools(random_engine):
    tools = [{"name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                             "required": ["city"]}}]
    out = random_engine.generate(messages=CHAT, tools=tools, tool_choice="required", max_tokens=80, seed=4)
    assert out.finish_reason == "tool_calls" and out.tool_calls
    for call in out.tool_calls:
        assert call.name == "get_weather" and isinstance(call.arguments, dict)
        validate(call.arguments, tools[0]["parameters"])
    out = random_engine.generate(messages=CHAT, tools=[{"type": "function", "function": tools[0]}],
                                 tool_choice="get_weather", parallel_tool_calls=False, max_tokens=80, seed=5)
    assert [c.name for c in out.tool_calls] == ["get_weather"]


def test_stream_equals_the_whole_answer(random_engine):
    whole = random_engine.generate(messages=CHAT, schema=SCHEMA, max_tokens=64, temperature=0)
    stream = random_engine.generate(messages=CHAT, schema=SCHEMA, max_tokens=64, temperature=0, stream=True)
    pieces = [d for d in stream]
    assert all(isinstance(d, orchard.Delta) for d in pieces) and len(pieces) >= 2
    assert "".join(d.text for d in pieces) == whole.text == stream.completion.text
    assert stream.completion.json == whole.json


def test_stream_close_cancels(random_engine):
    with random_engine.generate(prompt="x", max_tokens=200, stream=True) as s:
        next(s)
    s.close()
    rest = list(s)
    assert s.completion.finish_reason in ("cancelled", "length")  # cancelled unless it had already finished
    assert s.completion.usage["completion_tokens"] <= 200 and isinstance(rest, list)


def test_batch_runs_together(random_engine):
    outs = random_engine.generate(prompt=["a", "b", "c"], schema=SCHEMA, max_tokens=64, temperature=0)
    assert len(outs) == 3
    for o in outs:
        validate(o.json, SCHEMA)
    solo = random_engine.generate(prompt="b", schema=SCHEMA, max_tokens=64, temperature=0)
    assert outs[1].text == solo.text  # batching changes nothing
    chats = random_engine.generate(messages=[CHAT, CHAT], max_tokens=4, temperature=0)
    assert len(chats) == 2 and chats[0].text == chats[1].text


def test_threads(random_engine):
    results = {}

    def call(i):
        results[i] = random_engine.generate(prompt=f"p{i}", regex="[a-z]{4}", temperature=1.0, seed=i).text

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3] and all(re.fullmatch("[a-z]{4}", t) for t in results.values())


def test_asyncio(random_engine):
    async def main():
        many = await asyncio.gather(*(random_engine.agenerate(prompt=f"q{i}", schema=SCHEMA, max_tokens=64, seed=i)
                                      for i in range(3)))
        stream = await random_engine.agenerate(messages=CHAT, max_tokens=6, temperature=0, stream=True)
        text = "".join([d.text async for d in stream])
        batch = await random_engine.agenerate(prompt=["a", "b"], max_tokens=3, temperature=0)
        return many, text, stream.completion, batch

    many, text, completion, batch = asyncio.run(main())
    for o in many:
        validate(o.json, SCHEMA)
    assert text == completion.text and len(batch) == 2
    assert completion.text == random_engine.generate(messages=CHAT, max_tokens=6, temperature=0).text


def test_tokenizer(random_engine):
    t = random_engine.tokenizer
    ids = t.encode("héllo wörld")
    assert t.decode(ids) == "héllo wörld"
    assert t.vocab_size > 0 and t.eos_token_ids
    assert t.encode("x", add_bos=True)[0] == t.bos_token_id
    with pytest.raises(orchard.TokenizerError):
        t.decode([t.vocab_size + 5])
    with pytest.raises(TypeError):
        t.encode(b"bytes")
    with pytest.raises(TypeError):
        t.decode(["a"])


def test_tokenizer_info_compiles_for_the_model(random_engine):
    import orchard.grammar as xgr
    info = random_engine.tokenizer_info
    assert info.vocab_size >= random_engine.tokenizer.vocab_size
    m = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex("ab"))
    assert m.accept_string("ab") and m.is_completed()


def test_argument_errors(random_engine):
    e = random_engine
    with pytest.raises(ValueError, match="exactly one"):
        e.generate()
    with pytest.raises(ValueError, match="exactly one"):
        e.generate(prompt="a", messages=CHAT)
    with pytest.raises(ValueError, match="at most one constraint"):
        e.generate(prompt="a", schema=SCHEMA, regex="a")
    with pytest.raises(ValueError, match="tools need messages"):
        e.generate(prompt="a", tools=[{"name": "f", "parameters": {"type": "object"}}])
    with pytest.raises(ValueError, match="need tools"):
        e.generate(messages=CHAT, tool_choice="auto")
    with pytest.raises(ValueError, match="not a batch"):
        e.generate(prompt=["a", "b"], stream=True)
    with pytest.raises(TypeError, match="messages"):
        e.generate(messages="hello")
    with pytest.raises(TypeError, match="schema"):
        e.generate(prompt="a", schema=[1])
    with pytest.raises(TypeError, match="agenerate"):
        asyncio.run(e.agenerate(prompt="a", temprature=0))


def test_request_errors_name_the_field(random_engine):
    with pytest.raises(orchard.RequestError) as err:
        random_engine.generate(prompt="a", temperature=-1)
    assert err.value.param == "temperature" and isinstance(err.value, ValueError)
    with pytest.raises(orchard.RequestError) as err:
        random_engine.generate(prompt="a", schema={"type": "object", "properties": {"a": {"minimum": "x"}}})
    assert "minimum" in str(err.value) and "response_format" in err.value.param
    with pytest.raises(orchard.RequestError) as err:
        random_engine.generate(prompt="a", grammar="root ::= (")
    assert err.value.param == "grammar" and "line 1" in str(err.value)
    with pytest.raises(orchard.SchemaError):
        random_engine.generate(prompt="a", schema="{nope")
    with pytest.raises(orchard.RequestError):
        random_engine.generate(prompt="a", max_tokens=0)


def test_load_errors():
    with pytest.raises(orchard.ModelNotFoundError) as err:
        orchard.load("/nonexistent/model.gguf")
    assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(ValueError, match="device"):
        orchard.load("orchard-random", device="gpu")
    with pytest.raises(ValueError, match="threads"):
        orchard.load("orchard-random", threads=0)


def test_context_manager_and_stats():
    with orchard.load("orchard-random", threads=1) as e:
        e.generate(prompt="a", max_tokens=2)
        s = e.stats()
        assert s["requests"] == 1 and s["generated_tokens"] >= 2
        assert e.name == "orchard-random"


CONTACT = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}},
           "required": ["name", "city"]}


def test_default_model_extraction(default_engine):
    text = "Maria Lopez lives in Lisbon, where she works as an engineer."
    out = default_engine.generate(
        messages=[{"role": "user", "content": f"Extract the person's name and city as JSON.\n\n{text}"}],
        schema=CONTACT, temperature=0, max_tokens=64)
    validate(out.json, CONTACT)
    assert out.json["name"] == "Maria Lopez" and out.json["city"] == "Lisbon"


def test_device_choice():
    cpu = orchard.load("orchard-random", device="cpu", threads=1)
    assert cpu.device[0] == "cpu" and cpu.device[1]
    cpu.close()
    auto = orchard.load("orchard-random", threads=1)  # CUDA when a usable GPU is present, else the CPU
    assert auto.device[0] in ("cpu", "cuda") and auto.device[1]
    has_gpu = auto.device[0] == "cuda"
    auto.close()
    if has_gpu:
        gpu = orchard.load("orchard-random", device="cuda", threads=1)
        assert gpu.device[0] == "cuda"
        assert gpu.generate(prompt="x", regex="[0-9]{3}", temperature=1.0, seed=1).text.isdigit()
        gpu.close()
    else:  # asked for and unusable: an error that says why, never a silent CPU run
        with pytest.raises(orchard.OrchardError) as e:
            orchard.load("orchard-random", device="cuda", threads=1)
        assert str(e.value)
    with pytest.raises(ValueError):
        orchard.load("orchard-random", device="tpu")

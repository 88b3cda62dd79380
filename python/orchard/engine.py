"""orchard.load / orchard.Engine: the engine as a thin control plane. The model, the scheduler (continuous
batching), the grammar masks and the sampler all run in native code; Python builds the request, reads the
answer, and never holds the GIL while the engine works.

    engine = orchard.load()                     # the default model (SmolLM2-135M-Instruct)
    out = engine.generate(messages=[{"role": "user", "content": "A person?"}], schema=Person, temperature=0)
    out.json                                    # the parsed value; it validates against the schema

Requests go through exactly the server's request path (pie::Completions): the model's chat template and
BOS rule, the constraint or the tools as a grammar, the tool-call parser. A list of prompts or conversations
runs as one batch in the engine; generate() may also be called from many threads at once, and agenerate()
from asyncio.
"""
import asyncio
import json
from dataclasses import dataclass, field

from orchard import _orchard


@dataclass
class ToolCall:
    """A call the model made: the function's name and its arguments (parsed from JSON)."""
    name: str
    arguments: object
    id: str = ""


@dataclass
class Completion:
    """A whole answer. text: the answer's text (outside reasoning and tool calls); json: its parsed value when
    a schema was given (None when the text is not complete JSON: finish_reason "length"); tool_calls: the calls
    made; finish_reason: "stop", "length", "tool_calls" or "cancelled"; usage: token counts."""
    text: str
    finish_reason: str
    usage: dict
    json: object = None
    tool_calls: list = field(default_factory=list)
    reasoning: str = ""

    def __str__(self):
        return self.text


@dataclass
class Delta:
    """A piece of a streamed answer: text, reasoning, and tool-call pieces (dicts: index, id and name on a
    call's first piece, arguments fragments)."""
    text: str
    reasoning: str = ""
    tool_calls: list = field(default_factory=list)

    def __str__(self):
        return self.text


def _completion(reply, want_json):
    if reply["finish_reason"] == "error":
        raise _orchard.OrchardError(f"[generate] the request failed: {reply['error']}")
    calls = []
    for c in json.loads(reply["tool_calls"]):
        args = c["function"]["arguments"]
        try:
            args = json.loads(args)
        except (TypeError, json.JSONDecodeError):
            pass
        calls.append(ToolCall(c["function"]["name"], args, c.get("id", "")))
    value = None
    if want_json:
        try:
            value = json.loads(reply["content"])
        except json.JSONDecodeError:
            value = None
    return Completion(reply["content"], reply["finish_reason"], dict(reply["usage"]), value, calls,
                      reply["reasoning"])


class Stream:
    """The deltas of one answer, as an iterator; .completion holds the whole answer once it is exhausted.
    Closing it (or dropping it) cancels the request."""

    def __init__(self, native, want_json):
        self._native = native
        self._want_json = want_json
        self.completion = None

    def __iter__(self):
        return self

    def __next__(self):
        if self.completion is not None:
            raise StopIteration
        d = self._native.next()
        if d is None:
            self.completion = _completion(self._native.reply(), self._want_json)
            raise StopIteration
        return Delta(*d)

    def close(self):
        """Ends the request early (finish_reason "cancelled")."""
        self._native.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.completion is None:
            self.close()


class AsyncStream:
    """Stream for asyncio: `async for delta in stream`; each wait runs in the loop's executor."""

    def __init__(self, native, want_json):
        self._native = native
        self._want_json = want_json
        self.completion = None

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.completion is not None:
            raise StopAsyncIteration
        d = await asyncio.get_running_loop().run_in_executor(None, self._native.next)
        if d is None:
            self.completion = _completion(self._native.reply(), self._want_json)
            raise StopAsyncIteration
        return Delta(*d)

    def close(self):
        self._native.cancel()


class Tokenizer:
    """The model's tokenizer: text <-> token ids."""

    def __init__(self, native):
        self._native = native

    def encode(self, text, *, add_bos=False, add_eos=False, parse_special=False):
        """Token ids of `text` (str). add_bos/add_eos: add the model's BOS/EOS; parse_special: special-token text
        ('<|im_end|>') becomes the special token (otherwise it is plain text)."""
        if not isinstance(text, str):
            raise TypeError(f"encode: expected str, got {type(text).__name__}")
        return self._native.encode(text, add_bos, add_eos, parse_special)

    def decode(self, ids, *, skip_special=False, errors="replace"):
        """The text of `ids` (a split UTF-8 character decodes per `errors`)."""
        return self._native.decode_bytes(_token_ids(ids, "decode"), skip_special).decode("utf-8", errors)

    @property
    def vocab_size(self):
        return self._native.vocab_size

    @property
    def eos_token_ids(self):
        """Every id that ends generation."""
        return list(self._native.special_tokens["end_of_generation"])

    @property
    def bos_token_id(self):
        return self._native.special_tokens["bos"]

    def token_bytes(self, token_id):
        return self._native.token_bytes(token_id)


def _token_ids(ids, what):
    ids = list(ids)
    for i in ids:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"{what}: token ids must be ints, got {i!r}")
    return ids


def _schema_value(schema):
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise _orchard.SchemaError(f"[json_schema] the schema is not JSON: {e}") from None
    elif isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    if not isinstance(schema, dict):
        raise TypeError(f"generate: schema must be a JSON object (a dict, its JSON text or a pydantic model class), "
                        f"got {type(schema).__name__}")
    return schema


def _tool(t):
    if not isinstance(t, dict):
        raise TypeError(f"generate: each tool must be a dict, got {type(t).__name__}")
    if t.get("type") == "function" and "function" in t:
        return t
    return {"type": "function", "function": t}  # a bare function: name, description, parameters


def _tool_choice(choice):
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, str):
        return {"type": "function", "function": {"name": choice}}
    return choice


class Engine:
    """A model and the engine that runs it. See orchard.load()."""

    def __init__(self, model=None, *, device="auto", threads=None, max_running=16, max_batch_tokens=512,
                 context_length=None, kv_cache_bytes=None):
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"Engine: device must be 'auto', 'cpu' or 'cuda', got {device!r}")
        for name, v in (("threads", threads), ("context_length", context_length),
                        ("kv_cache_bytes", kv_cache_bytes)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ValueError(f"Engine: {name} must be a positive int or None, got {v!r}")
        if model is not None:
            model = str(model)
        self._native = _orchard.Engine(model, threads or 0, max_running, max_batch_tokens, context_length or 0,
                                       kv_cache_bytes or 0, device)
        self.tokenizer = Tokenizer(self._native.tokenizer)
        self._tokenizer_info = None

    @property
    def device(self):
        """Where the forward pass runs ("cpu" or "cuda") and why it was chosen: a (device, reason) pair."""
        return self._native.device()

    @property
    def name(self):
        """The model's name (its store name when it came from the model store)."""
        return self._native.store_name or self._native.name

    @property
    def tokenizer_info(self):
        """The model's vocabulary as an orchard.grammar.TokenizerInfo (logits rows: the model's), for
        compiling grammars against this model outside generate()."""
        if self._tokenizer_info is None:
            from orchard.grammar.tokenizer_info import TokenizerInfo
            self._tokenizer_info = TokenizerInfo._from_native(self._native.vocabulary())
        return self._tokenizer_info

    def attach_lora(self, name, path):
        """Attaches a LoRA adapter (a PEFT folder or a llama.cpp GGUF adapter) under `name`, without reloading
        the model; generate(lora=...) then selects it per request. Returns its details (name, path, rank,
        bytes). Raises ModelError when it cannot be read or does not fit the model, RequestError for a bad or
        taken name."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"attach_lora: name must be a non-empty str, got {name!r}")
        return self._native.attach_lora(name, str(path))

    def detach_lora(self, name):
        """Detaches an adapter: later requests naming it raise RequestError; running ones finish with it."""
        self._native.detach_lora(name)

    @property
    def loras(self):
        """The attached adapters: dicts of name, path, rank, bytes, resident, in_use."""
        return self._native.loras()

    def _bodies(self, prompt, messages, schema, grammar, lark, regex, tools, tool_choice, max_tokens, temperature,
                top_p, top_k, min_p, seed, stop, parallel_tool_calls=None, lora=None):
        if (prompt is None) == (messages is None):
            raise ValueError("generate: give exactly one of prompt= and messages=")
        constraints = [n for n, v in (("schema", schema), ("grammar", grammar), ("lark", lark), ("regex", regex))
                       if v is not None]
        if len(constraints) > 1:
            raise ValueError(f"generate: at most one constraint may be given, got {', '.join(constraints)}")
        if tools is not None and constraints:
            raise ValueError(f"generate: tools and {constraints[0]} cannot be combined (the tools are the constraint)")
        if tools is not None and prompt is not None:
            raise ValueError("generate: tools need messages= (the chat template describes the tools)")
        fields = {"max_tokens": max_tokens}
        for name, v in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k), ("min_p", min_p),
                        ("seed", seed), ("stop", stop)):
            if v is not None:
                fields[name] = v
        if schema is not None:
            fields["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "output", "schema": _schema_value(schema)}}
        for name, v in (("grammar", grammar), ("lark", lark), ("regex", regex)):
            if v is not None:
                if not isinstance(v, str):
                    raise TypeError(f"generate: {name} must be the grammar's text (str), got {type(v).__name__}")
                fields[name] = v
        if tools is not None:
            fields["tools"] = [_tool(t) for t in tools]
            if tool_choice is not None:
                fields["tool_choice"] = _tool_choice(tool_choice)
            if parallel_tool_calls is not None:
                fields["parallel_tool_calls"] = bool(parallel_tool_calls)
        elif tool_choice is not None or parallel_tool_calls is not None:
            raise ValueError("generate: tool_choice and parallel_tool_calls need tools=")
        if lora is not None:
            fields["lora"] = _lora_field(lora)

        if prompt is not None:
            if isinstance(prompt, str):
                prompts, batched = [prompt], False
            elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, int) for p in prompt):
                prompts, batched = [list(prompt)], False  # token ids
            elif isinstance(prompt, (list, tuple)) and prompt:
                prompts, batched = list(prompt), True
            else:
                raise TypeError("generate: prompt must be a str, token ids, or a non-empty list of them")
            return [dict(fields, prompt=p) for p in prompts], batched
        if isinstance(messages, (list, tuple)) and messages and all(isinstance(m, dict) for m in messages):
            return [dict(fields, messages=list(messages))], False
        if isinstance(messages, (list, tuple)) and messages and all(isinstance(c, (list, tuple)) for c in messages):
            return [dict(fields, messages=list(c)) for c in messages], True
        raise TypeError("generate: messages must be a conversation (a list of message dicts) or a list of them")

    def _start(self, bodies):
        streams = []
        try:
            for b in bodies:
                streams.append(self._native.start(json.dumps(b, ensure_ascii=False)))
        except BaseException:
            for s in streams:
                s.cancel()
            raise
        return streams

    @staticmethod
    def _drain(native, want_json):
        while native.next() is not None:
            pass
        return _completion(native.reply(), want_json)

    def generate(self, prompt=None, messages=None, *, schema=None, grammar=None, lark=None, regex=None, tools=None,
                 tool_choice=None, parallel_tool_calls=None, max_tokens=256, temperature=None, top_p=None, top_k=None,
                 min_p=None, seed=None, stop=None, lora=None, stream=False):
        """Generates an answer.

        prompt: text (or token ids) continued as is; or messages: a conversation ([{"role", "content"}, ...])
        through the model's chat template. A list of prompts or of conversations is a batch: every request is
        submitted at once, the engine runs them together, and a list of Completions comes back.

        At most one constraint: schema (a JSON Schema: dict, JSON text or pydantic model class; the output is
        compact JSON that validates), grammar (GBNF text), lark (Lark text) or regex (the whole output matches);
        or tools (OpenAI tool dicts, or bare {"name", "description", "parameters"}) with tool_choice ("auto",
        "required", "none" or a function's name) and parallel_tool_calls (default True; False: at most one call),
        whose calls come back in .tool_calls with parsed arguments.

        lora: adapters attached with attach_lora() to run with, stacked: a name, a list of names (scale 1), or
        {name: scale}.

        temperature (default 1; 0 is greedy), top_p, top_k, min_p, seed, stop: as the OpenAI API. stream=True
        returns a Stream of Deltas instead (one request only).

        Raises ValueError/TypeError for bad arguments, RequestError (.param: the field at fault) for a request
        the engine rejects, SchemaError / GrammarError (through RequestError's message) for a constraint that
        does not compile.
        """
        bodies, batched = self._bodies(prompt, messages, schema, grammar, lark, regex, tools, tool_choice, max_tokens,
                                       temperature, top_p, top_k, min_p, seed, stop, parallel_tool_calls, lora)
        want_json = schema is not None
        if stream:
            if batched:
                raise ValueError("generate: stream=True takes one prompt or conversation, not a batch")
            return Stream(self._start(bodies)[0], want_json)
        natives = self._start(bodies)
        results = [self._drain(n, want_json) for n in natives]
        return results if batched else results[0]

    async def agenerate(self, prompt=None, messages=None, **kwargs):
        """generate() for asyncio: the same arguments; awaits the answer (or returns an AsyncStream with
        stream=True) while the event loop runs on. Many agenerate() calls at once run as one batch in the
        engine."""
        stream = kwargs.pop("stream", False)
        bodies, batched = self._bodies(prompt, messages, **_defaults(kwargs))
        want_json = kwargs.get("schema") is not None
        loop = asyncio.get_running_loop()
        natives = await loop.run_in_executor(None, self._start, bodies)
        if stream:
            if batched:
                for n in natives:
                    n.cancel()
                raise ValueError("agenerate: stream=True takes one prompt or conversation, not a batch")
            return AsyncStream(natives[0], want_json)
        results = await asyncio.gather(*(loop.run_in_executor(None, self._drain, n, want_json) for n in natives))
        return list(results) if batched else results[0]

    def stats(self):
        """Engine counters: requests, tokens, steps, grammar compiles and cache hits, mask and forward seconds."""
        return self._native.stats()

    def close(self):
        """Cancels what still runs and stops the engine."""
        self._native.shutdown(True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_GENERATE_KEYWORDS = ("schema", "grammar", "lark", "regex", "tools", "tool_choice", "parallel_tool_calls",
                      "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "lora")


def _lora_field(lora):
    """generate()'s lora= as the request's `lora` field: [{"id": name, "scale": s}]."""
    if isinstance(lora, str):
        lora = {lora: 1.0}
    elif isinstance(lora, (list, tuple)):
        if not all(isinstance(n, str) for n in lora):
            raise TypeError(f"generate: lora must be a name, a list of names or {{name: scale}}, got {lora!r}")
        lora = {n: 1.0 for n in lora}
    if not isinstance(lora, dict):
        raise TypeError(f"generate: lora must be a name, a list of names or {{name: scale}}, got {lora!r}")
    out = []
    for name, scale in lora.items():
        if not isinstance(name, str) or isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"generate: lora {{name: scale}} needs str names and number scales, got {name!r}: {scale!r}")
        out.append({"id": name, "scale": float(scale)})
    return out


def _defaults(kwargs):
    unknown = set(kwargs) - set(_GENERATE_KEYWORDS)
    if unknown:
        raise TypeError(f"agenerate: unexpected keyword argument(s) {', '.join(sorted(unknown))}")
    out = {k: None for k in _GENERATE_KEYWORDS}
    out["max_tokens"] = 256
    out.update(kwargs)
    return out


def load(model=None, *, device="auto", threads=None, max_running=16, max_batch_tokens=512, context_length=None,
         kv_cache_bytes=None):
    """Opens a model and starts an engine over it.

    model: a .gguf file, a Hugging Face folder, a llama2.c checkpoint, a stored model's name
    ("smollm2:135m-instruct-q4_1"), "orchard-random" (the embedded random-weight model, for tests), or None for
    the default model (SmolLM2-135M-Instruct from the model store; scripts/fetch-models.sh fetches it).
    device: "auto" (CUDA when a usable GPU is present, else the CPU), "cpu" or "cuda" (an error saying why when
    no GPU can be used). threads: forward-pass threads (default: all cores).
    max_running: sequences decoding at once. context_length: per sequence (default: the model's, at most 8192).

    Raises ModelNotFoundError (a FileNotFoundError) when nothing by that name exists, ModelError when the model
    cannot be loaded.
    """
    return Engine(model, device=device, threads=threads, max_running=max_running, max_batch_tokens=max_batch_tokens,
                  context_length=context_length, kv_cache_bytes=kv_cache_bytes)

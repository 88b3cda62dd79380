"""GrammarCompiler: JSON Schemas, GBNF or Lark grammars and regexes compiled against a TokenizerInfo, with
XGrammar's method names and defaults, and a compile cache."""
import json

from orchard import _orchard
from orchard.grammar.strict_mode import strictly
from orchard.grammar.tokenizer_info import TokenizerInfo

_DEFAULT_MAX_WHITESPACE = 4


def _schema_object(schema):
    """A schema given as text, a dict (or bool), or a pydantic model class -> its JSON value."""
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise _orchard.SchemaError(f"[json_schema] the schema is not JSON: {e}") from None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()  # pydantic v2
    if isinstance(schema, type) and hasattr(schema, "schema"):
        return schema.schema()  # pydantic v1
    if isinstance(schema, (dict, bool)):
        return schema
    raise TypeError(f"compile_json_schema: schema must be JSON text, a dict or a pydantic model class, "
                    f"got {type(schema).__name__}")


def _layout(any_whitespace, indent, separators):
    """XGrammar's whitespace options -> Orchard's layout (flexible, compact with separators, indented), the
    indent width and the (item, key) separators."""
    if any_whitespace:
        return "flexible", 2, (",", ":")
    if separators is not None:
        separators = tuple(separators)
        if len(separators) != 2 or not all(isinstance(s, str) for s in separators):
            raise ValueError(f"compile_json_schema: separators must be two strings (item, key), got {separators!r}")
    if indent is None:
        return "compact", 2, separators or (", ", ": ")  # json.dumps' default on one line
    if not isinstance(indent, int) or isinstance(indent, bool) or indent < 0:
        raise ValueError(f"compile_json_schema: indent must be a non-negative int, got {indent!r}")
    if separators not in (None, (",", ": ")):
        raise ValueError(f"compile_json_schema: indented JSON takes separators (',', ': '), got {separators!r}")
    return "indented", indent, (",", ":")


class GrammarCompiler:
    """Compiles grammars against one TokenizerInfo; the compiled grammars are cached by content.

    GrammarCompiler(tokenizer_info, *, max_threads=8, cache_enabled=True, table_build="background")

    max_threads: threads that build the token tables (at most 8 are used). table_build: when the token tables
    are built -- "background" (the default, as Orchard's engine: compile returns once the automaton is built,
    the tables follow on background threads, and a mask that needs one first builds it), "compile" (all before
    compile returns) or "first_use" (each at its first mask). The masks are the same either way.
    """

    def __init__(self, tokenizer_info, *, max_threads=8, cache_enabled=True, table_build="background",
                 max_compile_ms=10_000.0):
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise TypeError(f"GrammarCompiler: expected a TokenizerInfo, got {type(tokenizer_info).__name__}")
        if not isinstance(max_threads, int) or isinstance(max_threads, bool) or max_threads < 1:
            raise ValueError(f"GrammarCompiler: max_threads must be a positive int, got {max_threads!r}")
        self.tokenizer_info = tokenizer_info
        self._args = dict(threads=min(max_threads, 8), cache_enabled=bool(cache_enabled), table_build=table_build,
                          max_compile_ms=float(max_compile_ms))
        self._native = _orchard.Compiler(tokenizer_info._vocab, **self._args)

    def compile_json_schema(self, schema, *, any_whitespace=True, indent=None, separators=None, strict_mode=True,
                            max_whitespace_cnt=None, any_order=False):
        """The JSON texts whose value validates against `schema` (text, dict, or pydantic model class).

        any_whitespace (default): whitespace wherever JSON allows it, each run at most max_whitespace_cnt
        characters (default 4; XGrammar's default is unbounded). Otherwise, as json.dumps writes it: one line
        with `separators` (default (", ", ": "); (",", ":") for no whitespace) when indent is None, or indented
        by `indent` spaces (separators (",", ": ")). strict_mode (default, as XGrammar): object schemas that
        list properties and say nothing of others take no others, and arrays with prefixItems no further items
        (strict_mode.py says exactly where); strict_mode=False follows the schema as written. any_order: object
        members in any order, each declared one at most once, the required ones present (exact; objects of more
        than 9 declared properties are a SchemaError in this mode).

        Raises SchemaError (.pointer: the JSON pointer of the schema at fault; .keyword) for a malformed schema
        or a feature that cannot be enforced exactly, GrammarLimitError past a bound.
        """
        value = _schema_object(schema)
        if strict_mode:
            value = strictly(value)
        layout, width, (item_separator, key_separator) = _layout(any_whitespace, indent, separators)
        ws = _DEFAULT_MAX_WHITESPACE if max_whitespace_cnt is None else max_whitespace_cnt
        if not isinstance(ws, int) or isinstance(ws, bool) or ws < 1:
            raise ValueError(f"compile_json_schema: max_whitespace_cnt must be a positive int, got {ws!r}")
        return self._native.compile_json_schema(json.dumps(value, ensure_ascii=False), layout=layout, indent=width,
                                                max_whitespace=ws, any_order=bool(any_order),
                                                item_separator=item_separator, key_separator=key_separator)

    def compile_builtin_json_grammar(self):
        """Any JSON value, whitespace wherever JSON allows it."""
        return self._native.compile_json_schema("{}", layout="flexible")

    def compile_grammar(self, grammar, *, root_rule_name=None, format="gbnf"):
        """A GBNF grammar (llama.cpp's format; XGrammar's EBNF reads the same for the common subset), or with
        format="lark" a Lark grammar (docs/grammars.md). root_rule_name: default "root" (GBNF), "start" (Lark).
        Raises GrammarError with .line and .column."""
        if not isinstance(grammar, str):
            raise TypeError(f"compile_grammar: expected the grammar's text (str), got {type(grammar).__name__}")
        if format == "gbnf":
            return self._native.compile_gbnf(grammar, root_rule_name or "root")
        if format == "lark":
            return self._native.compile_lark(grammar, root_rule_name or "start")
        raise ValueError(f"compile_grammar: format must be 'gbnf' or 'lark', got {format!r}")

    def compile_regex(self, regex):
        """The texts that `regex` (ECMA-262 syntax) matches whole. Raises GrammarError with .column."""
        if not isinstance(regex, str):
            raise TypeError(f"compile_regex: expected the pattern (str), got {type(regex).__name__}")
        return self._native.compile_regex(regex)

    def clear_cache(self):
        self._native = _orchard.Compiler(self.tokenizer_info._vocab, **self._args)

    @property
    def cache_size(self):
        """Compiled grammars held in the cache."""
        return self._native.cache_size

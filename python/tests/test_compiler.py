"""GrammarCompiler: each front-end (JSON Schema in every layout, GBNF, Lark, regex, the built-in JSON
grammar), strict mode, the cache, and the errors with their places."""
import json

import pytest

import orchard.grammar as xgr
from conftest import EOS


def accepts(compiled, text, stop=True):
    m = xgr.GrammarMatcher(compiled)
    return m.accept_string(text) and (not stop or m.accept_token(EOS))


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}


def test_json_schema_from_dict_text_and_pydantic(small_compiler):
    for schema in (PERSON, json.dumps(PERSON)):
        g = small_compiler.compile_json_schema(schema)
        assert accepts(g, '{"name": "ab", "age": 12}')
        assert accepts(g, '{ "name" : "x" }')
        assert not accepts(g, '{"age": 1}')  # name is required
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    g = small_compiler.compile_json_schema(Person)
    assert accepts(g, '{"name": "a", "age": 1}')
    assert not accepts(g, '{"name": "a"}')


def test_json_layouts(small_compiler):
    compact = small_compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(",", ":"))
    assert accepts(compact, '{"name":"a","age":1}')
    assert not accepts(compact, '{"name": "a"}')
    indented = small_compiler.compile_json_schema(PERSON, any_whitespace=False, indent=2)
    assert accepts(indented, '{\n  "name": "a",\n  "age": 1\n}')
    assert not accepts(indented, '{"name":"a"}')
    short_runs = small_compiler.compile_json_schema(PERSON, max_whitespace_cnt=1)
    assert accepts(short_runs, '{ "name": "a"}')
    assert not accepts(short_runs, '{  "name": "a"}')


def test_json_dumps_separators(small_compiler):
    spaced = small_compiler.compile_json_schema(PERSON, any_whitespace=False)  # json.dumps' default (", ", ": ")
    assert accepts(spaced, '{"name": "a", "age": 1}')
    assert not accepts(spaced, '{"name":"a","age":1}')
    newline = small_compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(",\n", ":"))
    assert accepts(newline, '{"name":"a",\n"age":1}')


def test_unsupported_layouts_are_errors(small_compiler):
    with pytest.raises(ValueError, match="item_separator"):
        small_compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(";", ":"))
    with pytest.raises(ValueError, match="key_separator"):
        small_compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(",", "="))
    with pytest.raises(ValueError, match="two strings"):
        small_compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(",",))
    with pytest.raises(ValueError, match="separators"):
        small_compiler.compile_json_schema(PERSON, any_whitespace=False, indent=2, separators=(";", "="))
    with pytest.raises(ValueError, match="indent"):
        small_compiler.compile_json_schema(PERSON, any_whitespace=False, indent=-1)
    with pytest.raises(ValueError, match="max_whitespace_cnt"):
        small_compiler.compile_json_schema(PERSON, max_whitespace_cnt=0)
    with pytest.raises(TypeError, match="pydantic"):
        small_compiler.compile_json_schema(42)


def test_strict_mode(small_compiler):
    extra = '{"name": "a", "x": 1}'
    assert not accepts(small_compiler.compile_json_schema(PERSON), extra)  # XGrammar's default
    assert accepts(small_compiler.compile_json_schema(PERSON, strict_mode=False), extra)
    tuple_schema = {"type": "array", "prefixItems": [{"type": "integer"}]}
    assert not accepts(small_compiler.compile_json_schema(tuple_schema), "[1, 2]")
    assert accepts(small_compiler.compile_json_schema(tuple_schema, strict_mode=False), "[1, 2]")
    # Members declared by another branch of an allOf stay allowed.
    merged = {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}}]}
    assert accepts(small_compiler.compile_json_schema(merged), '{"a": 1, "b": 2}')


def test_any_order(small_compiler):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    assert not accepts(small_compiler.compile_json_schema(schema), '{"b": 1, "a": 2}')
    g = small_compiler.compile_json_schema(schema, any_order=True)
    assert accepts(g, '{"b": 1, "a": 2}') and not accepts(g, '{"b": 1, "b": 2}')


def test_schema_errors_carry_the_pointer(small_compiler):
    with pytest.raises(xgr.SchemaError) as e:
        small_compiler.compile_json_schema({"properties": {"age": {"minimum": "ten"}}})
    assert e.value.pointer == "/properties/age/minimum" or e.value.pointer == "/properties/age"
    assert e.value.keyword == "minimum"
    assert "minimum" in str(e.value) and isinstance(e.value, ValueError)
    with pytest.raises(xgr.SchemaError, match="not JSON"):
        small_compiler.compile_json_schema("{not json")


def test_builtin_json_grammar(small_compiler):
    g = small_compiler.compile_builtin_json_grammar()
    for text in ('{"a": [1, true, null]}', "[]", '"ab"', "12", "false"):
        assert accepts(g, text), text
    assert not accepts(g, "{,}")


def test_gbnf_and_lark(small_compiler):
    g = small_compiler.compile_grammar('root ::= "ab" num\nnum ::= [0-9]+')
    assert accepts(g, "ab12") and not accepts(g, "ab")
    g = small_compiler.compile_grammar('main ::= "x"', root_rule_name="main")
    assert accepts(g, "x")
    lark = small_compiler.compile_grammar('start: "ab" NUM\nNUM: /[0-9]+/', format="lark")
    assert accepts(lark, "ab7") and not accepts(lark, "ab")


def test_grammar_errors_carry_line_and_column(small_compiler):
    with pytest.raises(xgr.GrammarError) as e:
        small_compiler.compile_grammar('root ::= "a"\nitem ::= ( "b"')
    assert (e.value.line, e.value.column) == (2, 15)
    with pytest.raises(xgr.GrammarError) as e:
        small_compiler.compile_grammar('root ::= missing')
    assert "missing" in str(e.value)
    with pytest.raises(xgr.GrammarError) as e:
        small_compiler.compile_grammar('start: "a" (', format="lark")
    assert e.value.line == 1
    with pytest.raises(ValueError, match="format"):
        small_compiler.compile_grammar('root ::= "a"', format="ebnf")
    with pytest.raises(TypeError):
        small_compiler.compile_grammar(b'root ::= "a"')


def test_regex(small_compiler):
    g = small_compiler.compile_regex("[0-9]{3}-[a-c]+")
    assert accepts(g, "123-ab") and not accepts(g, "12-ab")
    with pytest.raises(xgr.GrammarError) as e:
        small_compiler.compile_regex("ab(?=c)")  # lookahead: never approximated
    assert e.value.column is not None
    with pytest.raises(TypeError):
        small_compiler.compile_regex(3)


def test_limits(small_info):
    tight = xgr.GrammarCompiler(small_info, max_compile_ms=0.001, cache_enabled=False)
    with pytest.raises(xgr.GrammarLimitError):
        tight.compile_regex("(a|b){200}(c|d){200}[0-9]{50}")


def test_cache(small_info):
    c = xgr.GrammarCompiler(small_info)
    c.compile_regex("a+")
    c.compile_regex("a+")
    assert c.cache_size == 1
    c.clear_cache()
    assert c.cache_size == 0
    nocache = xgr.GrammarCompiler(small_info, cache_enabled=False)
    nocache.compile_regex("a+")
    assert nocache.cache_size == 0


def test_compiler_arguments(small_info):
    with pytest.raises(TypeError, match="TokenizerInfo"):
        xgr.GrammarCompiler(object())
    with pytest.raises(ValueError, match="max_threads"):
        xgr.GrammarCompiler(small_info, max_threads=0)
    with pytest.raises(ValueError, match="table_build"):
        xgr.GrammarCompiler(small_info, table_build="never")


@pytest.mark.parametrize("table_build", ["compile", "background", "first_use"])
def test_table_builds_give_the_same_masks(small_info, table_build):
    import numpy as np
    c = xgr.GrammarCompiler(small_info, table_build=table_build, cache_enabled=False)
    g = c.compile_json_schema(PERSON)
    ref = xgr.GrammarMatcher(xgr.GrammarCompiler(small_info, table_build="compile").compile_json_schema(PERSON))
    m = xgr.GrammarMatcher(g)
    a = xgr.allocate_token_bitmask(1, small_info.vocab_size, library="numpy")
    b = a.copy()
    for piece in ['{', '"', 'name', '"', ':', ' ', '"', 'ab', '"', '}']:
        m.fill_next_token_bitmask(a)
        ref.fill_next_token_bitmask(b)
        assert np.array_equal(a, b)
        assert m.accept_string(piece) and ref.accept_string(piece)
    assert g.stats["states"] > 0 and g.memory_size_bytes > 0 and g.vocab_size == small_info.vocab_size
    assert g.wait_for_tables()["tables"] >= 1

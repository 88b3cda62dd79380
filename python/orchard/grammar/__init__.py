"""Orchard's grammar engine (pse) with XGrammar's Python names and shapes.

    import orchard.grammar as xgr          # instead of: import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiler = xgr.GrammarCompiler(info)
    matcher = xgr.GrammarMatcher(compiler.compile_json_schema(schema))
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    xgr.apply_token_bitmask_inplace(logits, bitmask)
    matcher.accept_token(token_id)

Masks are computed in native code with the GIL released; numpy arrays and CPU torch tensors are used in
place (DLPack or the buffer protocol), never copied. Errors are Python exceptions carrying where the fault
is: SchemaError.pointer (the JSON pointer) and .keyword, GrammarError.line and .column.
"""
from orchard._orchard import (CompiledGrammar, GrammarError, GrammarLimitError, GrammarMatcher,
                              MatcherTerminatedError, OrchardError, SchemaError)
from orchard.grammar.bitmask import (allocate_token_bitmask, apply_token_bitmask_inplace, bitmask_dtype,
                                     get_bitmask_shape, reset_token_bitmask)
from orchard.grammar.compiler import GrammarCompiler
from orchard.grammar.tokenizer_info import TokenizerInfo, VocabType
from orchard.grammar import contrib


def __getattr__(name):
    # The transformers processor imports transformers: only when asked for.
    if name == "LogitsProcessor":
        from orchard.grammar.contrib.hf import LogitsProcessor
        return LogitsProcessor
    raise AttributeError(f"module 'orchard.grammar' has no attribute '{name}'")


__all__ = [
    "TokenizerInfo", "VocabType", "GrammarCompiler", "CompiledGrammar", "GrammarMatcher", "LogitsProcessor",
    "allocate_token_bitmask", "apply_token_bitmask_inplace", "reset_token_bitmask", "get_bitmask_shape",
    "bitmask_dtype", "OrchardError", "GrammarError", "SchemaError", "GrammarLimitError", "MatcherTerminatedError",
]

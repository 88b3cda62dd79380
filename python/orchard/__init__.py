"""Orchard from Python: a structured-generation-first inference engine.

Two APIs over one native module (orchard._orchard, built from the C++ project):

- ``orchard.grammar``: the grammar engine (pse) with XGrammar's names and shapes -- TokenizerInfo,
  GrammarCompiler, GrammarMatcher, allocate_token_bitmask, apply_token_bitmask_inplace, and a
  transformers LogitsProcessor -- so that switching from XGrammar is a changed import.
- ``orchard.load`` / ``orchard.Engine``: the engine as a thin control plane: load a model, generate
  (free text, or constrained by a JSON Schema, a grammar, a regex or tools), stream, batch, asyncio.
"""
from orchard._orchard import (CapacityError, GrammarError, GrammarLimitError, MatcherTerminatedError,
                              ModelError, ModelNotFoundError, OrchardError, RequestError, SchemaError,
                              TokenizerError)
from orchard.engine import Completion, Delta, Engine, Stream, AsyncStream, Tokenizer, ToolCall, load

__version__ = "0.1.0"

__all__ = [
    "load", "Engine", "Completion", "Delta", "Stream", "AsyncStream", "Tokenizer", "ToolCall",
    "OrchardError", "GrammarError", "SchemaError", "GrammarLimitError", "MatcherTerminatedError", "RequestError",
    "CapacityError", "ModelError", "ModelNotFoundError", "TokenizerError",
]

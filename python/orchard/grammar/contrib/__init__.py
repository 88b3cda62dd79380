"""Integrations with other libraries (as xgrammar.contrib): ``orchard.grammar.contrib.hf`` holds the
transformers LogitsProcessor. Imported on first use, so transformers is needed only there."""


def __getattr__(name):
    if name == "hf":
        import importlib
        return importlib.import_module("orchard.grammar.contrib.hf")
    raise AttributeError(f"module 'orchard.grammar.contrib' has no attribute '{name}'")

"""A transformers LogitsProcessor that keeps generate()'s output inside a compiled grammar (XGrammar's
xgrammar.contrib.hf.LogitsProcessor, same name and use):

    compiled = orchard.grammar.GrammarCompiler(info).compile_json_schema(schema)
    out = model.generate(**inputs, logits_processor=[LogitsProcessor(compiled)], max_new_tokens=256)

One matcher per row of the batch; each call accepts the row's last token and masks the row's logits. Rows
that ended (an end-of-sequence token accepted) are left unmasked, since generate() pads them whatever is
sampled. Greedy decoding and sampling are supported; beam search is not (beams reorder rows).
"""
import transformers

from orchard import _orchard
from orchard.grammar.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace


class LogitsProcessor(transformers.LogitsProcessor):
    def __init__(self, compiled_grammar):
        grammars = compiled_grammar if isinstance(compiled_grammar, (list, tuple)) else [compiled_grammar]
        if not grammars or not all(isinstance(g, _orchard.CompiledGrammar) for g in grammars):
            raise TypeError("LogitsProcessor: expected a CompiledGrammar or a list of them (one per batch row)")
        self.compiled_grammars = list(grammars)
        self.matchers = None
        self.bitmask = None
        self.prefix_len = 0
        self.vocab_size = grammars[0].vocab_size

    def __call__(self, input_ids, scores):
        batch = input_ids.shape[0]
        if self.matchers is None:
            if len(self.compiled_grammars) not in (1, batch):
                raise ValueError(f"LogitsProcessor: {len(self.compiled_grammars)} grammars for a batch of {batch} "
                                 f"rows (give one, or one per row)")
            grammars = self.compiled_grammars * batch if len(self.compiled_grammars) == 1 else self.compiled_grammars
            self.matchers = [_orchard.GrammarMatcher(g) for g in grammars]
            self.bitmask = allocate_token_bitmask(batch, self.vocab_size, library="torch")
            self.prefix_len = input_ids.shape[1]
        else:
            if batch != len(self.matchers):
                raise ValueError(f"LogitsProcessor: the batch changed from {len(self.matchers)} to {batch} rows "
                                 f"(beam search is not supported; use a fresh processor per generate() call)")
            last = input_ids[:, -1].tolist()
            for i, m in enumerate(self.matchers):
                if not m.is_terminated() and not m.accept_token(last[i]):
                    raise RuntimeError(f"LogitsProcessor: row {i}: token {last[i]} is not allowed by the grammar "
                                       f"(was the processor's mask applied to every step?)")
        if scores.shape[-1] < self.vocab_size:
            raise ValueError(f"LogitsProcessor: the logits have {scores.shape[-1]} columns, fewer than the grammar's "
                             f"vocabulary ({self.vocab_size}); build the TokenizerInfo with "
                             f"vocab_size=model.config.vocab_size")
        rows = [i for i, m in enumerate(self.matchers) if not m.is_terminated()]
        for i in rows:
            self.matchers[i].fill_next_token_bitmask(self.bitmask, i)
        if rows:
            apply_token_bitmask_inplace(scores, self.bitmask, vocab_size=self.vocab_size, indices=rows)
            if scores.shape[-1] > self.vocab_size:  # columns past the vocabulary are never tokens
                scores[rows, self.vocab_size:] = float("-inf")
        return scores

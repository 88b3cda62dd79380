"""GrammarMatcher: accept, masks (checked against accept_token on every token), rollback, fork, reset,
termination, the forced continuation, threads, and every error."""
import threading

import numpy as np
import pytest

import orchard.grammar as xgr
from conftest import EOS, SMALL_TEXT, tok


def allowed(bitmask_row, n):
    bits = np.unpackbits(bitmask_row.view(np.uint8), bitorder="little")[:n]
    return set(np.flatnonzero(bits).tolist())


@pytest.fixture
def number_matcher(small_compiler):
    return xgr.GrammarMatcher(small_compiler.compile_regex("ab[0-9]+"))


def new_mask(info, batch=1):
    return xgr.allocate_token_bitmask(batch, info.vocab_size, library="numpy")


def test_mask_is_exactly_the_tokens_accept_token_takes(small_info, small_compiler):
    g = small_compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "boolean"}},
                                            "required": ["a"]}, any_whitespace=False, separators=(",", ":"))
    m = xgr.GrammarMatcher(g)
    mask = new_mask(small_info)
    for piece in ['{"', "a", '":', "true", "}"]:
        m.fill_next_token_bitmask(mask)
        expect = {t for t in range(small_info.vocab_size) if m.fork().accept_token(t)}
        assert allowed(mask[0], small_info.vocab_size) == expect
        assert m.accept_string(piece)
    m.fill_next_token_bitmask(mask)
    assert allowed(mask[0], small_info.vocab_size) == {EOS}
    assert m.is_completed() and not m.is_terminated()
    assert m.accept_token(EOS) and m.is_terminated()


def test_accept_token_and_string(number_matcher):
    m = number_matcher
    assert not m.accept_token(tok("1"))  # refused: unchanged
    assert m.accept_token(tok("ab"))
    assert m.accept_string("1") and m.accept_string(b"2")
    assert not m.accept_string("x")
    assert m.num_accepted_steps == 3
    assert m.is_completed()


def test_rollback_fork_reset(number_matcher, small_info):
    m = number_matcher
    m.accept_token(tok("ab"))
    m.accept_token(tok("1"))
    f = m.fork()
    assert f.accept_token(tok("2")) and f.num_accepted_steps == 3 and m.num_accepted_steps == 2
    m.rollback(1)
    assert m.num_accepted_steps == 1 and not m.is_completed()
    a, b = new_mask(small_info), new_mask(small_info)
    m.fill_next_token_bitmask(a)
    m.accept_token(tok("7"))
    m.rollback()
    m.fill_next_token_bitmask(b)
    assert np.array_equal(a, b)  # rollback then the same mask
    m.reset()
    assert m.num_accepted_steps == 0 and m.accept_token(tok("ab"))


def test_jump_forward(small_compiler):
    m = xgr.GrammarMatcher(small_compiler.compile_grammar('root ::= "abc" [0-9] "é!"'))
    assert m.find_jump_forward_string() == "abc"
    assert m.num_accepted_steps == 0  # unchanged
    m.accept_string("abc1")
    assert m.find_jump_forward_string() == "é!"


def test_terminate_without_stop_token(small_compiler):
    g = small_compiler.compile_regex("ab")
    m = xgr.GrammarMatcher(g, terminate_without_stop_token=True)
    m.accept_token(tok("ab"))
    assert m.is_terminated() and m.must_stop()


def test_use_after_termination_is_an_error(number_matcher, small_info):
    m = number_matcher
    m.accept_string("ab1")
    assert m.accept_token(EOS)
    mask = new_mask(small_info)
    for call in (lambda: m.accept_token(tok("2")), lambda: m.accept_string("2"),
                 lambda: m.fill_next_token_bitmask(mask)):
        with pytest.raises(xgr.MatcherTerminatedError, match="terminated"):
            call()
    m.rollback(1)  # undoing the stop token revives it
    assert not m.is_terminated() and m.accept_string("2")


def test_bad_token_ids_and_rollbacks(number_matcher, small_info):
    m = number_matcher
    for bad in (-1, small_info.vocab_size, 2**40):
        with pytest.raises(ValueError, match="outside"):
            m.accept_token(bad)
    with pytest.raises(ValueError):
        m.rollback(1)  # nothing accepted yet
    with pytest.raises(ValueError, match=">= 0"):
        m.rollback(-1)
    with pytest.raises(TypeError, match="str or bytes"):
        m.accept_string(12)


def test_bitmask_argument_errors(number_matcher, small_info):
    m = number_matcher
    words = (small_info.vocab_size + 31) // 32
    with pytest.raises(TypeError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((1, words), dtype=np.int64))
    with pytest.raises(TypeError, match="int32"):
        m.fill_next_token_bitmask([0] * words)
    with pytest.raises(ValueError, match="needs"):
        m.fill_next_token_bitmask(np.zeros((1, words + 1), dtype=np.int32))
    with pytest.raises(ValueError, match="dimensions"):
        m.fill_next_token_bitmask(np.zeros((1, 1, words), dtype=np.int32))
    with pytest.raises(IndexError, match="index 2"):
        m.fill_next_token_bitmask(np.zeros((2, words), dtype=np.int32), 2)
    with pytest.raises(ValueError, match="contiguous"):
        m.fill_next_token_bitmask(np.zeros((1, 2 * words), dtype=np.int32)[:, ::2])
    ro = np.zeros((1, words), dtype=np.int32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        m.fill_next_token_bitmask(ro)


def test_bitmask_rows_and_1d(number_matcher, small_info):
    batch = new_mask(small_info, 3)
    assert number_matcher.fill_next_token_bitmask(batch, 2) is True
    assert (batch[0] == -1).all() and (batch[1] == -1).all()
    assert allowed(batch[2], small_info.vocab_size) == {tok("a"), tok("ab")}
    one = np.full(batch.shape[1], 0xFFFFFFFF, dtype=np.uint32)
    number_matcher.fill_next_token_bitmask(one)
    assert np.array_equal(one.view(np.int32), batch[2])


def test_torch_bitmask_in_place(number_matcher, small_info):
    torch = pytest.importorskip("torch")
    t = xgr.allocate_token_bitmask(2, small_info.vocab_size)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.int32
    number_matcher.fill_next_token_bitmask(t, 1)
    assert allowed(t[1].numpy(), small_info.vocab_size) == {tok("a"), tok("ab")}


def test_matchers_on_threads_give_the_same_masks(small_compiler, small_info):
    g = small_compiler.compile_json_schema({"type": "array", "items": {"type": "integer"}})
    steps = ["[", "12", ",", " ", "1", "]"]

    def run(out):
        m = xgr.GrammarMatcher(g)
        mask = new_mask(small_info)
        for s in steps:
            m.fill_next_token_bitmask(mask)
            out.append(mask.copy())
            assert m.accept_string(s)

    ref = []
    run(ref)
    outs = [[] for _ in range(4)]
    threads = [threading.Thread(target=run, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        assert len(o) == len(steps) and all(np.array_equal(a, b) for a, b in zip(o, ref))


def test_properties(number_matcher, small_info):
    assert number_matcher.vocab_size == small_info.vocab_size
    assert number_matcher.stop_token_ids == [EOS]

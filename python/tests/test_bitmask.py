"""allocate / reset / get_bitmask_shape / apply_token_bitmask_inplace, on numpy arrays and (when installed)
torch tensors: the native float32 path and the array-library path agree; every argument error."""
import numpy as np
import pytest

import orchard.grammar as xgr


def random_bitmask(rows, vocab, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-2**31, 2**31, size=xgr.get_bitmask_shape(rows, vocab), dtype=np.int64).astype(np.int32)


def reference(logits, bitmask, vocab, rows):
    out = logits.copy()
    for r in rows:
        bits = np.unpackbits(bitmask[r].view(np.uint8), bitorder="little")[:vocab]
        out[r, :vocab][bits == 0] = -np.inf
    return out


def test_shape_allocate_reset():
    assert xgr.get_bitmask_shape(2, 33) == (2, 2)
    m = xgr.allocate_token_bitmask(2, 33, library="numpy")
    assert m.dtype == np.int32 and m.shape == (2, 2) and (m == -1).all()
    m[:] = 0
    xgr.reset_token_bitmask(m)
    assert (m == -1).all()
    with pytest.raises(ValueError, match="batch_size"):
        xgr.get_bitmask_shape(0, 10)
    with pytest.raises(ValueError, match="library"):
        xgr.allocate_token_bitmask(1, 10, library="jax")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_apply_numpy(dtype):
    vocab = 100
    logits = np.random.default_rng(1).standard_normal((3, vocab)).astype(dtype)
    bitmask = random_bitmask(3, vocab)
    want = reference(logits, bitmask, vocab, range(3))
    xgr.apply_token_bitmask_inplace(logits, bitmask)
    assert np.array_equal(logits, want)


def test_apply_indices_vocab_size_and_1d():
    vocab = 70
    logits = np.zeros((4, vocab), dtype=np.float32)
    bitmask = random_bitmask(4, vocab)
    want = reference(logits, bitmask, 64, [1, 3])
    xgr.apply_token_bitmask_inplace(logits, bitmask, indices=[1, 3], vocab_size=64)
    assert np.array_equal(logits, want)
    row = np.zeros(vocab, dtype=np.float32)
    xgr.apply_token_bitmask_inplace(row, bitmask[0])
    assert np.array_equal(row, reference(np.zeros((1, vocab), np.float32), bitmask[:1], vocab, [0])[0])


def test_apply_errors():
    logits = np.zeros((2, 64), dtype=np.float32)
    with pytest.raises(ValueError, match="rows of bitmask"):
        xgr.apply_token_bitmask_inplace(logits, random_bitmask(3, 64))
    with pytest.raises(IndexError, match="index 5"):
        xgr.apply_token_bitmask_inplace(logits, random_bitmask(2, 64), indices=[5])
    with pytest.raises(ValueError, match="vocab_size"):
        xgr.apply_token_bitmask_inplace(logits, random_bitmask(2, 64), vocab_size=65)
    with pytest.raises(TypeError, match="int32"):
        xgr.apply_token_bitmask_inplace(logits, random_bitmask(2, 64).astype(np.int64))
    with pytest.raises(TypeError, match="floating"):
        xgr.apply_token_bitmask_inplace(np.zeros((2, 64), dtype=np.int32), random_bitmask(2, 64))
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        xgr.apply_token_bitmask_inplace([0.0] * 64, random_bitmask(1, 64))
    with pytest.raises(ValueError, match="dimensions"):
        xgr.apply_token_bitmask_inplace(np.zeros((1, 1, 64), dtype=np.float32), random_bitmask(1, 64))


def test_apply_torch():
    torch = pytest.importorskip("torch")
    vocab = 100
    base = np.random.default_rng(2).standard_normal((3, vocab)).astype(np.float32)
    bitmask = random_bitmask(3, vocab)
    want = reference(base, bitmask, vocab, range(3))
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.from_numpy(base.copy()).to(dtype)
        xgr.apply_token_bitmask_inplace(logits, torch.from_numpy(bitmask))
        assert np.array_equal(torch.isinf(logits).numpy(), np.isinf(want))
    logits = torch.from_numpy(base.copy())
    xgr.apply_token_bitmask_inplace(logits, bitmask, indices=[2])  # a numpy bitmask with torch logits
    assert np.array_equal(logits.numpy()[2], want[2]) and np.array_equal(logits.numpy()[0], base[0])

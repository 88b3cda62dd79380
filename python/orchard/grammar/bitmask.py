"""Token bitmasks: ceil(vocab_size / 32) int32 words per row, bit i % 32 of word i / 32 set when token i is
allowed (XGrammar's and vLLM's layout). allocate_token_bitmask gives a torch tensor when torch is installed
(as XGrammar does) and a numpy array otherwise; every function takes either, used in place."""
import numpy as np

from orchard import _orchard

bitmask_dtype = np.int32


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def get_bitmask_shape(batch_size, vocab_size):
    """(batch_size, ceil(vocab_size / 32))."""
    for name, v in (("batch_size", batch_size), ("vocab_size", vocab_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"get_bitmask_shape: {name} must be a positive int, got {v!r}")
    return (batch_size, (vocab_size + 31) // 32)


def allocate_token_bitmask(batch_size, vocab_size, *, library=None):
    """A bitmask of shape (batch_size, ceil(vocab_size / 32)), int32, every token allowed (all bits set).
    library: "torch" (a CPU tensor; the default when torch is installed) or "numpy"."""
    shape = get_bitmask_shape(batch_size, vocab_size)
    if library is None:
        library = "torch" if _torch() is not None else "numpy"
    if library == "torch":
        torch = _torch()
        if torch is None:
            raise ImportError("allocate_token_bitmask(library='torch'): torch is not installed")
        return torch.full(shape, -1, dtype=torch.int32)
    if library == "numpy":
        return np.full(shape, -1, dtype=np.int32)
    raise ValueError(f"allocate_token_bitmask: library must be 'torch' or 'numpy', got {library!r}")


def reset_token_bitmask(bitmask):
    """Every token allowed again (all bits set), in place."""
    bitmask.fill_(-1) if _is_torch(bitmask) else bitmask.fill(-1)


def apply_token_bitmask_inplace(logits, bitmask, *, vocab_size=None, indices=None):
    """Sets logits[i, t] = -inf where bit t of bitmask[i] is clear, for t < vocab_size (default
    min(logits.shape[-1], bitmask.shape[-1] * 32); columns past it are left as they are), for every row i, or
    for each i in `indices` (then the two batch sizes may differ). logits: (batch, vocab) or (vocab,); bitmask:
    (batch, words) or (words,).

    float32 numpy arrays and CPU torch tensors are masked in native code, in place, without the GIL; other
    float dtypes, and torch tensors on a GPU (the bitmask moved to the logits' device), through the array
    library's own operations. Raises TypeError / ValueError / IndexError for wrong dtypes, shapes or indices.
    """
    if indices is not None:
        indices = [int(i) for i in indices]
    if _is_torch(logits):
        torch = _torch()
        if not _is_torch(bitmask):
            bitmask = torch.from_numpy(np.asarray(bitmask))
        if logits.device.type == "cpu" and logits.dtype == torch.float32 and bitmask.device.type == "cpu":
            _orchard.apply_token_bitmask_inplace_cpu(logits, bitmask, vocab_size, indices)
            return
        _apply_torch(torch, logits, bitmask.to(logits.device, non_blocking=True), vocab_size, indices)
        return
    if not isinstance(logits, np.ndarray):
        raise TypeError(f"apply_token_bitmask_inplace: logits must be a numpy array or a torch tensor, got "
                        f"{type(logits).__name__}")
    if logits.dtype == np.float32:
        _orchard.apply_token_bitmask_inplace_cpu(logits, bitmask, vocab_size, indices)
        return
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"apply_token_bitmask_inplace: logits must be floating point, got {logits.dtype}")
    _apply_numpy(logits, np.asarray(bitmask), vocab_size, indices)


def _rows_and_vocab(n_logit_rows, n_cols, mask_rows, mask_words, vocab_size, indices):
    vocab = min(n_cols, mask_words * 32)
    if vocab_size is not None:
        if not 0 <= vocab_size <= vocab:
            raise ValueError(f"apply_token_bitmask_inplace: vocab_size {vocab_size} is outside [0, {vocab}] (the "
                             f"logits' columns and the bitmask's bits)")
        vocab = vocab_size
    if indices is None:
        if mask_rows != n_logit_rows:
            raise ValueError(f"apply_token_bitmask_inplace: {n_logit_rows} rows of logits but {mask_rows} rows of "
                             f"bitmask (pass indices= to pick rows)")
        return list(range(n_logit_rows)), vocab
    for i in indices:
        if not (0 <= i < n_logit_rows and i < mask_rows):
            raise IndexError(f"apply_token_bitmask_inplace: index {i} is outside the "
                             f"{min(n_logit_rows, mask_rows)} rows of the logits and the bitmask")
    return indices, vocab


def _check_bitmask_dtype(dtype_name):
    if dtype_name not in ("int32", "uint32"):
        raise TypeError(f"apply_token_bitmask_inplace: the bitmask must be int32 (or uint32), got {dtype_name}")


def _apply_numpy(logits, bitmask, vocab_size, indices):
    _check_bitmask_dtype(str(bitmask.dtype))
    lg = logits.reshape(1, -1) if logits.ndim == 1 else logits
    bm = bitmask.reshape(1, -1) if bitmask.ndim == 1 else bitmask
    if lg.ndim != 2 or bm.ndim != 2:
        raise ValueError("apply_token_bitmask_inplace: logits and bitmask must be 1-D or 2-D")
    rows, vocab = _rows_and_vocab(lg.shape[0], lg.shape[1], bm.shape[0], bm.shape[1], vocab_size, indices)
    for r in rows:
        bits = np.unpackbits(np.ascontiguousarray(bm[r]).view(np.uint8), bitorder="little")[:vocab]
        lg[r, :vocab][bits == 0] = -np.inf


def _apply_torch(torch, logits, bitmask, vocab_size, indices):
    _check_bitmask_dtype(str(bitmask.dtype).removeprefix("torch."))
    lg = logits.view(1, -1) if logits.dim() == 1 else logits
    bm = bitmask.view(1, -1) if bitmask.dim() == 1 else bitmask
    if lg.dim() != 2 or bm.dim() != 2:
        raise ValueError("apply_token_bitmask_inplace: logits and bitmask must be 1-D or 2-D")
    rows, vocab = _rows_and_vocab(lg.shape[0], lg.shape[1], bm.shape[0], bm.shape[1], vocab_size, indices)
    shifts = torch.arange(32, device=bm.device, dtype=torch.int32)
    idx = torch.tensor(rows, device=lg.device, dtype=torch.long)
    allowed = ((bm[idx].to(torch.int32).unsqueeze(-1) >> shifts) & 1).reshape(len(rows), -1)[:, :vocab].bool()
    sub = lg[idx, :vocab]
    lg[idx, :vocab] = sub.masked_fill(~allowed, float("-inf"))

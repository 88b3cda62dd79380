#!/usr/bin/env python3
"""Writes tests/kernels/goldens/bnb_nf4.json: bitsandbytes' NF4 quantization of a test tensor on its CPU
path (quantize_4bit / dequantize_4bit, quant_type nf4, blocksize 64, with and without compress_statistics),
for kernels/'s bit-exactness test (tests/kernels/nf4_test.cpp, which runs without bitsandbytes).

The input is not stored: nf4_test.cpp rebuilds it with the same integer hash and float32 operations
(test_tensor below). Arrays are base64 of little-endian bytes.

Needs torch and bitsandbytes (not in the project's requirements; a venv of its own):
  python3 -m venv .venv-nf4 && .venv-nf4/bin/pip install torch bitsandbytes
  .venv-nf4/bin/python tests/kernels/make_nf4_goldens.py            # the goldens
  .venv-nf4/bin/python tests/kernels/make_nf4_goldens.py --tables   # kernels/src/nf4_tables.cpp's arrays
"""
import base64
import json
import pathlib
import sys

import numpy as np
import torch
import bitsandbytes as bnb
from bitsandbytes import functional as F

OUT = pathlib.Path(__file__).resolve().parent / "goldens" / "bnb_nf4.json"
ROWS, COLS = 32, 576  # 18,432 weights: 288 blocks of 64, nested blocks of 256 + 32


def test_tensor(levels: np.ndarray) -> np.ndarray:
    """Gaussian-like rows (a sum of three 10-bit uniforms from a uint32 hash) at per-row scales, outliers,
    an all-zero block, a constant block and a block of exact midpoints between NF4 levels (ties)."""
    i = np.arange(ROWS * COLS, dtype=np.uint64)
    h = (i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(2246822519)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    u = (h & np.uint64(1023)).astype(np.int64) + ((h >> np.uint64(10)) & np.uint64(1023)).astype(np.int64) + (
        (h >> np.uint64(20)) & np.uint64(1023)).astype(np.int64) - 1534
    row = (i // np.uint64(COLS)).astype(np.int64)
    scale = np.float32(0.001) * (np.float32(1) + (row % 7).astype(np.float32))
    x = u.astype(np.float32) * scale
    outlier = (i % np.uint64(97)) == 0
    x[outlier] = x[outlier] * np.float32(9.0)
    x[5 * 64:6 * 64] = 0  # all zero
    x[9 * 64:10 * 64] = np.float32(0.25)  # constant
    b = 13 * 64  # ties: absmax 1, values exactly on the midpoints and one float above
    mids = ((levels[:-1] + levels[1:]) / np.float32(2)).astype(np.float32)
    x[b:b + 64] = 0
    x[b] = 1.0
    x[b + 1:b + 16] = mids
    x[b + 16:b + 31] = np.nextafter(mids, np.float32(2))
    return x.reshape(ROWS, COLS)


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def main() -> None:
    levels = F.get_4bit_type("nf4", device="cpu").numpy().astype(np.float32)
    dynamic = F.create_dynamic_map().numpy().astype(np.float32)
    if "--tables" in sys.argv:
        for name, a in (("kNf4Levels", levels), ("kDynamicMap", dynamic)):
            print(f"// {name}")
            print(",\n".join(", ".join(float(v).hex() + "f" for v in a[k:k + 4]) for k in range(0, len(a), 4)))
        return
    x = torch.from_numpy(test_tensor(levels))
    packed, plain = F.quantize_4bit(x, blocksize=64, compress_statistics=False, quant_type="nf4")
    packed2, nested = F.quantize_4bit(x, blocksize=64, compress_statistics=True, quant_type="nf4")
    assert torch.equal(packed, packed2)
    deq = F.dequantize_4bit(packed2, nested, quant_type="nf4")
    doc = {
        "generator": f"tests/kernels/make_nf4_goldens.py, bitsandbytes {bnb.__version__}, torch {torch.__version__}, CPU",
        "rows": ROWS,
        "cols": COLS,
        "levels": b64(levels),
        "dynamic_map": b64(dynamic),
        "packed": b64(packed.numpy().reshape(-1)),
        "absmax": b64(plain.absmax.numpy().astype(np.float32)),
        "nested_codes": b64(nested.absmax.numpy().astype(np.uint8)),
        "nested_absmax": b64(nested.state2.absmax.numpy().astype(np.float32)),
        "nested_quant_map": b64(nested.state2.code.numpy().astype(np.float32)),
        "nested_blocksize": nested.state2.blocksize,
        "offset": b64(np.array([nested.offset.item()], dtype=np.float32)),
        "dequantized": b64(deq.numpy().astype(np.float32).reshape(-1)),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

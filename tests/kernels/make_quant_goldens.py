#!/usr/bin/env python3
"""Writes tests/kernels/goldens/gguf_quants.json: test vectors from gguf-py (the `gguf` package's numpy
quantize/dequantize, which mirror ggml's reference code) for kernels/'s bit-exactness test.

For every type gguf-py can quantize (f16 via numpy, bf16, q4_0, q4_1, q5_0, q5_1, q8_0): known input
floats and gguf-py's quantized bytes, plus gguf-py's dequantization of those bytes. For every type gguf-py
can dequantize (also q2_K..q6_K): random blocks (valid f16 scales) and gguf-py's dequantized floats.

Run from the repository root:  .venv/bin/python tests/kernels/make_quant_goldens.py
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parent / "goldens" / "gguf_quants.json"
N = 256  # one K super-block, eight 32-blocks


def inputs(rng: np.random.Generator) -> list[np.ndarray]:
    a = rng.standard_normal(N).astype(np.float32)
    a[rng.integers(0, N, 8)] *= 20  # outliers, as real weights have
    b = rng.uniform(-1, 1, N).astype(np.float32)
    b[:32] = 0  # an all-zero block
    b[32:64] = 0.25  # a constant block
    c = (rng.standard_normal(N) * 1e-3 + 0.01).astype(np.float32)  # all positive, small
    d = np.round(rng.standard_normal(N) * 8).astype(np.float32) / 2  # halves: rounding ties
    return [a, b, c, d]


def hexf(x: np.ndarray) -> str:
    return np.ascontiguousarray(x, dtype="<f4").tobytes().hex()


def random_blocks(rng: np.random.Generator, qtype: T, n: int) -> np.ndarray:
    block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
    nb = n // block_size
    raw = rng.integers(0, 256, size=(nb, type_size), dtype=np.uint8)
    # Offsets of the f16 scale fields (ggml-common.h layouts), set to finite values of either sign.
    fields = {
        T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
        T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    }[qtype]
    for off in fields:
        vals = (rng.standard_normal(nb) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = vals.view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def main() -> None:
    rng = np.random.default_rng(20261121)
    cases = []
    xs = inputs(rng)
    input_hex = [hexf(x) for x in xs]
    quantizable = {"f16": None, "bf16": T.BF16, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0,
                   "q5_1": T.Q5_1, "q8_0": T.Q8_0}
    for name, qtype in quantizable.items():
        for index, x in enumerate(xs):
            if qtype is None:
                q = x.astype(np.float16).view(np.uint8)
                dq = q.view(np.float16).astype(np.float32)
            else:
                q = quants.quantize(x, qtype).reshape(-1)
                dq = quants.dequantize(q, qtype).reshape(-1).astype(np.float32)
            cases.append({"kind": "quantize", "type": name, "n": N, "input": index,
                          "bytes": q.tobytes().hex(), "dequantized": hexf(dq)})
    dequantizable = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q8_0": T.Q8_0,
                     "q2_K": T.Q2_K, "q3_K": T.Q3_K, "q4_K": T.Q4_K, "q5_K": T.Q5_K, "q6_K": T.Q6_K}
    for name, qtype in dequantizable.items():
        q = random_blocks(rng, qtype, N)
        dq = quants.dequantize(q, qtype).reshape(-1).astype(np.float32)
        cases.append({"kind": "dequantize", "type": name, "n": N, "bytes": q.tobytes().hex(),
                      "dequantized": hexf(dq)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    import gguf
    meta = {"generator": "tests/kernels/make_quant_goldens.py",
            "gguf_version": getattr(gguf, "__version__", "0.19.0"), "inputs": input_hex,
            "cases": cases}
    OUT.write_text(json.dumps(meta, indent=0) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()

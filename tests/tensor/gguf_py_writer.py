#!/usr/bin/env python3
"""Writes a small GGUF with gguf-py (llama.cpp's own writer) and a JSON description of what it holds.

usage: gguf_py_writer.py OUT.gguf OUT.json

The C++ test (tests/tokenizers/gguf_test.cpp, GgufPy.*) reads both and checks that our reader sees every
metadata value and every tensor exactly as gguf-py wrote them. Exit status 77 when gguf-py or numpy is not
importable (the test then skips).
"""
import json
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT
    from gguf import GGMLQuantizationType as QT
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"gguf-py unavailable: {e}", file=sys.stderr)
    sys.exit(77)


def f32(x):
    return float(np.float32(x))


def main():
    out_gguf, out_json = sys.argv[1], sys.argv[2]
    w = gguf.GGUFWriter(out_gguf, arch="orchardtest")
    w.add_custom_alignment(64)
    meta = {"general.architecture": {"type": int(VT.STRING), "value": "orchardtest"},
            "general.alignment": {"type": int(VT.UINT32), "value": 64}}

    def kv(key, value, vtype, expected=None, sub_type=None):
        w.add_key_value(key, value, vtype, sub_type=sub_type)
        meta[key] = {"type": int(vtype), "value": value if expected is None else expected}
        if sub_type is not None:
            meta[key]["element_type"] = int(sub_type)

    kv("t.uint8", 250, VT.UINT8)
    kv("t.int8", -120, VT.INT8)
    kv("t.uint16", 65000, VT.UINT16)
    kv("t.int16", -32000, VT.INT16)
    kv("t.uint32", 4000000000, VT.UINT32)
    kv("t.int32", -2000000000, VT.INT32)
    kv("t.uint64", 18000000000000000000, VT.UINT64)
    kv("t.int64", -9000000000000000000, VT.INT64)
    kv("t.float32", 3.14159, VT.FLOAT32, expected=f32(3.14159))
    kv("t.float64", 2.718281828459045, VT.FLOAT64)
    kv("t.bool_true", True, VT.BOOL)
    kv("t.bool_false", False, VT.BOOL)
    kv("t.string", "héllo ▁wörld \U0001F600", VT.STRING)
    kv("t.empty_string", "", VT.STRING)
    kv("t.array_int32", [1, -2, 3, 2147483647], VT.ARRAY, sub_type=VT.INT32)
    kv("t.array_uint8", [0, 1, 255], VT.ARRAY, sub_type=VT.UINT8)
    kv("t.array_float32", [0.5, -1.25, 1e10], VT.ARRAY, expected=[f32(0.5), f32(-1.25), f32(1e10)],
       sub_type=VT.FLOAT32)
    kv("t.array_string", ["a", "", "<0x0A>", "▁the"], VT.ARRAY, sub_type=VT.STRING)
    kv("t.array_bool", [True, False, True], VT.ARRAY, sub_type=VT.BOOL)
    kv("t.array_nested", [[1, 2], [3], [4, 5, 6]], VT.ARRAY)  # inferred: array of arrays of int32
    meta["t.array_nested"]["element_type"] = int(VT.ARRAY)

    rng = np.random.default_rng(1234)
    tensors = []

    def add(name, array, raw_dtype=None, ggml_type=None, dims=None):
        w.add_tensor(name, array, raw_dtype=raw_dtype)
        tensors.append({"name": name, "type": int(ggml_type), "dims": dims,
                        "hex": array.tobytes().hex()})

    add("f32", rng.standard_normal((3, 8)).astype(np.float32), ggml_type=QT.F32, dims=[8, 3])
    add("f16", rng.standard_normal((2, 5)).astype(np.float16), ggml_type=QT.F16, dims=[5, 2])
    add("f64", rng.standard_normal(7).astype(np.float64), ggml_type=QT.F64, dims=[7])
    add("i8", rng.integers(-128, 127, (4, 3), dtype=np.int8), ggml_type=QT.I8, dims=[3, 4])
    add("i16", rng.integers(-30000, 30000, 6, dtype=np.int16), ggml_type=QT.I16, dims=[6])
    add("i32", rng.integers(-2**31, 2**31 - 1, (2, 2, 3), dtype=np.int32), ggml_type=QT.I32,
        dims=[3, 2, 2])
    add("i64", rng.integers(-2**62, 2**62, 5, dtype=np.int64), ggml_type=QT.I64, dims=[5])
    # Every quantized (and bf16) type: raw bytes of two rows of two blocks each.
    for qt, (block, type_size) in gguf.GGML_QUANT_SIZES.items():
        if qt in (QT.F32, QT.F16, QT.F64, QT.I8, QT.I16, QT.I32, QT.I64):
            continue
        # gguf-py lists q8_1 as 40-byte blocks (two floats); ggml's block_q8_1 is 36 (two halves), and
        # ggml is what reads the files. q8_1 is an activation format never stored in model files.
        if qt == QT.Q8_1:
            continue
        raw = rng.integers(0, 256, (2, 2 * type_size), dtype=np.uint8)
        add(f"q.{qt.name.lower()}", raw, raw_dtype=qt, ggml_type=qt, dims=[2 * block, 2])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump({"version": 3, "alignment": 64, "metadata": meta, "tensors": tensors}, f,
                  ensure_ascii=False)


if __name__ == "__main__":
    main()

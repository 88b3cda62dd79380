#!/usr/bin/env python3
"""A Hugging Face llama folder with random f16 weights, for speed comparisons (scripts/bench-llamacpp.sh).

The default shape is TinyLlama-1.1B's (22 layers, hidden 2048, ff 5632, 32 heads, 4 KV heads, vocab 32000).
Weights are N(0, 0.02) (norms 1), written straight into model.safetensors one tensor at a time (no torch,
no safetensors package: the format is an 8-byte header length, a JSON header, then the raw tensors).

    python tools/make_bench_model.py OUT_DIR --tokenizer ../shared/data/tokenizers/hf/llama2.tokenizer.json
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np


def tensor_shapes(a):
    kv = a.n_kv_heads * (a.hidden // a.heads)
    shapes = [("model.embed_tokens.weight", (a.vocab, a.hidden))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (a.hidden,)),
            (p + "self_attn.q_proj.weight", (a.hidden, a.hidden)),
            (p + "self_attn.k_proj.weight", (kv, a.hidden)),
            (p + "self_attn.v_proj.weight", (kv, a.hidden)),
            (p + "self_attn.o_proj.weight", (a.hidden, a.hidden)),
            (p + "post_attention_layernorm.weight", (a.hidden,)),
            (p + "mlp.gate_proj.weight", (a.ff, a.hidden)),
            (p + "mlp.up_proj.weight", (a.ff, a.hidden)),
            (p + "mlp.down_proj.weight", (a.hidden, a.ff)),
        ]
    shapes += [("model.norm.weight", (a.hidden,)), ("lm_head.weight", (a.vocab, a.hidden))]
    return shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder to write (created)")
    ap.add_argument("--tokenizer", required=True, help="a llama tokenizer.json (its vocabulary size must be --vocab)")
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ff", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--n-kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.n_kv_heads:
        sys.exit("make_bench_model: hidden must divide into heads, heads into KV heads")
    os.makedirs(a.out, exist_ok=True)

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
        "intermediate_size": a.ff, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.n_kv_heads, "vocab_size": a.vocab, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shutil.copyfile(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}, f)

    shapes = tensor_shapes(a)
    header, offset = {}, 0
    for name, shape in shapes:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    rng = np.random.default_rng(a.seed)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape in shapes:
            if len(shape) == 1:
                t = np.ones(shape, dtype=np.float16)
            else:
                t = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
            f.write(t.tobytes())
    print(f"make_bench_model: {a.out}: {sum(int(np.prod(s)) for _, s in shapes) / 1e9:.2f} B parameters")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a small random Llama (or Qwen2) GGUF with gguf-py, as llama.cpp's convert scripts do, for the
loader tests. usage: write_gguf_py.py OUT.gguf {llama|qwen2}

Tensor values follow a formula the test recomputes: element k of the tensor with index t (in writing
order) is ((k * 7 + t * 13) % 101 - 50) / 64."""
import sys

import numpy as np
import gguf

out, arch_name = sys.argv[1], sys.argv[2]
arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[arch_name]
n_vocab, n_embd, n_ff, n_head, n_kv, n_layer, ctx = 64, 32, 96, 4, 2, 2, 128
hd = n_embd // n_head

w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
w.add_name("gguf-py " + arch_name)
w.add_context_length(ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_kv)
w.add_layer_norm_rms_eps(1e-6)
w.add_rope_freq_base(1000000.0)
w.add_rope_dimension_count(hd)
w.add_file_type(gguf.LlamaFileType.ALL_F32)

tokens = ["<unk>", "<s>", "</s>"] + [chr(ord("a") + i % 26) * (1 + i // 26) for i in range(n_vocab - 3)]
w.add_tokenizer_model("llama")
w.add_token_list(tokens)
w.add_token_scores([0.0] * 3 + [-float(i) for i in range(n_vocab - 3)])
w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (n_vocab - 3))
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_chat_template("{{ messages[0]['content'] }}")

index = 0


def add(name, shape, dtype=np.float32):
    """shape is numpy's (row-major) shape; GGUF stores it reversed."""
    global index
    k = np.arange(int(np.prod(shape)), dtype=np.int64)
    data = (((k * 7 + index * 13) % 101 - 50) / 64.0).astype(np.float32).reshape(shape)
    index += 1
    w.add_tensor(name, data.astype(dtype))


add("token_embd.weight", (n_vocab, n_embd))
add("output_norm.weight", (n_embd,))
add("output.weight", (n_vocab, n_embd), np.float16)
for i in range(n_layer):
    add(f"blk.{i}.attn_norm.weight", (n_embd,))
    add(f"blk.{i}.attn_q.weight", (n_head * hd, n_embd))
    add(f"blk.{i}.attn_k.weight", (n_kv * hd, n_embd))
    add(f"blk.{i}.attn_v.weight", (n_kv * hd, n_embd))
    if arch_name == "qwen2":
        add(f"blk.{i}.attn_q.bias", (n_head * hd,))
        add(f"blk.{i}.attn_k.bias", (n_kv * hd,))
        add(f"blk.{i}.attn_v.bias", (n_kv * hd,))
    add(f"blk.{i}.attn_output.weight", (n_embd, n_head * hd))
    add(f"blk.{i}.ffn_norm.weight", (n_embd,), np.float16)  # f16 norms are converted to f32
    add(f"blk.{i}.ffn_gate.weight", (n_ff, n_embd))
    add(f"blk.{i}.ffn_up.weight", (n_ff, n_embd))
    add(f"blk.{i}.ffn_down.weight", (n_embd, n_ff))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

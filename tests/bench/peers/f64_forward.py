#!/usr/bin/env python3
"""The exact forward pass of a llama-architecture GGUF, for judging how far two engines may disagree: float64
numpy over the file's weights dequantized by gguf-py, optionally rounding as the quantized engines do (each
matrix product's input to 8-bit blocks of 32 with an f16 scale, as llama.cpp's q8_0/q8_1 and Orchard's
quantized products; K and V to f16, as an f16 KV cache). Reads llama.cpp's RoPE layout (adjacent pairs: the
GGUF's Q and K rows are permuted for it).

    python tests/bench/peers/f64_forward.py MODEL.gguf --ids "504 3575 282" [--q8] [--kv-f16] --out logits.json
    python tests/bench/peers/f64_forward.py MODEL.gguf --ppl war-and-peace.txt --chunks 4 [--q8] [--kv-f16]

--ppl computes llama-perplexity's figure (chunks of --ctx tokens, the second half scored; BOS per chunk is not
handled: for models whose metadata adds none, such as SmolLM2) over the ids `orchard tokenize` gives (--orchard).
"""
import argparse
import json
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Model:
    def __init__(self, path, q8, kv_f16):
        r = GGUFReader(path)
        val = lambda k: r.fields[k].contents()  # noqa: E731
        self.n_layer, self.n_head = val("llama.block_count"), val("llama.attention.head_count")
        self.n_kv = val("llama.attention.head_count_kv")
        self.eps, self.theta = val("llama.attention.layer_norm_rms_epsilon"), val("llama.rope.freq_base")
        self.w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
            [int(x) for x in reversed(t.shape.tolist())]) for t in r.tensors}
        self.q8, self.kv_f16 = q8, kv_f16

    def act(self, x):
        """A product's input, rounded to 8-bit blocks of 32 (scale max|x|/127 stored as f16) when asked."""
        if not self.q8:
            return x
        b = x.reshape(-1, 32)
        d = np.abs(b).max(1, keepdims=True) / 127
        q = np.round(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
        return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x [n, heads, head_dim], adjacent pairs rotated
        hd = x.shape[-1]
        ang = np.outer(pos, self.theta ** (-np.arange(0, hd, 2) / hd))
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = np.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
        return out

    def logits(self, ids):
        """[len(ids), n_vocab] logits of one sequence."""
        w, emb = self.w, self.w["token_embd.weight"]
        x = emb[ids]
        n, n_embd = x.shape
        hd = n_embd // self.n_head
        pos = np.arange(n)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            h = self.act(self.rms(x, w[p + "attn_norm.weight"]))
            q = self.rope((h @ w[p + "attn_q.weight"].T).reshape(n, self.n_head, hd), pos)
            k = self.rope((h @ w[p + "attn_k.weight"].T).reshape(n, self.n_kv, hd), pos)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.n_kv, hd)
            if self.kv_f16:
                k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
            k, v = np.repeat(k, self.n_head // self.n_kv, axis=1), np.repeat(v, self.n_head // self.n_kv, axis=1)
            a = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(hd) + mask
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            o = np.einsum("hij,jhd->ihd", a, v).reshape(n, n_embd)
            x = x + self.act(o) @ w[p + "attn_output.weight"].T
            h = self.act(self.rms(x, w[p + "ffn_norm.weight"]))
            g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
            x = x + self.act(g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        return self.act(self.rms(x, w["output_norm.weight"])) @ w.get("output.weight", emb).T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids", help="the prompt's token ids, space-separated: write its logits (--out)")
    ap.add_argument("--out", help="--ids: the JSON file of the logits ({prompt, logits})")
    ap.add_argument("--ppl", help="a text file: print the running perplexity per chunk")
    ap.add_argument("--orchard", default="build/pie/orchard", help="--ppl: the binary whose tokenize gives the ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--q8", action="store_true", help="round each product's input to 8-bit blocks")
    ap.add_argument("--kv-f16", action="store_true", help="round K and V to f16")
    a = ap.parse_args()
    m = Model(a.model, a.q8, a.kv_f16)
    if a.ids:
        ids = [int(t) for t in a.ids.split()]
        with open(a.out, "w") as f:
            json.dump({"prompt": ids, "logits": m.logits(ids).tolist()}, f)
    if a.ppl:
        out = subprocess.run([a.orchard, "tokenize", "-t", a.model, a.ppl], capture_output=True, text=True, check=True)
        ids = [int(t) for t in out.stdout.split()]
        first, nll = a.ctx // 2, []
        for c in range(a.chunks):
            chunk = ids[c * a.ctx:(c + 1) * a.ctx]
            lg = m.logits(chunk)[first:a.ctx - 1]
            mx = lg.max(1, keepdims=True)
            lse = np.log(np.exp(lg - mx).sum(1)) + mx[:, 0]
            nll += list(lse - lg[np.arange(len(lg)), chunk[first + 1:]])
            print(f"[{c + 1}]{np.exp(np.mean(nll)):.4f},", end="", flush=True)
        print()
    if not a.ids and not a.ppl:
        sys.exit("f64_forward: give --ids or --ppl")


if __name__ == "__main__":
    main()

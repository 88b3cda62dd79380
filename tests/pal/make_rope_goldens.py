#!/usr/bin/env python3
"""Writes rope_goldens.json beside this script: RoPE inverse frequencies, attention factors and rotated
vectors for each scaling, computed independently of the C++ code with numpy in float64, following Hugging
Face transformers' modeling_rope_utils.py (_compute_default/linear/dynamic_ntk/yarn/llama3_parameters) and
its apply_rotary_pos_emb (rotate_half for NeoX; the interleaved pairs for GPT-J).

Run: .venv/bin/python tests/pal/make_rope_goldens.py
"""
import json
import math
import os

import numpy as np


def default_inv_freq(base, dim):
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def inv_freq_and_attention_factor(cfg):
    dim = cfg["rotary_dim"]
    base = cfg["theta"]
    scaling = cfg["scaling"]
    factor = cfg.get("factor", 1.0)
    if scaling == "none":
        return default_inv_freq(base, dim), 1.0
    if scaling == "linear":
        return default_inv_freq(base, dim) / factor, 1.0
    if scaling == "ntk":  # NTK-aware (static): base * alpha^(d/(d-2))
        return default_inv_freq(base * factor ** (dim / (dim - 2)), dim), 1.0
    if scaling == "dynamic_ntk":
        orig = cfg["original_max_position"]
        seq_len = max(cfg["seq_len"], orig)
        base = base * ((factor * seq_len / orig) - (factor - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if scaling == "yarn":
        orig = cfg["original_max_position"]
        beta_fast = cfg.get("yarn_beta_fast", 32.0)
        beta_slow = cfg.get("yarn_beta_slow", 1.0)
        attention_factor = cfg.get("yarn_attention_factor", 0.0)
        if not attention_factor:
            attention_factor = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0

        def find_correction_dim(num_rotations):
            return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

        low = find_correction_dim(beta_fast)
        high = find_correction_dim(beta_slow)
        if cfg.get("yarn_truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        extrapolation = 1.0 / pos_freqs
        interpolation = 1.0 / (factor * pos_freqs)
        extrapolation_factor = 1 - ramp
        inv = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
        return inv, attention_factor
    if scaling == "llama3":
        inv = default_inv_freq(base, dim)
        orig = cfg["original_max_position"]
        low_ff = cfg.get("llama3_low_freq_factor", 1.0)
        high_ff = cfg.get("llama3_high_freq_factor", 4.0)
        low_freq_wavelen = orig / low_ff
        high_freq_wavelen = orig / high_ff
        wavelen = 2 * math.pi / inv
        inv_llama = np.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (orig / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return np.where(is_medium, smoothed, inv_llama), 1.0
    raise ValueError(scaling)


def apply_rope(cfg, x, pos, inv, attention_factor):
    dim = cfg["rotary_dim"]
    angles = pos * inv
    cos = np.cos(angles) * attention_factor
    sin = np.sin(angles) * attention_factor
    y = x.copy()
    r = x[:dim]
    if cfg["layout"] == "neox":  # q * cos + rotate_half(q) * sin, cos/sin repeated over both halves
        c = np.concatenate([cos, cos])
        s = np.concatenate([sin, sin])
        rot_half = np.concatenate([-r[dim // 2:], r[: dim // 2]])
        y[:dim] = r * c + rot_half * s
    else:  # GPT-J: pairs (2i, 2i+1)
        c = np.repeat(cos, 2)
        s = np.repeat(sin, 2)
        rot = np.empty_like(r)
        rot[0::2] = -r[1::2]
        rot[1::2] = r[0::2]
        y[:dim] = r * c + rot * s
    return y


CASES = [
    dict(name="default_neox", head_dim=64, rotary_dim=64, theta=10000.0, layout="neox", scaling="none"),
    dict(name="default_gptj_partial", head_dim=80, rotary_dim=32, theta=10000.0, layout="gptj", scaling="none"),
    dict(name="partial_neox", head_dim=128, rotary_dim=64, theta=500000.0, layout="neox", scaling="none"),
    dict(name="linear", head_dim=64, rotary_dim=64, theta=10000.0, layout="neox", scaling="linear", factor=4.0),
    dict(name="ntk", head_dim=128, rotary_dim=128, theta=10000.0, layout="neox", scaling="ntk", factor=8.0),
    dict(name="dynamic_ntk", head_dim=64, rotary_dim=64, theta=10000.0, layout="gptj", scaling="dynamic_ntk",
         factor=2.0, original_max_position=2048, seq_len=5000),
    dict(name="yarn", head_dim=128, rotary_dim=128, theta=10000.0, layout="neox", scaling="yarn", factor=4.0,
         original_max_position=4096),
    dict(name="yarn_gptj_beta_attn", head_dim=64, rotary_dim=64, theta=1000000.0, layout="gptj",
         scaling="yarn", factor=16.0, original_max_position=8192, yarn_beta_fast=16.0, yarn_beta_slow=2.0,
         yarn_attention_factor=1.25),
    dict(name="yarn_untruncated", head_dim=96, rotary_dim=96, theta=10000.0, layout="neox", scaling="yarn",
         factor=8.0, original_max_position=2048, yarn_truncate=False),
    dict(name="llama3", head_dim=128, rotary_dim=128, theta=500000.0, layout="neox", scaling="llama3",
         factor=8.0, original_max_position=8192, llama3_low_freq_factor=1.0, llama3_high_freq_factor=4.0),
    dict(name="llama3_32", head_dim=64, rotary_dim=64, theta=500000.0, layout="neox", scaling="llama3",
         factor=32.0, original_max_position=8192, llama3_low_freq_factor=1.0, llama3_high_freq_factor=4.0),
]
POSITIONS = [0, 1, 100, 4095, 131071]


def main():
    out = []
    for cfg in CASES:
        inv, af = inv_freq_and_attention_factor(cfg)
        x = np.sin(np.arange(cfg["head_dim"], dtype=np.float64) * 0.731 + 0.2) * 1.5
        x = x.astype(np.float32).astype(np.float64)  # the C++ side rotates f32 inputs
        # 10 significant digits: the C++ side checks f32 results to 1e-6 relative.
        rotated = [[float(f"{v:.10g}") for v in apply_rope(cfg, x, p, inv, af)] for p in POSITIONS]
        out.append(dict(config=cfg, inv_freq=inv.tolist(), attention_factor=af, x=x.tolist(),
                        positions=POSITIONS, rotated=rotated))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rope_goldens.json")
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(case) for case in out) + "\n]\n")
    print(f"wrote {path}: {len(out)} configurations")


if __name__ == "__main__":
    main()

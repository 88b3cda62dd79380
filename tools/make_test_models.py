#!/usr/bin/env python3
"""Makes the small random-weight Hugging Face models and transformers goldens of tests/pie/runner/models.

Each model folder holds config.json and model.safetensors (f32) as transformers' save_pretrained writes
them, and golden.json: a 64-token prompt, transformers' logits (f32, eager attention) for its last
`n_logit_positions` positions, and the 32-token greedy continuation (each step recomputes the whole sequence
without a KV cache, so nothing but the model decides it). Weights are drawn from a fixed seed at scales that
keep activations O(1) (the default 0.02 init gives near-uniform logits whose greedy choices are ties), norm
weights and biases are random too so that the test exercises them. A prompt whose greedy steps have a
top-1/top-2 margin below 1e-3 is redrawn, so the greedy golden does not hinge on rounding.

Needs torch and transformers (the runner helper's venv: .venv-runner). Usage:
  .venv-runner/bin/python tools/make_test_models.py [--out tests/pie/runner/models]
"""

import argparse
import json
import math
import os

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

PROMPT_LEN = 64
N_GENERATE = 32
N_LOGIT_POSITIONS = 16
MIN_MARGIN = 1e-3


def rope(rope_type="default", theta=10000.0, **extra):
    """rope_parameters (transformers 5) with the theta inside."""
    return dict(rope_type=rope_type, rope_theta=theta, **extra)


# name -> (config class, model class, config kwargs). Sizes keep each folder under 400 KB.
MODELS = {
    # GQA 4:2, head dim 12 (generic attention kernel), untied output, llama3 RoPE scaling whose original
    # context (32) is shorter than the prompt, so every band of the scaling matters.
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=128, rms_norm_eps=1e-5,
        rope_parameters=rope("llama3", 10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=32),
        tie_word_embeddings=False)),
    # MQA 4:1, sliding window 24 < the 64-token prompt, untied output.
    "mistral": (MistralConfig, MistralForCausalLM, dict(
        vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=12, max_position_embeddings=128, rms_norm_eps=1e-5,
        rope_parameters=rope("default", 1000000.0), sliding_window=24, tie_word_embeddings=False)),
    # q/k/v biases, tied embeddings, head dim 16.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_parameters=rope("default", 1000000.0), use_sliding_window=False, tie_word_embeddings=True)),
    # q/k RMSNorm per head, head dim 64 (a SIMD attention kernel) != hidden / heads (24), tied embeddings.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
        vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_parameters=rope("default", 1000000.0), use_sliding_window=False, tie_word_embeddings=True)),
}


def randomize(model, generator):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=generator))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=generator))
            else:  # Linear [n_out, n_in]: unit-variance outputs for unit-variance inputs
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))


@torch.no_grad()
def golden(model, prompt):
    ids = torch.tensor([prompt])
    logits = model(ids).logits[0]  # [64, vocab]
    tokens = list(prompt)
    generated, margins = [], []
    for _ in range(N_GENERATE):
        last = model(torch.tensor([tokens])).logits[0, -1]
        top = torch.topk(last, 2).values
        margins.append(float(top[0] - top[1]))
        nxt = int(torch.argmax(last))
        generated.append(nxt)
        tokens.append(nxt)
    return logits, generated, min(margins)


def make(name, out_dir, seed):
    config_cls, model_cls, kwargs = MODELS[name]
    config = config_cls(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    generator = torch.Generator().manual_seed(seed)
    randomize(model, generator)
    prompt_rng = torch.Generator().manual_seed(seed + 1)
    for attempt in range(100):
        prompt = torch.randint(0, config.vocab_size, (PROMPT_LEN,), generator=prompt_rng).tolist()
        logits, generated, margin = golden(model, prompt)
        if margin >= MIN_MARGIN:
            break
    else:
        raise SystemExit(f"{name}: no prompt with greedy margins >= {MIN_MARGIN}")
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    extra = os.path.join(folder, "generation_config.json")  # not read by the tests
    if os.path.exists(extra):
        os.remove(extra)
    first = PROMPT_LEN - N_LOGIT_POSITIONS
    record = {
        "model": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": seed,
        "prompt": prompt,
        "logit_positions": list(range(first, PROMPT_LEN)),
        # float32 values printed exactly (repr of the f32 value as a double)
        "logits": [[float(x) for x in logits[p].tolist()] for p in range(first, PROMPT_LEN)],
        "greedy": generated,
        "greedy_min_margin": margin,
    }
    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(folder, x)) for x in os.listdir(folder))
    print(f"{name}: {size / 1024:.0f} KB, greedy margin {margin:.4f}, attempt {attempt}")
    if size >= 400 * 1024:
        raise SystemExit(f"{name}: {size} bytes, over the 400 KB budget")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "pie", "runner", "models"))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for i, name in enumerate(args.models):
        make(name, args.out, args.seed + 100 * i)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Makes tests/pie/lora/qlora: a tiny llama whose projections bitsandbytes stores in NF4 (QLoRA's base),
a PEFT LoRA adapter over it, and transformers' logits for both.

- model/: config.json (with transformers' bitsandbytes quantization_config) and model.safetensors as
  transformers + bitsandbytes save a load_in_4bit model: every q/k/v/o/gate/up/down_proj weight quantized
  by bitsandbytes' quantize_4bit (nf4, blocksize 64, double quantization) and written as its QuantState
  packs it (`weight` U8, `weight.absmax`, `weight.quant_map`, `weight.nested_absmax`,
  `weight.nested_quant_map`, `weight.quant_state.bitsandbytes__nf4`); embeddings, norms and lm_head f32.
- adapter/: a PEFT adapter (rank 8, alpha 16, every projection, random non-zero A and B).
- golden.json: the logits of the last positions of a prompt without and with the adapter: "base" and
  "adapter" from transformers + PEFT in f32 over the weights bitsandbytes' dequantize_4bit gives (the
  values its Linear4bit multiplies by); "linear4bit_base" and "linear4bit_adapter" from the checkpoint
  loaded through transformers' bitsandbytes integration (Linear4bit on the CPU, whose product is not f32
  throughout), when it loads.

Needs torch, transformers, peft and bitsandbytes (a venv of its own):
  python3 -m venv .venv-nf4 && .venv-nf4/bin/pip install torch transformers peft bitsandbytes
  .venv-nf4/bin/python tools/make_nf4_test_model.py [--out tests/pie/lora/qlora]
"""

import argparse
import json
import math
import os

import bitsandbytes as bnb
import peft
import torch
import transformers
from bitsandbytes import functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT_LEN = 24
N_LOGIT_POSITIONS = 6
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def make_config():
    return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


def quantized_state(model):
    """The state dict with every projection in bitsandbytes' NF4 form, and the model's projections replaced
    by their dequantization."""
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(".weight") and name.split(".")[-2] in PROJECTIONS:
            packed, qs = F.quantize_4bit(tensor.contiguous(), blocksize=64, compress_statistics=True,
                                         quant_type="nf4", quant_storage=torch.uint8)
            state[name] = packed
            for k, v in qs.as_dict(packed=True).items():
                state[f"{name}.{k}"] = v
            with torch.no_grad():
                model.get_parameter(name).copy_(F.dequantize_4bit(packed, qs, quant_type="nf4"))
        else:
            state[name] = tensor.contiguous()
    return state


@torch.no_grad()
def logits_of(model, prompt):
    return model(torch.tensor([prompt])).logits[0, -N_LOGIT_POSITIONS:].float()


def via_transformers(folder, reference):
    """The model loaded through transformers' bitsandbytes integration, when it loads on this CPU with every
    projection a Linear4bit; None otherwise."""
    try:
        model = LlamaForCausalLM.from_pretrained(folder, device_map="cpu", dtype=torch.float32).eval()
    except Exception as e:  # noqa: BLE001 (any failure: the dequantized reference is used)
        print(f"transformers' bitsandbytes loading: {type(e).__name__}: {e}")
        return None
    n4 = sum(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    print(f"transformers loaded {n4} Linear4bit modules")
    return model if n4 == 2 * len(PROJECTIONS) else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "pie", "lora", "qlora"))
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    config = make_config()
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights of a trained model's size (the default init is nearly all noise-free zeros)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(torch.randn(p.shape) / math.sqrt(p.shape[-1]))
    state = quantized_state(model)

    folder = os.path.join(args.out, "model")
    os.makedirs(folder, exist_ok=True)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = config.to_dict()
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["dtype"] = "float32"
    cfg["quantization_config"] = {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
        "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "float32",
        "bnb_4bit_quant_storage": "uint8", "llm_int8_skip_modules": ["lm_head"],
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    prompt = torch.randint(3, 256, (PROMPT_LEN,), generator=torch.Generator().manual_seed(args.seed)).tolist()
    base_logits = logits_of(model, prompt)
    loaded = via_transformers(folder, model)

    # The adapter, made over the dequantized base (its LoRA pairs do not depend on the base's type).
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=list(PROJECTIONS)))
    generator = torch.Generator().manual_seed(args.seed + 1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))
    adapter_dir = os.path.join(args.out, "adapter")
    peft_model.save_pretrained(adapter_dir)
    readme = os.path.join(adapter_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    config_path = os.path.join(adapter_dir, "adapter_config.json")
    adapter_config = json.load(open(config_path))
    adapter_config["base_model_name_or_path"] = "qlora/model"
    with open(config_path, "w") as f:
        json.dump(adapter_config, f, indent=2, sort_keys=True)
        f.write("\n")
    adapter_logits = logits_of(peft_model.eval(), prompt)

    record = {"generator": "tools/make_nf4_test_model.py", "transformers": transformers.__version__,
              "peft": peft.__version__, "bitsandbytes": bnb.__version__, "torch": torch.__version__,
              "prompt": prompt, "logit_positions": list(range(PROMPT_LEN - N_LOGIT_POSITIONS, PROMPT_LEN)),
              "base": base_logits.tolist(), "adapter": adapter_logits.tolist()}
    if loaded is not None:  # QLoRA as users run it: transformers' Linear4bit, the adapter through PEFT
        record["linear4bit_base"] = logits_of(loaded, prompt).tolist()
        record["linear4bit_adapter"] = logits_of(PeftModel.from_pretrained(loaded, adapter_dir).eval(), prompt).tolist()
        for k in ("base", "adapter"):
            diff = (torch.tensor(record["linear4bit_" + k]) - torch.tensor(record[k])).abs().max()
            print(f"{k}: transformers' Linear4bit vs f32 over the dequantized weights: max |diff| {float(diff):.3g}")
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
        f.write("\n")
    print(f"adapter moves the logits by up to {float((adapter_logits - base_logits).abs().max()):.3f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Makes the PEFT adapters and transformers + PEFT goldens of tests/pie/lora/adapters.

For the llama and qwen2 test models of tests/pie/runner/models (tools/make_test_models.py), three LoRA
adapters made by PEFT with random, non-zero A and B (PEFT starts B at zero; a zero B would test nothing):
  a: rank 4, alpha 8, q/k/v/o_proj
  b: rank 7, alpha 16, rsLoRA, gate/up/down_proj and q/k_proj
  c: rank 2, alpha 3, every projection and lm_head
saved as PEFT writes them (adapter_config.json, adapter_model.safetensors), and golden.json: transformers +
PEFT's f32 logits of the last positions of a prompt for the base, each adapter alone, a and b stacked with
scales 0.5 and 1.5, and c at scale 2.

Needs torch, transformers and peft (any venv; e.g. python3 -m venv .venv-peft && .venv-peft/bin/pip install
torch transformers peft). Usage:
  .venv-peft/bin/python tools/make_lora_test_adapters.py [--out tests/pie/lora/adapters]
"""

import argparse
import json
import math
import os

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

PROMPT_LEN = 32
N_LOGIT_POSITIONS = 6

ADAPTERS = {
    "a": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    "b": dict(r=7, lora_alpha=16, use_rslora=True, target_modules=["gate_proj", "up_proj", "down_proj", "q_proj",
                                                                   "k_proj"]),
    "c": dict(r=2, lora_alpha=3, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj", "lm_head"]),
}

# name -> [(adapter, scale), ...]; [] is the base.
CASES = {
    "base": [],
    "a": [("a", 1.0)],
    "b": [("b", 1.0)],
    "c": [("c", 1.0)],
    "a0.5+b1.5": [("a", 0.5), ("b", 1.5)],
    "c2": [("c", 2.0)],
}


def load_base(models, name):
    model = AutoModelForCausalLM.from_pretrained(os.path.join(models, name), torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()


def randomize_lora(model, generator):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:  # [r, n_in]
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))
            elif "lora_B" in name:  # [n_out, r]
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))


@torch.no_grad()
def logits_of(model, prompt):
    return model(torch.tensor([prompt])).logits[0, -N_LOGIT_POSITIONS:]


def set_case(model, case):
    """Activates the adapters of `case` with their scales (PEFT's scaling times the user's)."""
    names = [n for n, _ in case]
    model.base_model.set_adapter(names)
    for module in model.modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            for n, s in case:
                if n in module.scaling:
                    module.scaling[n] = module._orchard_base_scaling[n] * s


def make(models, out, name, seed):
    runner_golden = json.load(open(os.path.join(models, name, "golden.json")))
    prompt = runner_golden["prompt"][:PROMPT_LEN]
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    for adapter, kwargs in ADAPTERS.items():
        model = get_peft_model(load_base(models, name), LoraConfig(**kwargs))
        randomize_lora(model, generator)
        # The LoRA pairs only (not a copy of lm_head's base weight, which PEFT adds when lm_head is a target).
        model.save_pretrained(os.path.join(folder, adapter), save_embedding_layers=False)
        readme = os.path.join(folder, adapter, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
        config_path = os.path.join(folder, adapter, "adapter_config.json")
        config = json.load(open(config_path))
        config["base_model_name_or_path"] = name  # not this machine's path
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
    base = load_base(models, name)
    record = {"model": name, "transformers": transformers.__version__, "peft": peft.__version__,
              "torch": torch.__version__, "seed": seed, "prompt": prompt,
              "logit_positions": list(range(PROMPT_LEN - N_LOGIT_POSITIONS, PROMPT_LEN)), "cases": []}
    base_logits = logits_of(base, prompt)
    model = PeftModel.from_pretrained(base, os.path.join(folder, "a"), adapter_name="a")
    for adapter in ("b", "c"):
        model.load_adapter(os.path.join(folder, adapter), adapter_name=adapter)
    model.eval()
    for module in model.modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            module._orchard_base_scaling = dict(module.scaling)
    for case_name, case in CASES.items():
        if case:
            set_case(model, case)
            logits = logits_of(model, prompt)
        else:
            logits = base_logits
        record["cases"].append({"name": case_name, "adapters": [{"name": n, "scale": s} for n, s in case],
                                "logits": [[float(x) for x in row] for row in logits.tolist()]})
        print(f"{name} {case_name}: max |logits - base| {float((logits - base_logits).abs().max()):.4f}")
    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--models", default=os.path.join(here, "..", "tests", "pie", "runner", "models"))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "pie", "lora", "adapters"))
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for i, name in enumerate(["llama", "qwen2"]):
        make(args.models, args.out, name, args.seed + i)


if __name__ == "__main__":
    main()

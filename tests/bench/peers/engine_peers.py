#!/usr/bin/env python3
"""Constrained vs unconstrained generation throughput, the peer side (scripts/bench-engine.sh).

  engine_peers.py make-model DIR --tokenizer TOKENIZER_JSON
      Writes a Hugging Face folder with a random-weight Llama (seed 0; n_embd 256, 4 layers, 4 query heads
      of 64 over 2 key/value heads, SwiGLU 768: the shape of Orchard's embedded default model) on the given
      tokenizer (its vocabulary size), so that Orchard (`orchard run -m DIR`) and the peer run the same model.
  engine_peers.py run DIR --schema FILE [--batch 8] [--max-new-tokens 1024] [--runs 3]
      Hugging Face transformers generate() on CPU at batch B, sampled (temperature 1, no top-k/top-p), one
      torch seed: constrained by the JSON Schema with XGrammar's logits processor, then unconstrained with EOS
      suppressed for as many new tokens as the constrained rows averaged. Prints one JSON line per mode with
      generated tokens per second (best of --runs) and the ratio constrained / unconstrained.
Needs torch, transformers, xgrammar (scripts/requirements-bench.txt).
"""
import argparse
import json
import shutil
import sys
import time


def make_model(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with open(args.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    ids = [t["id"] for t in tok.get("added_tokens", [])] + list(tok["model"]["vocab"].values())
    vocab = max(ids) + 1
    by_text = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    by_text.update(tok["model"]["vocab"])
    bos = by_text.get("<s>", 1)
    eos = by_text.get("</s>", 2)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=bos,
                         eos_token_id=eos, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(args.dir, safe_serialization=True)
    shutil.copy(args.tokenizer, f"{args.dir}/tokenizer.json")
    with open(f"{args.dir}/tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    print(json.dumps({"model": args.dir, "vocab": vocab}))


def run(args):
    import torch
    import xgrammar as xgr
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(args.threads)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=f"{args.dir}/tokenizer.json", bos_token="<s>",
                                        eos_token="</s>")
    model = AutoModelForCausalLM.from_pretrained(args.dir, torch_dtype=torch.float32)
    model.eval()
    prompt = tokenizer("A list as JSON:", return_tensors="pt").input_ids
    prompt = torch.cat([torch.tensor([[model.config.bos_token_id]]), prompt], dim=1).repeat(args.batch, 1)
    with open(args.schema, encoding="utf-8") as f:
        schema = f.read()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiled = xgr.GrammarCompiler(info).compile_json_schema(schema, any_whitespace=False)

    def one(constrained, max_new_tokens):
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                      pad_token_id=model.config.eos_token_id, attention_mask=torch.ones_like(prompt))
        if constrained:
            kwargs["logits_processor"] = [xgr.contrib.hf.LogitsProcessor(compiled)]
        else:
            kwargs["suppress_tokens"] = [model.config.eos_token_id]
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, **kwargs)
        seconds = time.perf_counter() - t0
        new = out[:, prompt.shape[1]:]
        # Generated tokens: up to and including each row's first EOS (later positions are padding).
        n = 0
        for row in new.tolist():
            n += row.index(model.config.eos_token_id) + 1 if model.config.eos_token_id in row else len(row)
        return n, seconds

    results = {}
    max_new = args.max_new_tokens
    for mode in ("constrained", "unconstrained"):
        best = None
        for _ in range(args.runs):
            n, s = one(mode == "constrained", max_new)
            if best is None or n / s > best[0] / best[1]:
                best = (n, s)
        results[mode] = best[0] / best[1]
        if mode == "constrained":
            max_new = max(1, round(best[0] / args.batch))  # the same lengths, unconstrained
        print(json.dumps({"peer": "transformers+xgrammar", "mode": mode, "batch": args.batch,
                          "tokens": best[0], "seconds": round(best[1], 4), "tokens_per_second": round(results[mode], 2)}))
    print(json.dumps({"peer": "transformers+xgrammar",
                      "ratio_constrained_to_unconstrained": round(results["constrained"] / results["unconstrained"], 3)}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("dir")
    m.add_argument("--tokenizer", required=True)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--schema", required=True)
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--max-new-tokens", type=int, default=1024)
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    make_model(args) if args.cmd == "make-model" else run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

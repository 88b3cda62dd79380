#!/usr/bin/env python3
"""Makes a small Hugging Face model with random weights for the transformers check: a Llama of 2 layers and
width 64 (LlamaForCausalLM, seeded), with a byte-level BPE tokenizer of 1,024 tokens trained on JSON texts
(MaskBench's test instances, or the given files), saved with save_pretrained. Needs torch, transformers and
tokenizers.

  make_tiny_hf_model.py OUT_DIR [--texts FILE.json ...] [--seed N]
"""
import argparse
import glob
import json
import os
import sys

VOCAB = 1024
EOS = "</s>"


def training_texts(files):
    for path in files:
        with open(path, encoding="utf-8") as f:
            for t in json.load(f).get("tests", []):
                if isinstance(t.get("text"), str):
                    yield t["text"]


def make(out_dir, text_files, seed=0):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(training_texts(text_files), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token=EOS, pad_token=EOS)

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--texts", nargs="*", help="MaskBench files whose test texts train the tokenizer "
                                               "(default: ../shared/data/maskbench-dev/*.json)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    files = a.texts
    if not files:
        shared = os.environ.get("ORCHARD_SHARED_DATA") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data")
        files = sorted(glob.glob(os.path.join(shared, "maskbench-dev", "*.json")))
    if not files:
        print("make_tiny_hf_model: no training texts (give --texts or set ORCHARD_SHARED_DATA)", file=sys.stderr)
        return 2
    print(make(a.out_dir, files, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Orchard's CPU forward pass beside llama.cpp on the same GGUF file with the same threads: prefill tokens/s
# (one PROMPT-token prompt in one step) and decode tokens/s at batch 1, 4 and 16 (B sequences stepping
# together, logits for every row), for a TinyLlama-1.1B-shaped llama (22 layers, 2048 hidden, 5632 ff,
# 32 heads, 4 KV heads, vocab 32000) with random weights in q8_0 and q4_0.
#
# The model: tools/make_bench_model.py writes a Hugging Face folder (random f16 weights, the llama2
# tokenizer), `orchard convert --type q8_0|q4_0` makes the GGUF files both engines load. Orchard runs through
# orchard_bench_runner (pie::ModelRunner directly, tests/bench/runner_bench.cpp), llama.cpp through
# llama-cpp-python's low-level API (tests/bench/peers/llamacpp_peer.py); both take the same token stream,
# best of REPS, f16 KV cache. Each type's pair of runs holds /tmp/orchard-cpu-bench.lock. Prints one table
# with the ratios Orchard / llama.cpp.
#
#   scripts/bench-llamacpp.sh [BUILD_DIR]   (default build/; builds orchard and orchard_bench_runner there)
# Environment: THREADS (2), PROMPT (128), BATCHES (1,4,16), STEPS (16), REPS (2), TYPES ("q8_0 q4_0"),
# MODEL_DIR (/tmp/orchard-bench-llamacpp: the generated model, ~3.9 GB, kept between runs),
# PYTHON (.venv-model/bin/python: needs llama-cpp-python and numpy).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
SHARED="${ORCHARD_SHARED_DATA:-$ROOT/../shared/data}"
PY="${PYTHON:-$ROOT/.venv-model/bin/python}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-128}"
BATCHES="${BATCHES:-1,4,16}"
STEPS="${STEPS:-16}"
REPS="${REPS:-2}"
TYPES="${TYPES:-q8_0 q4_0}"
MODEL_DIR="${MODEL_DIR:-/tmp/orchard-bench-llamacpp}"
LOCK=/tmp/orchard-cpu-bench.lock

if ! "$PY" -c 'import llama_cpp, numpy' 2>/dev/null; then
  echo "bench-llamacpp: $PY lacks llama-cpp-python or numpy (pip install llama-cpp-python numpy)" >&2
  exit 1
fi
if [ ! -d "$BUILD" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target orchard orchard_bench_runner -j2 >/dev/null

mkdir -p "$MODEL_DIR"
if [ ! -f "$MODEL_DIR/hf/model.safetensors" ]; then
  "$PY" "$ROOT/tools/make_bench_model.py" "$MODEL_DIR/hf" --tokenizer "$SHARED/tokenizers/hf/llama2.tokenizer.json"
fi
for t in $TYPES; do
  if [ ! -f "$MODEL_DIR/tinyllama-$t.gguf" ]; then
    "$BUILD/pie/orchard" convert "$MODEL_DIR/hf" -o "$MODEL_DIR/tinyllama-$t.gguf" --type "$t" >/dev/null
  fi
done

ARGS=(--threads "$THREADS" --prompt "$PROMPT" --batches "$BATCHES" --steps "$STEPS" --reps "$REPS")
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for t in $TYPES; do
  gguf="$MODEL_DIR/tinyllama-$t.gguf"
  (
    flock 9  # both engines back to back under the lock, so they see the same machine load
    "$BUILD/tests/bench/orchard_bench_runner" "$gguf" "${ARGS[@]}" > "$WORK/$t.ours"
    "$PY" "$ROOT/tests/bench/peers/llamacpp_peer.py" "$gguf" "${ARGS[@]}" > "$WORK/$t.peer"
  ) 9>"$LOCK"
done

"$PY" - "$WORK" $TYPES <<'PY'
import json, sys
work, types = sys.argv[1], sys.argv[2:]
print(f"{'type':6} {'measure':14} {'orchard tok/s':>14} {'llama.cpp tok/s':>16} {'ratio':>7}")
for t in types:
    ours = json.load(open(f"{work}/{t}.ours"))
    peer = json.load(open(f"{work}/{t}.peer"))
    rows = [(f"prefill {ours['prompt']}", ours["prefill_tok_s"], peer["prefill_tok_s"])]
    rows += [(f"decode b={b}", ours["decode_tok_s"][b], peer["decode_tok_s"][b]) for b in ours["decode_tok_s"]]
    for name, a, b in rows:
        print(f"{t:6} {name:14} {a:14.1f} {b:16.1f} {a / b:6.2f}x")
print(f"threads {ours['threads']}, llama-cpp-python {peer['version']}, decode steps {ours['steps']}")
PY

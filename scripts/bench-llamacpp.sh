#!/usr/bin/env bash
# Orchard's CPU forward pass beside llama.cpp on the same GGUF file with the same threads: prefill tokens/s
# (one PROMPT-token prompt in one step) and decode tokens/s at each batch of BATCHES (B sequences stepping
# together, one token each per step, logits for every row).
#
# The model: MODEL=path/to/file.gguf (e.g. the default SmolLM2-135M-Instruct Q4_1), or else a
# TinyLlama-1.1B-shaped llama (22 layers, 2048 hidden, 5632 ff, 32 heads, 4 KV heads, vocab 32000) with
# random weights in each of TYPES: tools/make_bench_model.py writes a Hugging Face folder (random f16
# weights, the llama2 tokenizer) and `orchard convert --type T` the GGUF files both engines load.
#
# Orchard runs through orchard_bench_runner (pie::ModelRunner directly, tests/bench/runner_bench.cpp),
# llama.cpp through llama-cpp-python's low-level API (tests/bench/peers/llamacpp_peer.py); both take the
# same token stream and an f16 KV cache. The machine may be shared: each of REPS rounds runs one Orchard
# process and one llama.cpp process back to back under /tmp/orchard-cpu-bench.lock (the order alternating
# from round to round), so both see the same load, and the table gives each measure's median and range over
# the rounds with the ratio of the medians.
#
#   scripts/bench-llamacpp.sh [BUILD_DIR]   (default build/; builds orchard and orchard_bench_runner there)
#   MODEL=/work/models/SmolLM2-135M-Instruct.Q4_1.gguf PROMPT=512 BATCHES=1,8 scripts/bench-llamacpp.sh
# Environment: MODEL (unset: the generated model), THREADS (2), PROMPT (128), BATCHES (1,4,16), STEPS (16),
# REPS (3), TYPES ("q8_0 q4_0", generated model only), MODEL_DIR (/tmp/orchard-bench-llamacpp: the
# generated model, ~3.9 GB, kept between runs), PYTHON (.venv-model/bin/python: needs llama-cpp-python and
# numpy), RUNNER (a prebuilt orchard_bench_runner: nothing is built then; MODEL must be set).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
SHARED="${ORCHARD_SHARED_DATA:-$ROOT/../shared/data}"
PY="${PYTHON:-$ROOT/.venv-model/bin/python}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-128}"
BATCHES="${BATCHES:-1,4,16}"
STEPS="${STEPS:-16}"
REPS="${REPS:-3}"
TYPES="${TYPES:-q8_0 q4_0}"
MODEL="${MODEL:-}"
RUNNER="${RUNNER:-}"
MODEL_DIR="${MODEL_DIR:-/tmp/orchard-bench-llamacpp}"
LOCK=/tmp/orchard-cpu-bench.lock

if ! "$PY" -c 'import llama_cpp, numpy' 2>/dev/null; then
  echo "bench-llamacpp: $PY lacks llama-cpp-python or numpy (pip install llama-cpp-python numpy)" >&2
  exit 1
fi
if [ -n "$MODEL" ] && [ ! -f "$MODEL" ]; then
  echo "bench-llamacpp: MODEL=$MODEL is not a file" >&2
  exit 1
fi
if [ -n "$RUNNER" ]; then
  if [ -z "$MODEL" ] || [ ! -x "$RUNNER" ]; then
    echo "bench-llamacpp: RUNNER=$RUNNER wants an executable orchard_bench_runner and MODEL set" >&2
    exit 1
  fi
else
  if [ ! -d "$BUILD" ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" --target orchard orchard_bench_runner -j2 >/dev/null
  RUNNER="$BUILD/tests/bench/orchard_bench_runner"
fi

# name=path of each model to run.
MODELS=()
if [ -n "$MODEL" ]; then
  MODELS+=("$(basename "$MODEL" .gguf)=$MODEL")
else
  mkdir -p "$MODEL_DIR"
  if [ ! -f "$MODEL_DIR/hf/model.safetensors" ]; then
    "$PY" "$ROOT/tools/make_bench_model.py" "$MODEL_DIR/hf" --tokenizer "$SHARED/tokenizers/hf/llama2.tokenizer.json"
  fi
  for t in $TYPES; do
    if [ ! -f "$MODEL_DIR/tinyllama-$t.gguf" ]; then
      "$BUILD/pie/orchard" convert "$MODEL_DIR/hf" -o "$MODEL_DIR/tinyllama-$t.gguf" --type "$t" >/dev/null
    fi
    MODELS+=("tinyllama-$t=$MODEL_DIR/tinyllama-$t.gguf")
  done
fi

ARGS=(--threads "$THREADS" --prompt "$PROMPT" --batches "$BATCHES" --steps "$STEPS" --reps 1)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for m in "${MODELS[@]}"; do
  name="${m%%=*}"
  gguf="${m#*=}"
  for rep in $(seq 1 "$REPS"); do
    (
      flock 9  # both engines back to back under the lock, so they see the same machine load
      ours() { "$RUNNER" "$gguf" "${ARGS[@]}" > "$WORK/$name.ours.$rep"; }
      peer() { "$PY" "$ROOT/tests/bench/peers/llamacpp_peer.py" "$gguf" "${ARGS[@]}" > "$WORK/$name.peer.$rep"; }
      if [ $((rep % 2)) -eq 1 ]; then ours; peer; else peer; ours; fi
    ) 9>"$LOCK"
  done
done

names=()
for m in "${MODELS[@]}"; do names+=("${m%%=*}"); done
"$PY" - "$WORK" "$REPS" "${names[@]}" <<'PY'
import json, statistics, sys
work, reps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'model':30} {'measure':12} {'orchard tok/s (min-max)':>26} {'llama.cpp tok/s (min-max)':>28} {'ratio':>7}")
for n in names:
    ours = [json.load(open(f"{work}/{n}.ours.{r}")) for r in range(1, reps + 1)]
    peer = [json.load(open(f"{work}/{n}.peer.{r}")) for r in range(1, reps + 1)]
    rows = [(f"prefill {ours[0]['prompt']}", [o["prefill_tok_s"] for o in ours], [p["prefill_tok_s"] for p in peer])]
    for b in ours[0]["decode_tok_s"]:
        rows.append((f"decode b={b}", [o["decode_tok_s"][b] for o in ours], [p["decode_tok_s"][b] for p in peer]))
    for measure, a, b in rows:
        ma, mb = statistics.median(a), statistics.median(b)
        sa = f"{ma:.1f} ({min(a):.1f}-{max(a):.1f})"
        sb = f"{mb:.1f} ({min(b):.1f}-{max(b):.1f})"
        print(f"{n:30} {measure:12} {sa:>26} {sb:>28} {ma / mb:6.2f}x")
print(f"threads {ours[0]['threads']}, {reps} rounds, decode steps {ours[0]['steps']}, "
      f"llama-cpp-python {peer[0]['version']}")
PY

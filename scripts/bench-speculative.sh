#!/usr/bin/env bash
# Speculative decoding (prompt lookup) beside the same runs without it, on the default model
# (SmolLM2-135M-Instruct), batch 1, THREADS threads: extraction prompts whose JSON answer (schema-
# constrained, greedy) copies names, dates and numbers from a paragraph (tests/bench/speculative/
# extraction.json). Each of REPS rounds runs every case once without and once with speculation (the order
# alternating), under /tmp/orchard-cpu-bench.lock; the outputs must be identical. Prints per case the
# median decode tokens/s of each, the ratio, and the drafts kept; then batch BATCH (PARALLEL requests at
# once) with and without --spec, where the adaptive rule keeps speculation off (no slowdown expected).
#
#   scripts/bench-speculative.sh [BUILD_DIR]   Environment: THREADS (2), REPS (5), PARALLEL (16),
#   ORCHARD_BIN (a prebuilt orchard; nothing is built then), MODEL (a model path; default: the store's
#   default model), RUNNER (a prebuilt orchard_bench_runner, with MODEL: it also prints what a step of 1, 2,
#   3, 5 and 9 tokens of one sequence costs, the price of verifying 0..8 drafted tokens), PRODUCTS (a prebuilt
#   few_token_products_bench: it also prints what a step's products cost at 1, 2, 3, 5, 9 tokens, product by
#   product, on one thread, with the weights as the CPU backend holds them (q4_1 repacked where AVX-512/VNNI
#   runs) and as the file has them), PYTHON (python3). ORCHARD_CPU_REPACK=0 in the environment runs orchard
#   on the file's weight layout (docs/cpu-kernels.md).
#
# On another machine (the GPU host's CPU, pinned, no GPU): carry the three binaries, their shared libraries
# and the model, then
#   CUDA_VISIBLE_DEVICES= ORCHARD_BIN=orchard RUNNER=orchard_bench_runner PRODUCTS=few_token_products_bench \
#     MODEL=model.gguf REPS=3 taskset -c 0,1 scripts/bench-speculative.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
THREADS="${THREADS:-2}"
REPS="${REPS:-5}"
PARALLEL="${PARALLEL:-16}"
PY="${PYTHON:-python3}"
LOCK=/tmp/orchard-cpu-bench.lock
MODEL_ARGS=()
[ -n "${MODEL:-}" ] && MODEL_ARGS=(-m "$MODEL")
if [ -z "${ORCHARD_BIN:-}" ]; then
  cmake --build "$BUILD" --target orchard -j2 >/dev/null
  ORCHARD_BIN="$BUILD/pie/orchard"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PY" - "$ROOT/tests/bench/speculative/extraction.json" "$WORK" <<'PY'
import json, sys, os
for c in json.load(open(sys.argv[1])):
    open(os.path.join(sys.argv[2], c["name"] + ".txt"), "w").write(c["text"] + "\n")
    json.dump(c["schema"], open(os.path.join(sys.argv[2], c["name"] + ".schema.json"), "w"))
PY
cases=$(cd "$WORK" && ls *.txt | sed 's/\.txt$//')
run_case() {  # NAME MODE ROUND: appends the JSON summary, checks the output against the first one
  local name=$1 mode=$2 round=$3
  flock "$LOCK" "$ORCHARD_BIN" run "${MODEL_ARGS[@]}" --chat --schema "$WORK/$name.schema.json" -f "$WORK/$name.txt" --temp 0 \
    --threads "$THREADS" --spec "$mode" --json-stats >"$WORK/$name.$mode.$round.out" 2>>"$WORK/$name.$mode.stats"
  if [ -f "$WORK/$name.reference" ]; then
    cmp -s "$WORK/$name.reference" "$WORK/$name.$mode.$round.out" || {
      echo "bench-speculative: $name differs with --spec $mode" >&2; exit 1; }
  else
    cp "$WORK/$name.$mode.$round.out" "$WORK/$name.reference"
  fi
}
for round in $(seq "$REPS"); do
  for name in $cases; do
    if [ $((round % 2)) -eq 1 ]; then run_case "$name" off "$round"; run_case "$name" ngram "$round"
    else run_case "$name" ngram "$round"; run_case "$name" off "$round"; fi
  done
done
# Batch PARALLEL: the same extraction prompt PARALLEL times at once (sampled, seeds 1..PARALLEL; run's
# --parallel takes the raw prompt), with and without --spec.
batch() {
  flock "$LOCK" "$ORCHARD_BIN" run "${MODEL_ARGS[@]}" --schema "$WORK/invoice.schema.json" -f "$WORK/invoice.txt" \
    --temp 0.7 --seed 1 --parallel "$PARALLEL" --threads "$THREADS" --spec "$1" --json-stats >/dev/null \
    2>>"$WORK/batch.$1.stats"
}
for round in $(seq "$REPS"); do batch off; batch ngram; done
if [ -n "${RUNNER:-}" ]; then
  [ -n "${MODEL:-}" ] || { echo "bench-speculative: RUNNER needs MODEL (the model's path)" >&2; exit 2; }
  flock "$LOCK" "$RUNNER" "$MODEL" --threads "$THREADS" --batches 1 \
    --prompt 128 --steps 24 --reps 3 --chunks 1,2,3,5,9 >"$WORK/chunks.json"
fi
if [ -n "${PRODUCTS:-}" ]; then
  flock "$LOCK" "$PRODUCTS" --threads 1 --reps 10 >"$WORK/products.txt"
  flock "$LOCK" "$PRODUCTS" --threads 1 --reps 10 --layout plain >>"$WORK/products.txt"
fi
"$PY" - "$WORK" "$cases" "$THREADS" "$PARALLEL" <<'PY'
import json, os, statistics, sys
work, cases, threads, parallel = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
def stats(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
print(f"SmolLM2-135M-Instruct Q4_1, {threads} threads, batch 1, greedy, JSON Schema; decode tokens/s (median of runs)")
print("| case | tokens | without | with prompt lookup | ratio | drafts kept |")
print("| --- | --- | --- | --- | --- | --- |")
ratios = []
for c in cases:
    off, on = stats(os.path.join(work, c + ".off.stats")), stats(os.path.join(work, c + ".ngram.stats"))
    a = statistics.median(r["tokens_per_second"] for r in off)
    b = statistics.median(r["tokens_per_second"] for r in on)
    d, k = on[0]["draft_tokens"], on[0]["accepted_draft_tokens"]
    ratios.append(b / a)
    print(f"| {c} | {on[0]['completion_tokens']} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {k} of {d} ({k / max(d, 1):.0%}) |")
print(f"geometric mean ratio: {statistics.geometric_mean(ratios):.2f}x")
off, on = stats(os.path.join(work, "batch.off.stats")), stats(os.path.join(work, "batch.ngram.stats"))
a = statistics.median(r["tokens_per_second"] for r in off)
b = statistics.median(r["tokens_per_second"] for r in on)
print(f"batch {parallel}: {a:.1f} tokens/s without, {b:.1f} with --spec ngram ({b / a:.3f}x; drafts {on[0]['draft_tokens']})")
if os.path.exists(os.path.join(work, "chunks.json")):
    ms = json.load(open(os.path.join(work, "chunks.json")))["chunk_step_ms"]
    print("a step of one sequence's T tokens against one of 1 token: " +
          ", ".join(f"T={t}: {ms[t] / ms['1']:.2f}x" for t in ms) + f" (1 token: {ms['1']:.2f} ms)")
if os.path.exists(os.path.join(work, "products.txt")):
    print(open(os.path.join(work, "products.txt")).read(), end="")
PY

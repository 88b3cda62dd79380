#!/usr/bin/env bash
# Engine throughput with and without a JSON Schema constraint, at batch 8 (8 requests at once, seeds 0..7),
# on two random-weight Llamas of the same shape (n_embd 256, 4 layers, GQA 4/2, SwiGLU 768): the embedded
# default model (byte-level BPE, ~560 tokens) and the same shape on the Phi-3 tokenizer (32,011 tokens,
# written as a Hugging Face folder by tests/bench/peers/engine_peers.py). The constrained runs generate a
# list of 12 bounded objects (compact JSON); the unconstrained ones then generate, past EOS, as many tokens
# per request as the constrained ones averaged (same sequence lengths, so attention costs the same). Prints decode
# tokens/s per mode (best of RUNS), the ratio constrained / unconstrained (all tokens, and sampled tokens
# only: forced jump-forward tokens excluded), and the same ratio for the peer (transformers + XGrammar on
# the 32K model, same schema, same batch) when its packages are there.
#
#   scripts/bench-engine.sh [BUILD_DIR]     (default build/; builds the orchard target there)
# Timed runs hold /tmp/orchard-cpu-bench.lock. Threads: THREADS (default 2); peer runs: PEER_RUNS (default 1:
# transformers on CPU takes minutes per run).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
SHARED="${ORCHARD_SHARED_DATA:-$ROOT/../shared/data}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
ORCHARD="$BUILD/pie/orchard"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-2}"
LOCK=/tmp/orchard-cpu-bench.lock

if [ ! -d "$BUILD" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target orchard -j2 >/dev/null

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$ROOT/tests/bench/schemas/list.schema.json" "$WORK/list.schema.json"
"$PY" "$ROOT/tests/bench/peers/engine_peers.py" make-model "$WORK/model32k" \
  --tokenizer "$SHARED/tokenizers/hf/phi-3.tokenizer.json" >/dev/null 2>&1

common=(-p 'A list as JSON:' --parallel 8 --seed 0 --temp 1 --top-k 0 --top-p 1 --threads "$THREADS" --json-stats)
# best_of NAME ARGS...: RUNS runs of orchard run, the JSON summary of the fastest kept in $WORK/NAME.json.
best_of() {
  local name=$1; shift
  for i in $(seq "$RUNS"); do
    flock "$LOCK" "$ORCHARD" run "$@" >/dev/null 2>>"$WORK/$name.runs"
  done
  "$PY" - "$WORK/$name.runs" > "$WORK/$name.json" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(json.dumps(max(runs, key=lambda r: r["tokens_per_second"])))
PY
}
for model in default 32k; do
  margs=(-m orchard-random)
  [ "$model" = 32k ] && margs=(-m "$WORK/model32k")
  best_of "$model.json" "${margs[@]}" "${common[@]}" -n 1024 --schema "$WORK/list.schema.json" --json-layout compact
  n=$("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(round(r["completion_tokens"] / r["requests"]))' \
    "$WORK/$model.json.json")
  best_of "$model.free" "${margs[@]}" "${common[@]}" -n "$n" --ignore-eos
done

"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
for model, label in (("default", "default model (~560 tokens)"), ("32k", "same shape, Phi-3 tokenizer (32,011 tokens)")):
    free = json.load(open(f"{w}/{model}.free.json"))
    cons = json.load(open(f"{w}/{model}.json.json"))
    def sampled_rate(r):
        n = r["completion_tokens"] - r["forced_tokens"]
        return (n - r["requests"]) / r["decode_seconds"]
    print(f"orchard, {label}, batch 8:")
    print(f"  unconstrained  {free['tokens_per_second']:8.1f} tokens/s ({free['completion_tokens']} tokens)")
    print(f"  JSON schema    {cons['tokens_per_second']:8.1f} tokens/s ({cons['completion_tokens']} tokens, "
          f"{cons['forced_tokens']} forced; finish {cons['finish']}); mask time {cons['mask_seconds']:.3f} s "
          f"beside forward {cons['forward_seconds']:.3f} s")
    print(f"  ratio constrained / unconstrained: {cons['tokens_per_second'] / free['tokens_per_second']:.3f} "
          f"(sampled tokens only: {sampled_rate(cons) / free['tokens_per_second']:.3f})")
PY

if "$PY" -c 'import torch, transformers, xgrammar' 2>/dev/null; then
  echo "peer: transformers + xgrammar, same 32K model, batch 8:"
  flock "$LOCK" "$PY" "$ROOT/tests/bench/peers/engine_peers.py" run "$WORK/model32k" --schema "$WORK/list.schema.json" \
    --batch 8 --max-new-tokens 1024 --runs "${PEER_RUNS:-1}" --threads "$THREADS" 2>/dev/null | sed 's/^/  /'
else
  echo "peer skipped: torch, transformers and xgrammar are not in $PY"
fi

#!/usr/bin/env bash
# Grammar masks, Orchard side by side with llguidance and xgrammar, in one run: the same grammars
# (llama.cpp's json/arithmetic/c .gbnf and a regex-heavy pattern), the same token ids (Orchard tokenizes
# the documents with the Llama 3.1 tokenizer and saves the ids; the peers replay them) and the same
# 128,256-token vocabulary. Prints compile time and p50/p99/p99.9/max mask time per engine (Orchard with its
# token tables built in compile, in the background, then at first use), and the ratio to the first (above 1:
# it is faster).
#
#   scripts/bench-grammar.sh [BUILD_DIR]        (default build/; builds the orchard target there)
# Needs the peers in .venv-bench (python3 -m venv .venv-bench && .venv-bench/bin/pip install -r
# scripts/requirements-test.txt -r scripts/requirements-bench.txt); PYTHON overrides.
# On another machine (the device host's CPU): ORCHARD_BIN names a prebuilt orchard (nothing is built) and
# WORKLOADS a folder that `grammar_peers.py workloads` wrote here (it needs the MaskBench files).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
SHARED="${ORCHARD_SHARED_DATA:-$ROOT/../shared/data}"
PY="${PYTHON:-$ROOT/.venv-bench/bin/python}"
ORCHARD="${ORCHARD_BIN:-$BUILD/pie/orchard}"
TOKENIZER="$SHARED/tokenizers/llama3"
REPEAT="${REPEAT:-1}"  # passes over the documents; 1 = the same single pass the peers make
PREFILL_MS="${PREFILL_MS:-20}"

if [ -z "${ORCHARD_BIN:-}" ]; then
  if [ ! -d "$BUILD" ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" --target orchard -j2 >/dev/null
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export ORCHARD_SHARED_DATA="$SHARED"
if [ -n "${WORKLOADS:-}" ]; then
  cp "$WORKLOADS"/* "$WORK"/
  # (the .kind files name each grammar by its path where the workloads were written)
  for k in "$WORK"/*.kind; do
    read -r kind grammar < "$k"
    echo "$kind $WORK/$(basename "$grammar")" > "$k"
  done
else
  "$PY" "$ROOT/tests/bench/peers/grammar_peers.py" workloads "$WORK" >/dev/null
fi

for w in json arithmetic c regex; do
  read -r kind grammar < "$WORK/$w.kind"
  if [ "$kind" = regex ]; then
    src=(--regex "$(cat "$grammar")")
  else
    src=(--gbnf "$grammar")
  fi
  # Orchard four times: every token table built in compile (the ratios' base); in the background (the
  # engine's default: compile returns first), with the first mask right after compile (it may meet tables
  # being built) and PREFILL_MS later (default 20), where a server runs the prompt's prefill; then each
  # at its first use (its first pass over the documents pays for the builds).
  "$ORCHARD" grammar bench -t "$TOKENIZER" "${src[@]}" --docs "$WORK/$w.docs.json" -r "$REPEAT" --tables compile \
    --save-tokens "$WORK/$w.tokens.json" --json "$WORK/$w.orchard.json" >/dev/null 2>"$WORK/$w.orchard.err" || true
  "$ORCHARD" grammar bench -t "$TOKENIZER" "${src[@]}" --docs "$WORK/$w.docs.json" -r "$REPEAT" \
    --tables background --json "$WORK/$w.orchard-bg.json" >/dev/null 2>>"$WORK/$w.orchard.err" || true
  "$ORCHARD" grammar bench -t "$TOKENIZER" "${src[@]}" --docs "$WORK/$w.docs.json" -r "$REPEAT" \
    --tables background --prefill-ms "$PREFILL_MS" --json "$WORK/$w.orchard-bg-prefill.json" >/dev/null \
    2>>"$WORK/$w.orchard.err" || true
  "$ORCHARD" grammar bench -t "$TOKENIZER" "${src[@]}" --docs "$WORK/$w.docs.json" -r "$REPEAT" \
    --tables first-use --json "$WORK/$w.orchard-lazy.json" >/dev/null 2>>"$WORK/$w.orchard.err" || true
  "$PY" "$ROOT/tests/bench/peers/grammar_peers.py" run --grammar-kind "$kind" --grammar "$grammar" \
    --tokens "$WORK/$w.tokens.json" --encoder "$TOKENIZER/encoder.json" > "$WORK/$w.peers.jsonl" || true
done

"$PY" - "$WORK" <<'PYEOF'
import json, os, sys
work = sys.argv[1]
cols = ["compile_ms", "p50_us", "p99_us", "p999_us", "max_us"]
print(f"{'grammar':<11} {'engine':<18} {'masks':>6} {'compile ms':>11} "
      f"{'p50 us':>9} {'p99 us':>9} {'p99.9 us':>9} {'max us':>9}")
for w in ["json", "arithmetic", "c", "regex"]:
    rows = []
    for name in ("orchard", "orchard-bg", "orchard-bg-prefill", "orchard-lazy"):
        path = os.path.join(work, f"{w}.{name}.json")
        if os.path.exists(path):
            o = json.load(open(path)); o["peer"] = name; rows.append(o)
    for line in open(os.path.join(work, w + ".peers.jsonl")):
        rows.append(json.loads(line))
    base = rows[0] if rows and rows[0]["peer"] == "orchard" else None
    for r in rows:
        if "error" in r:
            print(f"{w:<11} {r['peer']:<18} error: {r['error'][:90]}")
            continue
        line = f"{w:<11} {r['peer']:<18} {r.get('masks', 0):>6} " + " ".join(
            f"{r[c]:>{11 if c == 'compile_ms' else 9}.1f}" for c in cols)
        if base is not None and r is not base:
            line += "   ratio x" + " x".join(f"{r[c] / base[c]:.2f}" if base[c] > 0 else "-" for c in cols)
        if r.get("tables") == "in the background":
            line += f"   (tables built at {r['tables_ready_ms']:.1f} ms)"
        if r.get("rejected_documents"):
            line += f"   ({r['rejected_documents']} documents rejected)"
        print(line)
PYEOF

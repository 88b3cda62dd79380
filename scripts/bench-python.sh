#!/usr/bin/env bash
# MaskBench through the Python APIs: Orchard's (orchard.grammar), llguidance's and XGrammar's, on the same
# schema files, tokenizer (Llama 3.1, 128,256 tokens) and token ids in one run, one thread each, with
# Orchard's C++ runner (`orchard grammar bench --maskbench`; token tables built in compile, in the background,
# at first use) beside them: per-token mask time (fill + commit) and compile time percentiles side by side.
# orchard-python minus orchard-background (orchard-python-eager minus orchard-eager) is what the Python call
# costs.
#
#   scripts/bench-python.sh [SAMPLE_EVERY]     (default 20: every 20th file of ../shared/data/maskbench-dev)
# Builds the orchard and _orchard targets in build/ (BUILD overrides). Needs the peers in .venv-bench
# (python3 -m venv .venv-bench && .venv-bench/bin/pip install -r scripts/requirements-test.txt
#  -r scripts/requirements-bench.txt); PYTHON overrides. Extra arguments after the count go to
# tests/bench/peers/maskbench_peers.py (e.g. --jsonl DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
SHARED="${ORCHARD_SHARED_DATA:-$ROOT/../shared/data}"
PY="${PYTHON:-$ROOT/.venv-bench/bin/python}"
EVERY="${1:-20}"
shift || true

if [ ! -d "$BUILD" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORCHARD_PYTHON="$PY" >/dev/null
fi
cmake --build "$BUILD" --target orchard _orchard -j2 >/dev/null
export ORCHARD_SHARED_DATA="$SHARED"
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$ROOT/tests/bench/peers/maskbench_peers.py" --sample-every "$EVERY" \
  --peers orchard-python,orchard-python-eager,llguidance,xgrammar --orchard "$BUILD/pie/orchard" --orchard-both \
  "$@" "$SHARED/maskbench-dev"

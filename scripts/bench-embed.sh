#!/usr/bin/env bash
# Embedding throughput: Orchard (tests/bench/embed_bench.cpp) beside sentence-transformers
# (tests/bench/peers/sentence_transformers_peer.py bench) on all-MiniLM-L6-v2, the same 128 inputs, both
# pinned to the same CPUs with the same thread count, sentences per second at batch 1 and 32 (wall time, best
# repetition), and the ratios.
# usage: scripts/bench-embed.sh [REPETITIONS]   env: PEER_PYTHON (a python with sentence-transformers;
# default .venv-peer/bin/python), CPUS (default 0,1), THREADS (default 2), ORCHARD_BUILD_DIR (default
# build-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
build=${ORCHARD_BUILD_DIR:-build-bench}
cpus=${CPUS:-0,1}
threads=${THREADS:-2}
python=${PEER_PYTHON:-.venv-peer/bin/python}
[ -x "$python" ] || { echo "bench-embed.sh: no python with sentence-transformers at $python (set PEER_PYTHON)" >&2; exit 2; }

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" --target embed_bench -j"${ORCHARD_JOBS:-2}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ORCHARD_EMBED_THREADS=$threads taskset -c "$cpus" "$build/tests/bench/embed_bench" \
  --benchmark_repetitions="$reps" --benchmark_format=json --benchmark_out="$out/ours.json" \
  --benchmark_out_format=json >/dev/null
taskset -c "$cpus" "$python" tests/bench/peers/sentence_transformers_peer.py bench --threads "$threads" \
  --batch 32 --n 128 --repeats "$reps" 2>/dev/null | tail -1 >"$out/peer.json"

python3 - "$out/ours.json" "$out/peer.json" <<'PY'
import json, sys
ours = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration" or b.get("error_occurred"):
        continue
    batch = int(b["run_name"].split("/")[1])
    ours[batch] = max(ours.get(batch, 0), b["sentences_per_s"])
peer = json.load(open(sys.argv[2]))
print(f"{'batch':>5} {'orchard sent/s':>14} {'sentence-transformers sent/s':>28} {'ratio':>6}")
for batch in (1, 32):
    p = peer[f"batch_{batch}_sentences_per_s"]
    print(f"{batch:>5} {ours[batch]:>14.1f} {p:>28.1f} {ours[batch] / p:>5.2f}x")
PY

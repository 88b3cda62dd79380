#!/usr/bin/env bash
# Embedding throughput: Orchard (tests/bench/embed_bench.cpp) beside sentence-transformers
# (tests/bench/peers/sentence_transformers_peer.py bench) on all-MiniLM-L6-v2, the same 128 inputs, both
# pinned to the same CPUs with the same thread count, sentences per second at batch 1 and 32 (wall time),
# and the ratios. The two sides alternate, one pass each per round, and each keeps its best round: load
# from other work drifts over minutes, and alternating exposes both to the same drift. The load average
# is printed before and after.
# usage: scripts/bench-embed.sh [ROUNDS]   env: PEER_PYTHON (a python with sentence-transformers;
# default .venv-peer/bin/python), CPUS (default 0,1), THREADS (default 2), ORCHARD_BUILD_DIR (default
# build-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
build=${ORCHARD_BUILD_DIR:-build-bench}
cpus=${CPUS:-0,1}
threads=${THREADS:-2}
python=${PEER_PYTHON:-.venv-peer/bin/python}
[ -x "$python" ] || { echo "bench-embed.sh: no python with sentence-transformers at $python (set PEER_PYTHON)" >&2; exit 2; }

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" --target embed_bench -j"${ORCHARD_JOBS:-2}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  ORCHARD_EMBED_THREADS=$threads taskset -c "$cpus" "$build/tests/bench/embed_bench" \
    --benchmark_repetitions=1 --benchmark_format=json --benchmark_out="$out/ours.$round.json" \
    --benchmark_out_format=json >/dev/null
  taskset -c "$cpus" "$python" tests/bench/peers/sentence_transformers_peer.py bench --threads "$threads" \
    --batch 32 --n 128 --repeats 1 2>/dev/null | tail -1 >"$out/peer.$round.json"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ours, peer = {}, {}
for r in range(1, rounds + 1):
    for b in json.load(open(f"{out}/ours.{r}.json"))["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        batch = int(b["run_name"].split("/")[1])
        ours.setdefault(batch, []).append(b["sentences_per_s"])
    p = json.load(open(f"{out}/peer.{r}.json"))
    for batch in (1, 32):
        peer.setdefault(batch, []).append(p[f"batch_{batch}_sentences_per_s"])
print(f"{'batch':>5} {'orchard sent/s (best; rounds)':>40} {'sentence-transformers sent/s (best; rounds)':>48} {'ratio':>6}")
for batch in (1, 32):
    o, p = ours[batch], peer[batch]
    fo = f"{max(o):.1f} ({', '.join(f'{x:.1f}' for x in o)})"
    fp = f"{max(p):.1f} ({', '.join(f'{x:.1f}' for x in p)})"
    print(f"{batch:>5} {fo:>40} {fp:>48} {max(o) / max(p):>5.2f}x")
PY

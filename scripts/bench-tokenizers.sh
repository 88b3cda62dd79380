#!/usr/bin/env bash
# Tokenizer encoding throughput: Orchard (tests/bench/tokenizer_bench.cpp) beside Hugging Face tokenizers
# and tiktoken (tests/bench/peers/tokenizer_peers.py), one thread each, same text and vocabulary, same run.
# usage: scripts/bench-tokenizers.sh [REPETITIONS]     (default 3; each figure is the best repetition)
# Prints a table of MB/s (10^6 bytes of UTF-8 text per CPU second: Google Benchmark's rate for ours,
# time.process_time for the peers, one thread each) and the ratios ours / peer.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
build=${ORCHARD_BUILD_DIR:-build-bench}
data=${ORCHARD_SHARED_DATA:-$(pwd)/../shared/data}
python=.venv/bin/python
[ -x "$python" ] || { echo "bench-tokenizers.sh: no venv at .venv (scripts/setup.sh; pip install -r scripts/requirements-bench.txt)" >&2; exit 2; }

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" --target tokenizer_bench -j"${ORCHARD_JOBS:-2}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ORCHARD_SHARED_DATA=$data "$build/tests/bench/tokenizer_bench" --benchmark_repetitions="$reps" \
  --benchmark_format=json --benchmark_out="$out/ours.json" --benchmark_out_format=json >/dev/null
"$python" tests/bench/peers/tokenizer_peers.py --data "$data" --repetitions "$reps" >"$out/peers.jsonl"

"$python" - "$out/ours.json" "$out/peers.jsonl" <<'PY'
import json, sys
ours = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration" or "error_occurred" in b and b["error_occurred"]:
        continue
    fn, case = b["run_name"].split("/")[:2]
    mode = {"BM_EncodeWhole": "Whole", "BM_Encode4KiB": "4KiB", "BM_EncodeWholeCold": "WholeCold"}[fn]
    ours[(case, mode)] = max(ours.get((case, mode), 0), b["bytes_per_second"])
peers = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    peers[(r["case"], r["mode"], r["peer"])] = r["bytes_per_second"]
def mb(x): return f"{x / 1e6:8.2f}" if x else "       -"
def ratio(a, b): return f"{a / b:6.2f}x" if a and b else "      -"
print(f"{'case':<9} {'mode':<6} {'ours MB/s':>9} {'HF MB/s':>8} {'ours/HF':>7} {'tiktoken':>8} {'ours/tt':>7}")
for case in ("Llama3", "LlamaSpm"):
    for mode in ("Whole", "4KiB", "WholeCold"):
        o = ours.get((case, mode))
        hf = peers.get((case, mode, "hf-tokenizers"))
        tt = peers.get((case, mode, "tiktoken"))
        print(f"{case:<9} {mode:<6} {mb(o):>9} {mb(hf):>8} {ratio(o, hf):>7} {mb(tt):>8} {ratio(o, tt):>7}")
print("Whole, 4KiB: warm word caches (ours per thread, Hugging Face per model; tiktoken has none);")
print("WholeCold: a fresh tokenizer per run. Goals: ours >= 2x Hugging Face tokenizers, >= 1x tiktoken.")
PY

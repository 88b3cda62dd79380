#!/usr/bin/env bash
# Issue 35's goals in one run on the GPU machine: Orchard and llama.cpp on the same files (the
# Llama-3.1-8B-shaped F16 model with random weights written by the peer's gen_llama8b_gguf.py, its Q8_0 and
# Q4_0 by `orchard convert`): decode at batch 1 (F16 / Q8_0 / Q4_0, against llama-bench's tg128 and the
# card's copy-rate bound), pp512 (F16 / Q8_0), decode at batch 64 (F16 / Q8_0, against
# llama-batched-bench's S_TG) and JSON-Schema-constrained decode at batch 64 (F16, against free). Logs and
# JSON lines under OUT_DIR; a summary table on standard output.
#
#   ORCHARD=orchard RUNNER=orchard_bench_runner LLAMA_BIN=<folder with llama-bench, llama-batched-bench>
#   PEER=../shared/peers/llama.cpp OUT_DIR=/tmp/goals scripts/bench-cuda-goals.sh
#
# LLAMA_BIN unset: llama.cpp is built from PEER's llama.cpp-src.tar.xz for this card (about 3 minutes with
# 16 cores). WORK (default /tmp/orchard-goals) keeps the models between runs (about 30 GB of disk). Each
# engine's first run of each file fills its caches (Orchard's NVRTC cache included) before anything is timed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
orchard=${ORCHARD:-$ROOT/build/pie/orchard}
runner=${RUNNER:-$ROOT/build/tests/bench/orchard_bench_runner}
peer=${PEER:-$ROOT/../shared/peers/llama.cpp}
work=${WORK:-/tmp/orchard-goals}
out=${OUT_DIR:-$work/out}
mkdir -p "$work" "$out"
if [[ -z "${LLAMA_BIN:-}" ]]; then
  src=$work/llama.cpp; LLAMA_BIN=$src/build/bin
  if [[ ! -x $LLAMA_BIN/llama-bench ]]; then
    mkdir -p "$src" && tar -xJf "$peer/llama.cpp-src.tar.xz" -C "$src"
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    cmake -S "$src" -B "$src/build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DLLAMA_CURL=OFF \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$out/llama-cmake.log"
    ninja -C "$src/build" llama-bench llama-batched-bench >"$out/llama-build.log"
  fi
fi
f16=$work/f16.gguf
if [[ ! -s $f16 ]]; then
  gguf_py=$(find "$work" -type d -name gguf-py | head -1)
  if [[ -z "$gguf_py" ]]; then mkdir -p "$work/peer-src" && tar -xJf "$peer/llama.cpp-src.tar.xz" -C "$work/peer-src"; gguf_py=$(find "$work/peer-src" -type d -name gguf-py | head -1); fi
  python3 "$peer/gen_llama8b_gguf.py" "$f16" "$gguf_py" >"$out/gen.log" 2>&1
fi
for t in q8_0 q4_0; do [[ -s $work/$t.gguf ]] || "$orchard" convert "$f16" -o "$work/$t.gguf" --type "$t" >"$out/convert-$t.log" 2>&1; done
prompt="The quick brown fox jumps over the lazy dog and keeps running through the forest until night falls"
# Warm-up: every path the timed runs take (one token, many tokens, batch 64's products), once per file.
for t in f16 q8_0 q4_0; do
  "$orchard" run --device cuda -m "$work/$t.gguf" -p "$prompt" -n 8 --temp 0 --ignore-eos --parallel 64 >/dev/null 2>&1
done
export ORCHARD="$orchard" MODEL="$f16" WORK="$work" PP_PARALLEL=0
PARALLEL=1 TYPES="f16 q8_0 q4_0" bash "$ROOT/scripts/bench-cuda-engine.sh" >"$out/orchard-batch1.jsonl"
"$LLAMA_BIN/llama-bench" -m "$work/f16.gguf,$work/q8_0.gguf,$work/q4_0.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md \
  >"$out/llama-bench.md" 2>"$out/llama-bench.err"
for t in f16 q8_0; do
  "$runner" "$work/$t.gguf" --device cuda --prompt 512 --batches 1 --steps 1 --reps 4 >"$out/orchard-pp512-$t.json" 2>&1
done
PARALLEL=64 TYPES="f16 q8_0" bash "$ROOT/scripts/bench-cuda-engine.sh" >"$out/orchard-batch64.jsonl"
for t in f16 q8_0; do
  "$LLAMA_BIN/llama-batched-bench" -m "$work/$t.gguf" -ngl 99 -fa -c 40960 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 64 \
    >"$out/llama-batched-$t.txt" 2>&1
done
"$orchard" run --device cuda -m "$f16" -p "$prompt" -n 128 --temp 0 --parallel 64 --schema "$ROOT/tests/bench/schemas/list.schema.json" \
  --json-layout compact --json-stats >/dev/null 2>"$out/orchard-constrained.txt"
python3 - "$out" <<'PY'
import json, re, sys, pathlib
out = pathlib.Path(sys.argv[1])
def jsonl(name):
    return [json.loads(l) for l in (out / name).read_text().splitlines() if l.startswith("{")]
def last_json(name):
    return json.loads([l for l in (out / name).read_text().splitlines() if l.startswith("{")][-1])
bw = next((l["bytes_per_s"] for l in jsonl("orchard-batch1.jsonl") if l.get("measure") == "copy_bandwidth" and "bytes_per_s" in l), None)
ours = {(l["type"], l["parallel"]): l for l in jsonl("orchard-batch1.jsonl") + jsonl("orchard-batch64.jsonl") if l.get("measure") == "orchard_decode"}
llama = {}
for row in (out / "llama-bench.md").read_text().splitlines():
    cells = [c.strip() for c in row.strip("|").split("|")]
    if len(cells) >= 8 and cells[6] in ("pp512", "tg128"):
        kind = "f16" if "F16" in cells[0] else "q8_0" if "Q8_0" in cells[0] else "q4_0"
        llama[(kind, cells[6])] = float(cells[7].split()[0])
for t in ("f16", "q8_0"):
    for row in (out / f"llama-batched-{t}.txt").read_text().splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) >= 8 and cells[2] == "64":
            llama[(t, "batch64")] = float(cells[7])
def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"
print("| measure | Orchard | llama.cpp | ratio |\n| --- | --- | --- | --- |")
for t in ("f16", "q8_0", "q4_0"):
    o = ours.get((t, 1))
    if not o: continue
    tps = o["stats"]["tokens_per_second"]
    bound = f" ({tps / (bw / o['file_bytes']):.1%} of the bound)" if bw else ""
    print(f"| batch 1, {t} | {tps:.1f}{bound} | {llama.get((t, 'tg128'), 0):.1f} | {ratio(tps, llama.get((t, 'tg128')))} |")
for t in ("f16", "q8_0"):
    pp = last_json(f"orchard-pp512-{t}.json")["prefill_tok_s"]
    print(f"| pp512, {t} | {pp:.0f} | {llama.get((t, 'pp512'), 0):.0f} | {ratio(pp, llama.get((t, 'pp512')))} |")
for t in ("f16", "q8_0"):
    o = ours.get((t, 64))
    if o:
        tps = o["stats"]["tokens_per_second"]
        print(f"| batch 64, {t} | {tps:.0f} | {llama.get((t, 'batch64'), 0):.0f} | {ratio(tps, llama.get((t, 'batch64')))} |")
c = last_json("orchard-constrained.txt")["tokens_per_second"]
free = ours.get(("f16", 64), {}).get("stats", {}).get("tokens_per_second")
print(f"| batch 64, f16, JSON Schema | {c:.0f} ({ratio(c, free)} of free) | | |")
PY

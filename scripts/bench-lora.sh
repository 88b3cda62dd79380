#!/usr/bin/env bash
# Batched decoding with LoRA adapters beside the same batch without (tests/bench/lora_bench.cpp): BATCH
# sequences decode together, their rows spread over 1, 8 and 32 distinct rank-RANK adapters on every
# projection (q, k, v, o, gate, up, down), on the CPU (THREADS threads, under /tmp/orchard-cpu-bench.lock)
# or the GPU (DEVICE=cuda). Prints the tokens/s of each and its ratio to no adapters (measured in the same
# process), and the time to attach one more rank-RANK adapter (fit, then the backend's placement: on CUDA
# its upload). The goals (issue 36): 0.8x or more with 8 distinct adapters; attach under 50 ms on the
# 8B shape.
#
#   scripts/bench-lora.sh MODEL [BUILD_DIR]       (MODEL: a GGUF file or Hugging Face folder)
#   scripts/bench-lora.sh --shape NAME [BUILD_DIR] (random f16 weights built in memory: llama8b, the
#                                                  Llama-3.1-8B shape, or tinyllama, TinyLlama-1.1B's)
#   Environment: DEVICE (cpu | cuda), THREADS (2), BATCH (32), RANK (16), STEPS (8), REPS (2), CONTEXT (16),
#   ATTACH_REPS (5); BENCH=path/to/orchard_bench_lora runs that binary instead of building one (a GPU
#   machine with a carried build).
#
# The GPU figures of docs/PERFORMANCE.md:
#   DEVICE=cuda STEPS=16 REPS=3 scripts/bench-lora.sh --shape llama8b
# The CPU ones (the TinyLlama-shaped folder of tools/make_bench_model.py):
#   STEPS=4 REPS=3 CONTEXT=4 scripts/bench-lora.sh /tmp/tinyllama-shape
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ "${1:-}" == "--shape" ]]; then
  MODEL_ARGS=(--shape "${2:?usage: scripts/bench-lora.sh --shape llama8b|tinyllama [BUILD_DIR]}")
  shift 2
else
  MODEL_ARGS=("${1:?usage: scripts/bench-lora.sh MODEL|--shape NAME [BUILD_DIR]}")
  shift
fi
BUILD="${1:-$ROOT/build}"
BENCH="${BENCH:-}"
if [[ -z "$BENCH" ]]; then
  cmake --build "$BUILD" --target orchard_bench_lora -j2 >/dev/null
  BENCH="$BUILD/tests/bench/orchard_bench_lora"
fi
ARGS=("${MODEL_ARGS[@]}" --device "${DEVICE:-cpu}" --threads "${THREADS:-2}" --batch "${BATCH:-32}" --rank "${RANK:-16}"
      --steps "${STEPS:-8}" --reps "${REPS:-2}" --context "${CONTEXT:-16}" --attach-reps "${ATTACH_REPS:-5}"
      --adapters 1,8,32)
if [[ "${DEVICE:-cpu}" == "cpu" ]]; then
  exec flock /tmp/orchard-cpu-bench.lock "$BENCH" "${ARGS[@]}"
fi
exec "$BENCH" "${ARGS[@]}"

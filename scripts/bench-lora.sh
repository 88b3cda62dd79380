#!/usr/bin/env bash
# Batched decoding with LoRA adapters beside the same batch without (tests/bench/lora_bench.cpp): BATCH
# sequences decode together, their rows spread over 1, 8 and 32 distinct rank-RANK adapters on every
# projection (q, k, v, o, gate, up, down), THREADS threads, under /tmp/orchard-cpu-bench.lock. Prints the
# tokens/s of each and its ratio to no adapters (measured in the same process). The goal (issue 36):
# 0.8x or more with 8 distinct adapters.
#
#   scripts/bench-lora.sh MODEL [BUILD_DIR]   (MODEL: a GGUF file or Hugging Face folder)
#   Environment: THREADS (2), BATCH (32), RANK (16), STEPS (8), REPS (2).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:?usage: scripts/bench-lora.sh MODEL [BUILD_DIR]}"
BUILD="${2:-$ROOT/build}"
cmake --build "$BUILD" --target orchard_bench_lora -j2 >/dev/null
exec flock /tmp/orchard-cpu-bench.lock "$BUILD/tests/bench/orchard_bench_lora" "$MODEL" --threads "${THREADS:-2}" \
  --batch "${BATCH:-32}" --rank "${RANK:-16}" --steps "${STEPS:-8}" --reps "${REPS:-2}" --adapters 1,8,32

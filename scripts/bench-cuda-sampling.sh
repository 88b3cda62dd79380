#!/usr/bin/env bash
# Sampling on the GPU: `orchard run --device cuda` at batch PARALLEL (default 64; prompt about 128 tokens,
# TOKENS = 128 out), free (greedy, --ignore-eos) and JSON-Schema-constrained (tests/bench/schemas/list.schema.json,
# greedy), each with the rows sampled on the device and with ORCHARD_DEVICE_SAMPLING=0 (the logits copied
# to the host and sampled there), in one run of the script so the four figures share the machine. JSON
# lines to standard output. ORDER="0 1" runs the host-sampled one first.
#
#   ORCHARD=build/pie/orchard MODEL=llama8b-f16.gguf scripts/bench-cuda-sampling.sh
#
# MODEL: scripts/bench-cuda-engine.sh writes the Llama-3.1-8B-shaped model (128,256-token vocabulary).
set -euo pipefail
orchard=${ORCHARD:-build/pie/orchard}
model=${MODEL:?set MODEL to a GGUF file}
work=${WORK:-/tmp/orchard-bench-sampling}
mkdir -p "$work"
cp "$(cd "$(dirname "$0")/.." && pwd)/tests/bench/schemas/list.schema.json" "$work/list.schema.json"
# The prompt encodes to about 128 tokens with the 8B-shaped model's placeholder vocabulary (byte by byte).
prompt="The quick brown fox jumps over the lazy dog and keeps running through the forest until night falls"
for mode in free schema; do
  args=(--ignore-eos)
  [[ $mode == schema ]] && args=(--schema "$work/list.schema.json" --json-layout compact)
  for device_sampling in ${ORDER:-1 0}; do
    ORCHARD_DEVICE_SAMPLING=$device_sampling "$orchard" run --device cuda -m "$model" -p "$prompt" \
      -n "${TOKENS:-128}" --temp 0 --parallel "${PARALLEL:-64}" "${args[@]}" --json-stats \
      2>"$work/stats.json" >/dev/null || { cat "$work/stats.json" >&2; continue; }
    echo "{\"measure\": \"orchard_sampling\", \"mode\": \"$mode\", \"device_sampling\": $device_sampling," \
      "\"parallel\": ${PARALLEL:-64}, \"stats\": $(grep '^{' "$work/stats.json" | tail -1)}"
  done
done

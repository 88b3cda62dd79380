#!/usr/bin/env bash
# The engine on the GPU: decode speed of `orchard run --device cuda` on a Llama-3.1-8B-shaped F16 model
# with random weights (written by the llama.cpp peer's gen_llama8b_gguf.py, the model its README's figures
# were measured on), at batch 1 and with --parallel N sequences, beside the card's measured copy bandwidth
# (the bound of a batch-1 step that reads every weight once), and prompt processing (the peer's pp512:
# PP_PARALLEL prompts of about 128 tokens and one output token each, so that the engine's steps hold 512
# prompt tokens; PP_PARALLEL=0 skips it). TYPES (default "f16 q8_0 q4_0"): the F16 file and its
# `orchard convert` to each other type. EXTRA_FLAGS go to every `orchard run` (e.g. --batch-invariant).
# JSON lines to standard output.
#
#   ORCHARD=build/pie/orchard PEER=../shared/peers/llama.cpp GGUF_PY=path/to/gguf-py scripts/bench-cuda-engine.sh
#
# PEER holds gen_llama8b_gguf.py; GGUF_PY the gguf-py folder of the peer's source (llama.cpp-src.tar.xz).
# MODEL=path skips writing the model. Needs python3 with numpy, and about 16 GB of disk.
set -euo pipefail
orchard=${ORCHARD:-build/pie/orchard}
model=${MODEL:-}
work=${WORK:-/tmp/orchard-bench-cuda}
mkdir -p "$work"
if [[ -z "$model" ]]; then
  model="$work/llama8b-f16.gguf"
  [[ -f "$model" ]] || python3 "${PEER:?set PEER}/gen_llama8b_gguf.py" "$model" "${GGUF_PY:?set GGUF_PY}" >&2
fi
# The card's device-to-device copy rate (bytes read + written), through PyTorch where it is installed.
python3 - <<'PY' || true
import json
try:
    import torch
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
    for _ in range(3): y.copy_(x)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); [y.copy_(x) for _ in range(10)]; e.record(); torch.cuda.synchronize()
    print(json.dumps({"measure": "copy_bandwidth", "gpu": torch.cuda.get_device_name(),
                      "bytes_per_s": 2 * x.numel() * 10 / (s.elapsed_time(e) / 1e3)}))
except Exception as err:  # no torch: the bound is left out
    print(json.dumps({"measure": "copy_bandwidth", "error": str(err)}))
PY
declare -A files=([f16]="$model")
for type in ${TYPES:-f16 q8_0 q4_0}; do
  [[ -n "${files[$type]:-}" ]] && continue
  files[$type]="$work/llama8b-$type.gguf"
  [[ -f "${files[$type]}" ]] || "$orchard" convert "$model" -o "${files[$type]}" --type "$type" >&2
done
# The prompt encodes to about 128 tokens (the model's placeholder vocabulary spells it byte by byte).
prompt="The quick brown fox jumps over the lazy dog and keeps running through the forest until night falls"
for type in ${TYPES:-f16 q8_0 q4_0}; do
  bytes=$(stat -L -c %s "${files[$type]}")
  for parallel in ${PARALLEL:-1 8 64}; do
    "$orchard" run --device cuda -m "${files[$type]}" -p "$prompt" -n "${TOKENS:-128}" --temp 0 --ignore-eos \
      --parallel "$parallel" ${EXTRA_FLAGS:-} --json-stats 2>"$work/stats.json" >/dev/null || { cat "$work/stats.json" >&2; continue; }
    echo "{\"measure\": \"orchard_decode\", \"type\": \"$type\", \"file_bytes\": $bytes, \"parallel\": $parallel," \
      "\"stats\": $(grep '^{' "$work/stats.json" | tail -1)}"
  done
done
# Prompt processing: prompt tokens over the run's seconds (submission to the last token: every step but
# the last holds 512 prompt tokens) and over the engine's forward seconds.
for type in ${TYPES:-f16 q8_0 q4_0}; do
  [[ "${PP_PARALLEL:-16}" == 0 ]] && break
  "$orchard" run --device cuda -m "${files[$type]}" -p "$prompt" -n 1 --temp 0 --ignore-eos \
    --parallel "${PP_PARALLEL:-16}" ${EXTRA_FLAGS:-} --json-stats 2>"$work/stats.json" >/dev/null || { cat "$work/stats.json" >&2; continue; }
  echo "{\"measure\": \"orchard_prefill\", \"type\": \"$type\", \"parallel\": ${PP_PARALLEL:-16}," \
    "\"stats\": $(grep '^{' "$work/stats.json" | tail -1)}"
done

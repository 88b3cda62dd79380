#!/usr/bin/env bash
# The ceiling of speculative decoding's mechanism (issue 37; tests/bench/spec_oracle_bench.cpp): MODEL's
# greedy output is recorded once, then replayed by an oracle drafter whose drafted tokens are each wrong
# with probability 1 - a, for every acceptance rate a and draft length K; each run's decode tokens/s is
# printed beside the same engine's run without speculation just before it, and their ratio, as a Markdown
# table (then JSON lines). Greedy outputs must equal the recording (else exit 1). Batch 1. Needs nothing
# but the binary: no network, no shared data, no Python.
#
#   scripts/bench-spec-oracle.sh cpu|cuda MODEL [BUILD_DIR]
#   Environment: ACCEPTANCE (0.2,0.4,0.6,0.8,1.0), KS (1,2,3,4,5,6,7,8), TOKENS (128), REPS (1),
#   THREADS (2 on cpu; all cores when empty), PROMPT, ORCHARD_BENCH_SPEC_ORACLE (a prebuilt binary:
#   nothing is built then). On cpu the runs hold /tmp/orchard-cpu-bench.lock.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEVICE="${1:?usage: scripts/bench-spec-oracle.sh cpu|cuda MODEL [BUILD_DIR]}"
MODEL="${2:?usage: scripts/bench-spec-oracle.sh cpu|cuda MODEL [BUILD_DIR]}"
BUILD="${3:-$ROOT/build}"
case "$DEVICE" in cpu|cuda) ;; *) echo "bench-spec-oracle: the device is cpu or cuda, got '$DEVICE'" >&2; exit 2 ;; esac
BIN="${ORCHARD_BENCH_SPEC_ORACLE:-}"
if [ -z "$BIN" ]; then
  cmake --build "$BUILD" --target orchard_bench_spec_oracle -j2 >/dev/null
  BIN="$BUILD/tests/bench/orchard_bench_spec_oracle"
fi
args=("$MODEL" --device "$DEVICE" --tokens "${TOKENS:-128}" --reps "${REPS:-1}"
      --acceptance "${ACCEPTANCE:-0.2,0.4,0.6,0.8,1.0}" --k "${KS:-1,2,3,4,5,6,7,8}")
[ -n "${PROMPT:-}" ] && args+=(--prompt "$PROMPT")
if [ "$DEVICE" = cpu ]; then
  THREADS="${THREADS-2}"
  [ -n "$THREADS" ] && args+=(--threads "$THREADS")
  exec flock /tmp/orchard-cpu-bench.lock "$BIN" "${args[@]}"
fi
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")
exec "$BIN" "${args[@]}"

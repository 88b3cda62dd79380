#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz and runs each for SECONDS.
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]      (default 60 seconds, every target: gguf tokenizer_json
#        tokenizer_gguf gbnf lark regex json_schema chat_template http_request)
# Seeds are cut from the shared data (scripts/fuzz_seeds.py) into build-fuzz/seeds; the growing corpus is
# kept in build-fuzz/corpus/TARGET; a crash leaves its input in build-fuzz/artifacts/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf tokenizer_json tokenizer_gguf gbnf lark regex json_schema chat_template http_request)
build=${ORCHARD_FUZZ_BUILD_DIR:-build-fuzz}
data=${ORCHARD_SHARED_DATA:-$(pwd)/../shared/data}
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DORCHARD_BUILD_FUZZERS=ON -DORCHARD_BUILD_TESTS=OFF \
  -DORCHARD_BUILD_BENCHMARKS=OFF >/dev/null
for t in "${targets[@]}"; do
  cmake --build "$build" --target "${t}_fuzz" -j"${ORCHARD_JOBS:-2}"
done

if [ -d "$data" ]; then
  "$python" scripts/fuzz_seeds.py "$data" "$build/seeds"
else
  echo "fuzz.sh: shared data absent at $data; running without seeds" >&2
fi

# AddressSanitizer keeps each allocation's stack trace in a depot that is never freed, and the deep inputs
# (schemas nested hundreds of levels, recursive compiles) give every allocation a new, deep stack: with the
# defaults RSS climbed past 2 GB in minutes with 42 MB live (json_schema). Eight frames and a smaller
# quarantine keep RSS near the live heap (73-120 MB) and still name where a bad access was allocated.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=8:quarantine_size_mb=16:thread_local_quarantine_size_kb=256}
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts" "$build/seeds/$t"
  echo "== ${t}_fuzz for ${seconds}s"
  if ! "$build/tests/fuzz/${t}_fuzz" "$build/corpus/$t" "$build/seeds/$t" -max_total_time="$seconds" \
      -max_len=65536 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/${t}-"; then
    echo "fuzz.sh: ${t}_fuzz found a failure; input saved under $build/artifacts/" >&2
    status=1
  fi
done
exit $status

#!/usr/bin/env bash
# The CUDA benchmark: the kernel lab (--check), then limits and kernels (orchard_bench_cuda), then the
# PyTorch SDPA peer; writes JSON lines (one object per measurement, peer_value merged in) to
# $BENCH_OUT/bench_cuda.jsonl (default: build-cuda-bench/) and prints them.
#
#   scripts/bench-cuda.sh                    # build with CMake (ORCHARD_CUDA) and run
#   ORCHARD_BENCH_CUDA_BIN=path scripts/bench-cuda.sh   # run a prebuilt orchard_bench_cuda
#   ORCHARD_BENCH_CUDA_DIRECT=1 FMT_INCLUDE=dir scripts/bench-cuda.sh  # build with one c++ command line
#     (machines without the project's other dependencies: needs only the CUDA toolkit and fmt's headers)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-build-cuda-bench}
mkdir -p "$out"
cuda=${CUDA_HOME:-/usr/local/cuda}
bin=${ORCHARD_BENCH_CUDA_BIN:-}

if [[ -z "$bin" && -n "${ORCHARD_BENCH_CUDA_DIRECT:-}" ]]; then
  gen="$out/gen"
  mkdir -p "$gen"
  cmake -DOUTPUT="$gen/pal_cuda_sources.cpp" -DNAMESPACE=pal::cuda \
    "-DSOURCES=$(ls pal/src/cuda/*.cu pal/src/cuda/*.cuh | tr '\n' '|' | sed 's/|$//')" -P tools/embed_sources.cmake
  cmake -DOUTPUT="$gen/kernels_cuda_sources.cpp" -DNAMESPACE=kernels::cuda \
    "-DSOURCES=kernels/src/cuda/bitmask.cu" -P tools/embed_sources.cmake
  bin="$out/orchard_bench_cuda"
  ${CXX:-c++} -std=c++20 -O2 -DORCHARD_HAVE_CUDA=1 -DFMT_HEADER_ONLY ${FMT_INCLUDE:+-isystem "$FMT_INCLUDE"} \
    -Itensor/include -Itensor/src -Ipal/include -Ipal/src -Ikernels/include -Itests/cuda -isystem "$cuda/include" \
    tensor/src/cuda/*.cpp tensor/src/dtype.cpp pal/src/validate.cpp pal/src/attention_ref.cpp pal/src/rope_ref.cpp \
    pal/src/cuda/*.cpp kernels/src/cuda/*.cpp "$gen"/*.cpp tests/cuda/cuda_lab.cpp tests/bench/cuda/bench_cuda.cpp \
    -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnvrtc -lcublas -ldl -lpthread -o "$bin"
elif [[ -z "$bin" ]]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DORCHARD_CUDA=ON >/dev/null
  cmake --build build-cuda --target orchard_bench_cuda -j"$(nproc)"
  bin=build-cuda/tests/cuda/orchard_bench_cuda
fi

set +e
"$bin" --check "$@" | tee "$out/ours.jsonl"
status=${PIPESTATUS[0]}
set -e
python3 tests/bench/cuda/sdpa_peer.py | tee "$out/peer.jsonl" || echo '{"peer_error": "sdpa_peer.py failed"}' >>"$out/peer.jsonl"
python3 tests/bench/cuda/merge_peer.py "$out/ours.jsonl" "$out/peer.jsonl" >"$out/bench_cuda.jsonl"
echo "--- merged: $out/bench_cuda.jsonl"
grep -v '"check"' "$out/bench_cuda.jsonl"
exit "$status"

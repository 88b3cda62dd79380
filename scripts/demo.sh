#!/usr/bin/env bash
# The main job on the default material: set-up, build, then JSON-Schema-constrained generation. It runs
# `orchard run` with the embedded default model (a small Llama with RANDOM weights, built into the binary,
# so no model file is needed) constrained by examples/person.schema.json: whatever the model would say,
# every output is JSON that validates (checked here with Python jsonschema from .venv). Then, as before,
# the grammar engine on the Llama 3.1 vocabulary (128,256 tokens): compile statistics, the tokens allowed
# after a partial output, a valid and an invalid output checked token by token, and tokenization.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target orchard -j"$(nproc)" >/dev/null
orchard=build/pie/orchard
data=${ORCHARD_SHARED_DATA:-../shared/data}
tok=$data/tokenizers/llama3
schema=examples/person.schema.json

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

step "constrained generation with the embedded default model (random weights: the words are noise, the JSON is valid)" \
  $orchard run --schema $schema -p 'A person as JSON:' --seed 4 --temp 1 --top-k 0 --top-p 1 --json-layout compact
$orchard run --schema $schema -p 'A person as JSON:' --seed 4 --temp 1 --top-k 0 --top-p 1 --json-layout compact \
  2>/dev/null >build/demo-generated.json
if [ -x .venv/bin/python ]; then
  step "the output validates with Python jsonschema" .venv/bin/python -c \
    'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1]))); print("valid")' \
    $schema build/demo-generated.json
fi
step "the same engine on a regex: a phone number, always" \
  $orchard run --regex '[0-9]{3}-[0-9]{4}' -p 'Call me at' --seed 7
stories=$data/models/stories260K/stories260K.bin
if [ -f "$stories" ]; then
  step "a real model (stories260K, llama2.c format), greedy" $orchard run -m "$stories" --temp 0 -n 60
fi

if [ ! -d "$tok" ]; then
  echo "demo: the Llama 3 tokenizer is not at $tok (set ORCHARD_SHARED_DATA): the grammar-engine steps are skipped" >&2
  exit 0
fi
step "compile a JSON Schema against the Llama 3.1 vocabulary" \
  $orchard grammar compile -t "$tok" --schema $schema
step "the tokens allowed after a partial output (age is 0..130: after \"13\" only 0 or the end)" \
  $orchard grammar mask -t "$tok" --schema $schema --prefix '{"name": "Ada", "age": 13' -n 10
printf '\n'
echo '{"name": "Ada", "age": 36, "tags": ["dev", "ops"]}' > build/demo-valid.json
echo '{"name": "Ada", "age": 136}' > build/demo-invalid.json
step "a valid output passes token by token" \
  $orchard grammar check -t "$tok" --schema $schema build/demo-valid.json
set +e
step "an invalid output is stopped at the first token that leaves the schema" \
  $orchard grammar check -t "$tok" --schema $schema build/demo-invalid.json
set -e
step "tokenize a text (token ids) and detokenize them back" \
  $orchard tokenize -t "$tok" <<< 'Structured output, always.'
$orchard tokenize -t "$tok" <<< 'Structured output, always.' | $orchard detokenize -t "$tok"

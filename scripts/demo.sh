#!/usr/bin/env bash
# The main job on the default material: set-up, build, then JSON-Schema-constrained decoding as far as it
# exists today. The engine that generates text (issue "pie: the engine on CPU") is not built yet, so this
# runs the grammar engine that constrains every decoding step: it compiles examples/person.schema.json
# against the Llama 3.1 vocabulary (128,256 tokens), shows the tokens allowed after a partial output, checks
# a valid and an invalid output token by token, and tokenizes and detokenizes a text.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target orchard -j"$(nproc)" >/dev/null
orchard=build/pie/orchard
data=${ORCHARD_SHARED_DATA:-../shared/data}
tok=$data/tokenizers/llama3
if [ ! -d "$tok" ]; then
  echo "demo: the Llama 3 tokenizer is not at $tok (set ORCHARD_SHARED_DATA)" >&2
  exit 2
fi
schema=examples/person.schema.json

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

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

#!/usr/bin/env bash
# The main job on the default model: set-up (which fetches SmolLM2-135M-Instruct into the model store),
# build, then structured generation with it. First a JSON record extracted from a paragraph of text,
# constrained by examples/contact.schema.json and validated here with Python jsonschema; then a question
# answered through a tool call, its arguments constrained by the tool's parameter schema. Then the grammar
# engine on the Llama 3.1 vocabulary (128,256 tokens): compile statistics, the tokens allowed after a
# partial output, a valid and an invalid output checked token by token, and tokenization.
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

printf '\n\033[1m== the text to extract from (examples/contact.txt)\033[0m\n'
cat examples/contact.txt
step "extract a contact record as JSON with the default model (SmolLM2-135M-Instruct), greedy" \
  $orchard run --chat --schema examples/contact.schema.json -f examples/contact.txt --temp 0
$orchard run --chat --schema examples/contact.schema.json -f examples/contact.txt --temp 0 \
  2>/dev/null >build/demo-contact.json
step "the record validates with Python jsonschema" .venv/bin/python -c \
  'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])),
format_checker=jsonschema.FormatChecker()); print("valid")' examples/contact.schema.json build/demo-contact.json
step "answer a question through a tool call (examples/tools.json: get_weather, get_time)" \
  $orchard run --chat --tools examples/tools.json --tool-choice required --one-call --temp 0 \
  -p 'What is the weather like in Paris today?'

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

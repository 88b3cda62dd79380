#!/usr/bin/env bash
# One case of the `orchard run` command-line tests (run by CTest).
# usage: run_test.sh CASE   with ORCHARD (the built binary), ORCHARD_SOURCE_DIR and ORCHARD_SHARED_DATA
# (else ORCHARD_DEFAULT_SHARED_DATA) in the environment.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (shared data or .venv absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
src=${ORCHARD_SOURCE_DIR:?set ORCHARD_SOURCE_DIR}
stories=$data/models/stories260K
# The reference text is the output without the newline orchard run ends with.
expect_stories_text() {
  head -c -1 "$tmp/out" >"$tmp/text"
  cmp -s "$tmp/text" "$stories/expected-greedy-200.txt" ||
    fail "output differs from expected-greedy-200.txt: $(cmp "$tmp/text" "$stories/expected-greedy-200.txt")"
}

case $case_name in
  run_help)
    run run --help; expect_rc 0
    grep -q "usage: orchard run" "$tmp/out" || fail "no usage line"
    grep -q -- "--schema" "$tmp/out" || fail "--schema undocumented"
    grep -q -- "--batch-invariant" "$tmp/out" || fail "--batch-invariant undocumented"
    grep -q -- "--kv-type" "$tmp/out" || fail "--kv-type undocumented"
    grep -q "RANDOM weights" "$tmp/out" || fail "the default model's random weights are not said" ;;
  run_unknown_option)
    run run --frobnicate; expect_rc 2; expect_err_line "unknown option '--frobnicate'" ;;
  serve_bad_grammar_tables)  # rejected before the model loads
    run serve --grammar-tables sometimes; expect_rc 2
    expect_err_line "--grammar-tables: expected compile, background or first-use, got 'sometimes'" ;;
  serve_kv_too_small)  # a pool that cannot hold one context: said at start, before listening
    run serve -m orchard-random --kv-cache-mb 0; expect_rc 2; expect_err_line "--kv-cache-mb"
    run serve -m orchard-random --kv-cache-mb 1 --ctx 1000000 --port 0; expect_rc 2
    expect_err_line "one context of 1000000 tokens needs" ;;
  run_kv_type)  # a bad type refused by name before the model loads; f16 and f32 both run on the CPU
    run run -m orchard-random -p hi --kv-type q8_0; expect_rc 2; expect_err_line "--kv-type: expected f32 or f16, got 'q8_0'"
    for t in f16 f32; do
      run run -m orchard-random -p 'Once upon a time' -n 4 --seed 3 --ignore-eos --device cpu --kv-type $t; expect_rc 0
      [[ "$err" == *"4 tokens"* ]] || fail "--kv-type $t: $err"
    done ;;
  run_two_grammars)
    run run --regex 'a' --gbnf x.gbnf; expect_rc 2; expect_err_line "grammar" ;;
  run_layout_without_schema)
    run run --json-layout compact; expect_rc 2; expect_err_line "--schema" ;;
  run_bad_number)
    run run -n 0; expect_rc 2; expect_err_line "-n" ;;
  run_empty_prompt)
    run run -m orchard-random --no-bos; expect_rc 2; expect_err_line "prompt" ;;
  run_missing_model)
    run run -m "$tmp/no-such-model.gguf" -p hi; expect_rc 2; expect_err_line "no-such-model" ;;
  run_bad_schema)
    printf '{"type": "object", "minProperties": "two"}' >"$tmp/bad.json"
    run run -m orchard-random --schema "$tmp/bad.json" -p hi; expect_rc 2; expect_err_line "minProperties" ;;
  run_bad_request)
    run run -m orchard-random -p hi --temp -1; expect_rc 2; expect_err_line "temperature" ;;
  run_default_unconstrained)
    run run -m orchard-random -p 'Once upon a time' -n 20 --seed 3 --ignore-eos; expect_rc 0
    [[ "$err" == *"20 tokens"* && "$err" == *"tokens/s"* && "$err" == *"orchard-random"* ]] ||
      fail "summary line: $err"
    cp "$tmp/out" "$tmp/first"
    run run -m orchard-random -p 'Once upon a time' -n 20 --seed 3 --ignore-eos; expect_rc 0
    cmp -s "$tmp/out" "$tmp/first" || fail "the same seed gave different text" ;;
  run_default_regex)
    for seed in 1 2 3 4; do
      run run -m orchard-random --regex '[0-9]{3}-[0-9]{4}' -p 'Phone:' --seed $seed; expect_rc 0
      grep -qxE '[0-9]{3}-[0-9]{4}' "$tmp/out" || fail "seed $seed: '$(cat "$tmp/out")' does not match"
    done ;;
  run_default_schema)
    py=$src/.venv/bin/python
    need "$py"
    for seed in 1 2 3 4 5; do
      run run -m orchard-random --schema "$src/examples/person.schema.json" -p 'A person as JSON:' --seed $seed \
        --temp 1 --top-k 0 --top-p 1 -n 2000; expect_rc 0
      [[ "$err" == *"finish stop"* ]] || fail "seed $seed: not finished by the grammar: $err"
      "$py" -c 'import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.validate(json.loads(open(sys.argv[2], encoding="utf-8").read()), schema,
                    format_checker=jsonschema.FormatChecker())' "$src/examples/person.schema.json" "$tmp/out" ||
        fail "seed $seed: output does not validate: $(cat "$tmp/out")"
    done ;;
  run_stories_greedy)
    need "$stories/stories260K.bin"
    run run -m "$stories/stories260K.bin" --temp 0 -n 200; expect_rc 0
    expect_stories_text ;;
  run_spec_bad)
    run run -m orchard-random -p hi --spec eagle; expect_rc 2; expect_err_line "--spec: expected ngram, draft=MODEL or off"
    run run -m orchard-random -p hi --spec draft=; expect_rc 2; expect_err_line "--spec draft=MODEL: the MODEL is missing"
    run run -m orchard-random -p hi --spec "draft=$tmp/none.gguf"; expect_rc 2
    run run -m orchard-random -p hi --spec-k 4; expect_rc 2; expect_err_line "--spec-k needs --spec ngram"
    run run -m orchard-random -p hi --spec ngram --spec-k 17; expect_rc 2; expect_err_line "--spec-k" ;;
  run_spec_stories)  # speculative decoding changes nothing in the greedy text, and says what it kept
    need "$stories/stories260K.bin"
    run run -m "$stories/stories260K.bin" --temp 0 -n 200 --spec ngram; expect_rc 0
    expect_stories_text
    [[ "$err" == *"drafts kept"* ]] || fail "summary does not report drafts: $err" ;;
  run_spec_draft)  # a draft model (here the model itself) changes nothing in the greedy text
    need "$stories/stories260K.bin"
    run run -m "$stories/stories260K.bin" --temp 0 -n 200 --spec "draft=$stories/stories260K.bin" --spec-k 4
    expect_rc 0
    expect_stories_text
    [[ "$err" == *"drafts kept"* ]] || fail "summary does not report drafts: $err"
    run run -m orchard-random -p hi --spec "draft=$stories/stories260K.bin"; expect_rc 2
    expect_err_line "the vocabularies differ" ;;
  run_sampling_flags)  # each sampling option (sampling_flags.cpp) reaches the request, in run and chat
    for flag in "--min-p 2:min_p" "--repeat-penalty 0:repetition_penalty" "--presence-penalty 3:presence_penalty" \
                "--frequency-penalty -3:frequency_penalty" "--top-p 0:top_p" "--temp -1:temperature"; do
      run run -m orchard-random -p hi ${flag%%:*}; expect_rc 2; expect_err_line "${flag##*:}"
    done
    run run -m orchard-random -p hi --min-p x; expect_rc 2; expect_err_line "--min-p: expected a number"
    run run -m orchard-random -p hi --seed -1; expect_rc 2; expect_err_line "--seed"
    run run -m orchard-random -p 'Once upon' --temp 0 -n 30 --ignore-eos; expect_rc 0
    cp "$tmp/out" "$tmp/plain"
    for flag in "--repeat-penalty 1.5" "--presence-penalty 2" "--frequency-penalty 2"; do
      run run -m orchard-random -p 'Once upon' --temp 0 -n 30 --ignore-eos $flag; expect_rc 0
      cmp -s "$tmp/out" "$tmp/plain" && fail "$flag changed nothing"
    done
    run run -m orchard-random -p 'Once upon' --temp 1 --top-k 0 --top-p 1 --seed 4 -n 30 --ignore-eos; expect_rc 0
    cp "$tmp/out" "$tmp/plain"
    run run -m orchard-random -p 'Once upon' --temp 1 --top-k 0 --top-p 1 --seed 4 -n 30 --ignore-eos --min-p 0.5
    expect_rc 0
    cmp -s "$tmp/out" "$tmp/plain" && fail "--min-p changed nothing"
    printf 'hi\n' >"$tmp/message"
    "$ORCHARD" chat -m orchard-random --min-p 2 -n 4 <"$tmp/message" >"$tmp/out" 2>"$tmp/err"; rc=$?
    err=$(cat "$tmp/err")
    expect_rc 2; expect_err_line "min_p" ;;
  run_stories_converted)
    need "$stories/stories260K.bin"
    "$ORCHARD" convert "$stories/stories260K.bin" -o "$tmp/stories.gguf" --type f32 >/dev/null 2>"$tmp/err" ||
      fail "orchard convert failed: $(cat "$tmp/err")"
    run run -m "$tmp/stories.gguf" --temp 0 -n 200; expect_rc 0
    expect_stories_text ;;
  *)
    fail "unknown case" ;;
esac
exit 0

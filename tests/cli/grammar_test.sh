#!/usr/bin/env bash
# One case of the `orchard grammar compile|check|mask|bench` command-line tests (run by CTest): the exit statuses
# of the interface (0 accepted, 1 rejected with the token and byte, 2 bad grammar or arguments) and the
# JSON Schema keyword modes.
# usage: grammar_test.sh CASE   with ORCHARD (the built binary) in the environment, and ORCHARD_SHARED_DATA
# (else ORCHARD_DEFAULT_SHARED_DATA) naming the shared data folder.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (shared data absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
llama3=$data/tokenizers/llama3
expect_in() {  # $1 file, $2 text
  grep -qF -- "$2" "$1" || fail "'$2' not in $(basename "$1"): $(cat "$1") $(cat "$tmp/err")"
}

printf '%s' '{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":12}},"required":["n"],"additionalProperties":false}' >"$tmp/month.json"
printf '%s' 'root ::= "a" [0-9]+' >"$tmp/a.gbnf"

case $case_name in
  grammar_check_accepts)
    need "$llama3/encoder.json"
    printf '{"n": 12}' >"$tmp/in"
    run grammar check -t "$llama3" --schema "$tmp/month.json" "$tmp/in"; expect_rc 0
    printf 'a123' >"$tmp/in"
    run grammar check -t "$llama3" --gbnf "$tmp/a.gbnf" "$tmp/in"; expect_rc 0 ;;
  grammar_check_rejects)
    need "$llama3/encoder.json"
    printf '{"n": 13}' >"$tmp/in"
    run grammar check -t "$llama3" --schema "$tmp/month.json" "$tmp/in"; expect_rc 1
    expect_in "$tmp/out" "rejected: token"; expect_in "$tmp/out" "at byte"
    # A prefix that is fine but not complete: rejected at the end.
    printf '{"n": 1' >"$tmp/in"
    run grammar check -t "$llama3" --schema "$tmp/month.json" "$tmp/in"; expect_rc 1 ;;
  grammar_check_bad_grammar)
    need "$llama3/encoder.json"
    printf 'root ::= "a" (' >"$tmp/bad.gbnf"; printf 'a' >"$tmp/in"
    run grammar check -t "$llama3" --gbnf "$tmp/bad.gbnf" "$tmp/in"; expect_rc 2
    [[ "$err" == *"line 1"* && "$err" == *"column"* ]] || fail "no line/column in '$err'"
    run grammar check -t "$llama3" --regex 'a(?=b)' "$tmp/in"; expect_rc 2 ;;
  grammar_check_bad_arguments)
    run grammar check --regex a; expect_rc 2
    run grammar check -t "$llama3" --regex a --gbnf "$tmp/a.gbnf"; expect_rc 2
    run grammar frobnicate; expect_rc 2
    run grammar bench -t x --regex a --docs d --tables eagerly; expect_rc 2
    [[ "$err" == *"--tables: expected compile, background or first-use, got 'eagerly'"* ]] || fail "bench: '$err'"
    run grammar bench -t x --regex a --docs d --prefill-ms soon; expect_rc 2
    [[ "$err" == *"--prefill-ms"* ]] || fail "bench --prefill-ms: '$err'"
    run grammar bench -t x --regex a --docs d --prefill-ms 70000; expect_rc 2
    [[ "$err" == *"--prefill-ms: expected milliseconds from 0 to 60000, got '70000'"* ]] || fail "bench: '$err'" ;;
  grammar_compile_stats)
    need "$llama3/encoder.json"
    run grammar compile -t "$llama3" --schema "$tmp/month.json"; expect_rc 0
    expect_in "$tmp/out" "token tables"; expect_in "$tmp/out" "vocabulary         128256 tokens" ;;
  grammar_mask_lists_tokens)
    need "$llama3/encoder.json"
    run grammar mask -t "$llama3" --schema "$tmp/month.json" --prefix '{"n": 1' --limit 5; expect_rc 0
    # After "1": "0".."2" (10..12) or the end of the object; never "3".
    expect_in "$tmp/out" '"0"'; grep -q '"3"' "$tmp/out" && fail "3 allowed after 1: $(cat "$tmp/out")"
    run grammar mask -t "$llama3" --schema "$tmp/month.json" --prefix '{"m"'; expect_rc 1 ;;
  grammar_schema_keywords)
    # Keywords of no JSON Schema draft are annotations by default; --strict-keywords makes them errors.
    printf '%s' '{"type":"string","faker":"name"}' >"$tmp/faker.json"
    run grammar compile --schema "$tmp/faker.json"; expect_rc 0
    run grammar compile --schema "$tmp/faker.json" --strict-keywords; expect_rc 2
    [[ "$err" == *faker* ]] || fail "the error does not name the keyword: '$err'"
    printf '%s' '{"type":"string","maxlength":3}' >"$tmp/typo.json"
    run grammar compile --schema "$tmp/typo.json"; expect_rc 2
    [[ "$err" == *maxLength* ]] || fail "no suggestion in '$err'"
    run grammar compile --regex a --strict-keywords; expect_rc 2 ;;
  grammar_schema_any_order)
    # Members out of the schema's order: rejected by default, accepted with --any-order (duplicates never).
    need "$llama3/encoder.json"
    printf '%s' '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"]}' >"$tmp/ab.json"
    printf '{"b": "x", "a": 1}' >"$tmp/in"
    run grammar check -t "$llama3" --schema "$tmp/ab.json" "$tmp/in"; expect_rc 1
    run grammar check -t "$llama3" --schema "$tmp/ab.json" --any-order "$tmp/in"; expect_rc 0
    printf '{"b": "x", "a": 1, "b": "y"}' >"$tmp/in"
    run grammar check -t "$llama3" --schema "$tmp/ab.json" --any-order "$tmp/in"; expect_rc 1
    run grammar compile --regex a --any-order; expect_rc 2 ;;
  grammar_special_tokens)
    # Whole tokens in a grammar (<[id]>, <name>): the input's special-token text is that token with --special.
    need "$llama3/encoder.json"
    printf '%s\n' 'root ::= <[128010]> "{" [a-z]* "}" <|eom_id|>' >"$tmp/call.gbnf"
    printf '<|python_tag|>{abc}<|eom_id|>' >"$tmp/in"
    run grammar check -t "$llama3" --gbnf "$tmp/call.gbnf" --special "$tmp/in"; expect_rc 0
    run grammar check -t "$llama3" --gbnf "$tmp/call.gbnf" "$tmp/in"; expect_rc 1  # "<|python_tag|>" as text
    printf '<|python_tag|>{abc}<|eot_id|>' >"$tmp/in"
    run grammar check -t "$llama3" --gbnf "$tmp/call.gbnf" --special "$tmp/in"; expect_rc 1
    expect_in "$tmp/out" 'rejected: token 4 of 5 (id 128009, special "<|eot_id|>") at byte 19'
    run grammar mask -t "$llama3" --gbnf "$tmp/call.gbnf" --special --prefix '<|python_tag|>{ab}'; expect_rc 0
    expect_in "$tmp/out" '1 tokens allowed'; expect_in "$tmp/out" '128008 "<|eom_id|>"'
    printf '%s\n' 'root ::= <|nope|>' >"$tmp/bad.gbnf"
    run grammar compile -t "$llama3" --gbnf "$tmp/bad.gbnf"; expect_rc 2
    [[ "$err" == *"token <|nope|>: no token of the vocabulary has exactly these bytes"* ]] || fail "'$err'"
    printf '%s\n' 'root ::= <[128256]>' >"$tmp/bad.gbnf"
    run grammar compile -t "$llama3" --gbnf "$tmp/bad.gbnf"; expect_rc 2
    [[ "$err" == *"id 128256 is outside the vocabulary's 128256 tokens"* ]] || fail "'$err'" ;;
  *) echo "unknown case $case_name" >&2; exit 1 ;;
esac
exit 0

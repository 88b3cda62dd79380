#!/usr/bin/env bash
# One case of the `orchard tokenize` / `orchard detokenize` command-line tests (run by CTest).
# usage: cli_test.sh CASE   with ORCHARD (the built binary) in the environment, and ORCHARD_SHARED_DATA
# (else ORCHARD_DEFAULT_SHARED_DATA) naming the shared data folder.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (shared data absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
spm=$data/tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf
hf_llama2=$data/tokenizers/hf/llama2.tokenizer.json
llama3=$data/tokenizers/llama3
# run ARGS...: runs orchard with stdin from $tmp/in (when present); sets rc, out ($tmp/out), err.
run() {
  if [ -e "$tmp/in" ]; then "$ORCHARD" "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"; else
    "$ORCHARD" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"; fi
  rc=$?
  err=$(cat "$tmp/err")
}
expect_out() {
  local got; got=$(cat "$tmp/out")
  [ "$got" == "$1" ] || fail "stdout '$got', expected '$1'"
}

case $case_name in
  tokenize_help)
    run tokenize --help; expect_rc 0
    grep -q "usage: orchard tokenize -t TOKENIZER" "$tmp/out" || fail "no usage line"
    grep -q -- "--special" "$tmp/out" || fail "--special undocumented"
    grep -q "Exit status" "$tmp/out" || fail "exit status undocumented" ;;
  detokenize_help)
    run detokenize --help; expect_rc 0
    grep -q "usage: orchard detokenize -t TOKENIZER" "$tmp/out" || fail "no usage line"
    grep -q -- "--skip-special" "$tmp/out" || fail "--skip-special undocumented" ;;
  tokenize_needs_tokenizer)
    run tokenize; expect_rc 2; expect_err_line "--tokenizer" ;;
  tokenize_unknown_option)
    run tokenize --frobnicate; expect_rc 2; expect_err_line "unknown option '--frobnicate'" ;;
  tokenize_missing_tokenizer_file)
    printf 'x' >"$tmp/in"
    run tokenize -t "$tmp/no-such-tokenizer.gguf"; expect_rc 2; expect_err_line "no-such-tokenizer.gguf" ;;
  tokenize_missing_input_file)
    need "$spm"
    run tokenize -t "$spm" "$tmp/no-such-input.txt"; expect_rc 2; expect_err_line "no-such-input.txt" ;;
  tokenize_spm)
    need "$spm"
    printf 'Hello world' >"$tmp/in"
    run tokenize -t "$spm"; expect_rc 0; expect_out "15043 3186"
    run tokenize -t "$spm" --bos; expect_rc 0; expect_out "1 15043 3186"
    printf 'Hello world' >"$tmp/text"; rm "$tmp/in"
    run tokenize -t "$spm" "$tmp/text"; expect_rc 0; expect_out "15043 3186" ;;
  tokenize_empty)
    need "$spm"
    : >"$tmp/in"
    run tokenize -t "$spm" -; expect_rc 0; expect_out "" ;;
  tokenize_special)
    need "$llama3"
    printf '<|eot_id|>' >"$tmp/in"
    run tokenize -t "$llama3" --special; expect_rc 0; expect_out "128009"
    run tokenize -t "$llama3"; expect_rc 0
    [ "$(cat "$tmp/out")" != "128009" ] || fail "special text parsed without --special" ;;
  tokenize_invalid_utf8)
    need "$spm"
    printf 'ab\xff\xfecd' >"$tmp/in"
    run tokenize -t "$spm"; expect_rc 2; expect_err_line "UTF-8" ;;
  tokenize_hf_json)
    need "$hf_llama2"
    printf 'Hello world' >"$tmp/in"
    run tokenize -t "$hf_llama2"; expect_rc 0; expect_out "15043 3186" ;;
  detokenize_spm)
    need "$spm"
    printf '1 15043 3186\n' >"$tmp/in"
    run detokenize -t "$spm" --skip-special; expect_rc 0; expect_out "Hello world"
    printf '[15043, 3186]' >"$tmp/in"
    run detokenize -t "$spm"; expect_rc 0; expect_out "Hello world" ;;
  detokenize_bad_ids)
    need "$spm"
    printf '15043 abc' >"$tmp/in"
    run detokenize -t "$spm"; expect_rc 2; expect_err_line "'abc'"
    printf '15043 32000' >"$tmp/in"
    run detokenize -t "$spm"; expect_rc 2; expect_err_line "32000"
    printf -- '-1' >"$tmp/in"
    run detokenize -t "$spm"; expect_rc 2; expect_err_line "-1"
    printf '99999999999999999999999' >"$tmp/in"
    run detokenize -t "$spm"; expect_rc 2; expect_err_line "99999999999999999999999" ;;
  round_trip)
    need "$llama3"
    printf 'Caf\xc3\xa9 \xf0\x9f\x98\x80  tabs\tand\nnewlines <|eot_id|> 12345' >"$tmp/text"
    run tokenize -t "$llama3" "$tmp/text"; expect_rc 0
    cp "$tmp/out" "$tmp/ids"
    run detokenize -t "$llama3" "$tmp/ids"; expect_rc 0
    cmp -s "$tmp/out" "$tmp/text" || fail "detokenize(tokenize(text)) differs from text" ;;
  *) echo "unknown case $case_name" >&2; exit 1 ;;
esac
exit 0

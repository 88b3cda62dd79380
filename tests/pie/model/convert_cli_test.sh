#!/usr/bin/env bash
# One case of the `orchard convert` command-line tests (run by CTest).
# usage: convert_cli_test.sh CASE   with ORCHARD (the built binary) in the environment, and ORCHARD_SHARED_DATA
# (else ORCHARD_DEFAULT_SHARED_DATA) naming the shared data folder.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (shared data absent).
set -u
case_name=$1
source "$(dirname "$0")/../../cli/cli_case.sh"
stories=$data/models/stories260K/stories260K.bin

case $case_name in
  help)
    run convert --help; expect_rc 0
    grep -q "usage: orchard convert INPUT -o OUT.gguf" "$tmp/out" || fail "no usage line"
    grep -q "q4_K" "$tmp/out" || fail "types undocumented"
    run --help; grep -q "convert" "$tmp/out" || fail "convert missing from orchard --help" ;;
  no_output)
    run convert "$tmp/model.bin"; expect_rc 2; expect_err_line "--output" ;;
  bad_type)
    run convert "$tmp/model.bin" -o "$tmp/x.gguf" --type q3_K; expect_rc 2
    expect_err_line "--type: 'q3_K' is not one of f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, nf4"
    [ ! -e "$tmp/x.gguf" ] || fail "wrote a file" ;;
  unknown_option)
    run convert --frobnicate; expect_rc 2; expect_err_line "unknown option '--frobnicate'" ;;
  missing_input)
    run convert "$tmp/no-such-model.bin" -o "$tmp/x.gguf"; expect_rc 2; expect_err_line "no-such-model.bin" ;;
  not_a_model)
    printf 'hello, not a model' >"$tmp/junk.bin"
    run convert "$tmp/junk.bin" -o "$tmp/x.gguf"; expect_rc 2; expect_err_line "junk.bin"
    [ ! -e "$tmp/x.gguf" ] || fail "wrote a file" ;;
  stories_q8_0)
    need "$stories"
    run convert "$stories" -o "$tmp/s.gguf" --type q8_0; expect_rc 0
    grep -q "wrote $tmp/s.gguf: llama, 5 layers, n_embd 64, vocab 512" "$tmp/out" || fail "stdout: $(cat "$tmp/out")"
    grep -q "q8_0: 31" "$tmp/out" || fail "stdout: $(cat "$tmp/out")"
    # ffn_down rows of 172 cannot be q8_0: a note says so; no progress line when stderr is not a terminal.
    [ "$err" == "orchard convert: note: q8_0 cannot hold rows of 172 elements: 5 tensors written as f16 (blk.0.ffn_down.weight, ...)" ] ||
      fail "stderr: '$err'"
    # The written file carries the tokenizer: it tokenizes as the original tokenizer does.
    printf 'Once upon a time' >"$tmp/in"
    "$ORCHARD" tokenize -t "$tmp/s.gguf" --bos "$tmp/in" >"$tmp/a" || fail "tokenize with the GGUF"
    "$ORCHARD" tokenize -t "$data/models/stories260K/tok512.bin" --bos "$tmp/in" >"$tmp/b" || fail "tokenize with tok512"
    cmp -s "$tmp/a" "$tmp/b" || fail "token ids differ: $(cat "$tmp/a") vs $(cat "$tmp/b")" ;;
  stories_f32_reload)
    need "$stories"
    run convert "$stories" -o "$tmp/a.gguf" --type f32; expect_rc 0
    # GGUF -> GGUF with the same type writes the same bytes.
    run convert "$tmp/a.gguf" -o "$tmp/b.gguf" --type f32; expect_rc 0
    cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "a second conversion differs"
    mkdir "$tmp/d" && cp "$stories" "$tmp/d/"  # alone: no tokenizer beside it
    run convert "$tmp/d/stories260K.bin" -o "$tmp/c.gguf"; expect_rc 2; expect_err_line "no tokenizer"
    run convert "$tmp/d/stories260K.bin" -o "$tmp/c.gguf" -t "$data/models/stories260K/tok512.bin" --type f32; expect_rc 0
    cmp -s "$tmp/a.gguf" "$tmp/c.gguf" || fail "--tokenizer gives a different file" ;;
  stories_nf4)
    need "$stories"
    run convert "$stories" -o "$tmp/a.gguf" --type nf4; expect_rc 0
    grep -q "nf4: " "$tmp/out" || fail "stdout: $(cat "$tmp/out")"
    [[ "$err" == *"nf4 cannot hold rows of 172 elements"* ]] || fail "stderr: '$err'"
    # nf4 -> nf4 requantizes each block to itself: the same bytes.
    run convert "$tmp/a.gguf" -o "$tmp/b.gguf" --type nf4; expect_rc 0
    cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "a second conversion differs"
    "$ORCHARD" run -m "$tmp/a.gguf" -p 'Once upon a time' -n 8 --temp 0 </dev/null >"$tmp/gen" 2>"$tmp/err" ||
      fail "run: $(cat "$tmp/err")"
    [ -s "$tmp/gen" ] || fail "run printed nothing" ;;
  *) fail "unknown case" ;;
esac
exit 0

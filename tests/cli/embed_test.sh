#!/usr/bin/env bash
# One case of the `orchard embed` command-line tests (run by CTest): one JSON vector per non-empty input
# line, options, and every bad input as one line on stderr with exit status 2.
# usage: embed_test.sh CASE   with ORCHARD (the built binary) in the environment; all-MiniLM-L6-v2 from
# $ORCHARD_HOME/folders (default ~/.cache/orchard). Exit 0 pass, 1 fail, 77 skipped (model absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
model=${ORCHARD_HOME:-$HOME/.cache/orchard}/folders/all-minilm-l6-v2
[ -e "$model/.source" ] || { echo "SKIP [$case_name]: absent: $model (run scripts/fetch-models.sh)" >&2; exit 77; }
run() { run_orchard embed "$@"; }
# Prints "lines dims norm-of-first" of the output.
shape() {
  python3 - "$tmp/out" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(len(rows), len(rows[0]) if rows else 0, round(math.sqrt(sum(x * x for x in rows[0])), 4) if rows else 0)
PY
}

case "$case_name" in
  embed_lines)
    printf 'first line\n\nsecond line\r\nthird' >"$tmp/in.txt"
    run -m "$model" -t 1 "$tmp/in.txt"
    expect_rc 0
    [ "$(shape)" = "3 384 1.0" ] || fail "got $(shape), expected 3 vectors of 384, normalized"
    # The same vectors from standard input, and each line alone gives its own line's vector.
    "$ORCHARD" embed -m "$model" -t 1 - <"$tmp/in.txt" >"$tmp/stdin.out" || fail "stdin run failed"
    cmp -s "$tmp/out" "$tmp/stdin.out" || fail "standard input gave other vectors"
    printf 'second line\n' | "$ORCHARD" embed -m "$model" -t 1 >"$tmp/one.out" || fail "one-line run failed"
    [ "$(sed -n 2p "$tmp/out")" = "$(cat "$tmp/one.out")" ] || fail "a line's vector depends on the others"
    ;;
  embed_options)
    printf 'options\n' >"$tmp/in.txt"
    run -m "$model" --dimensions 8 "$tmp/in.txt"
    expect_rc 0
    [ "$(shape)" = "1 8 1.0" ] || fail "--dimensions 8 gave $(shape)"
    run -m "$model" --pooling cls --no-normalize "$tmp/in.txt"
    expect_rc 0
    set -- $(shape)
    [ "$2" = 384 ] && [ "$3" != "1.0" ] || fail "--pooling cls --no-normalize gave $(shape)"
    ;;
  embed_errors)
    run
    expect_rc 2; expect_err_line "missing option --model"
    run -m "$model" --pooling max
    expect_rc 2; expect_err_line "pooling \"max\" is not one of mean, cls, last"
    run -m "$model" --dimensions 385 /dev/null
    expect_rc 2; expect_err_line "--dimensions 385 is more than the model's 384"
    run -m "$tmp/no-such-model" /dev/null
    expect_rc 2; expect_err_line "no-such-model"
    python3 -c "print('word ' * 300)" >"$tmp/long.txt"
    run -m "$model" "$tmp/long.txt"
    expect_rc 2; expect_err_line "302 tokens, more than the model's 256"
    run -m "$model" --truncate "$tmp/long.txt"
    expect_rc 0
    printf 'ab\xff\n' >"$tmp/bad.txt"
    run -m "$model" "$tmp/bad.txt"
    expect_rc 2; expect_err_line "UTF-8"
    ;;
  *) fail "unknown case" ;;
esac
exit 0

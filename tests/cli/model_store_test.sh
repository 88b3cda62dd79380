#!/usr/bin/env bash
# One case of the model-store command-line tests (run by CTest): the set-up's fetch when it cannot
# finish, and what `orchard run` / `orchard serve` do with the default model missing, truncated, corrupt,
# in a store they cannot write to, and present (SmolLM2-135M-Instruct).
# usage: model_store_test.sh CASE   with ORCHARD (the built binary) and ORCHARD_SOURCE_DIR in the
# environment; the real store is $ORCHARD_HOME/models or ~/.cache/orchard/models.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (the default model absent from the store).
set -u
case_name=$1
: "${ORCHARD:?set ORCHARD to the orchard binary}"
src=${ORCHARD_SOURCE_DIR:?set ORCHARD_SOURCE_DIR}
real_store=${ORCHARD_HOME:-$HOME/.cache/orchard}/models
manifest=$real_store/manifests/smollm2/135m-instruct-q4_1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }
run() {  # run ARGS...: sets rc, out ($tmp/out), err
  "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  err=$(cat "$tmp/err")
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1; stderr: $err"; }
expect_err_line() {  # one line on stderr, containing each argument
  [ "$(printf '%s' "$err" | wc -l)" -eq 0 ] && [ -n "$err" ] || fail "stderr is not one line: '$err'"
  for want in "$@"; do [[ "$err" == *"$want"* ]] || fail "stderr '$err' does not mention '$want'"; done
}
need_default() {
  [ -f "$manifest" ] || { echo "SKIP [$case_name]: the default model is not in $real_store" >&2; exit 77; }
  digest=$(sed -n 's/.*"digest": "sha256:\([0-9a-f]*\)".*/\1/p' "$manifest")
  blob=$real_store/blobs/sha256-$digest
  size=$(stat -c %s "$blob")
}
# fake_store FILE: a store in $tmp/home whose default model's manifest is the real one and whose blob is FILE.
fake_store() {
  mkdir -p "$tmp/home/models/manifests/smollm2" "$tmp/home/models/blobs"
  cp "$manifest" "$tmp/home/models/manifests/smollm2/"
  mv "$1" "$tmp/home/models/blobs/sha256-$digest"
}

case $case_name in
  fetch_interrupted)  # the download fails: nothing half-written is left in the store
    ORCHARD_HOME=$tmp/home PYTHON=false run bash "$src/scripts/fetch-models.sh"
    [ "$rc" -ne 0 ] || fail "a failed download exited 0"
    [[ "$err" == *"could not download"* ]] || fail "stderr: $err"
    [ -z "$(find "$tmp/home/models" -type f)" ] || fail "files left: $(find "$tmp/home/models" -type f)"
    [ -z "$(find "$tmp/home/models" -name '.fetch-*')" ] || fail "a temporary folder was left" ;;
  fetch_unwritable)
    touch "$tmp/home"
    ORCHARD_HOME=$tmp/home run bash "$src/scripts/fetch-models.sh"
    [ "$rc" -ne 0 ] || fail "an unwritable store exited 0"
    expect_err_line "cannot write the model store $tmp/home/models" ;;
  run_default_missing)
    ORCHARD_HOME=$tmp/empty run "$ORCHARD" run -p hi
    expect_rc 2; expect_err_line "smollm2:135m-instruct-q4_1" "fetch-models.sh" ;;
  serve_default_missing)
    ORCHARD_HOME=$tmp/empty run "$ORCHARD" serve --port 0
    expect_rc 2; expect_err_line "smollm2:135m-instruct-q4_1" "fetch-models.sh" ;;
  run_unknown_name)
    ORCHARD_HOME=$tmp/empty run "$ORCHARD" run -m llama9:70b -p hi
    expect_rc 2; expect_err_line "'llama9:70b'" ;;
  run_default_truncated)
    need_default
    head -c 100000 "$blob" >"$tmp/part"
    fake_store "$tmp/part"
    ORCHARD_HOME=$tmp/home run "$ORCHARD" run -p hi -n 1
    expect_rc 2; expect_err_line "truncated" "sha256-$digest" ;;
  run_default_corrupt)  # the right size, other bytes
    need_default
    truncate -s "$size" "$tmp/zeros"
    fake_store "$tmp/zeros"
    ORCHARD_HOME=$tmp/home run "$ORCHARD" run -p hi -n 1
    expect_rc 2; expect_err_line "corrupt" "sha256-$digest" ;;
  run_default_store_readonly)  # the check cannot be recorded: the model still runs
    need_default
    fake_store "$(cp "$blob" "$tmp/copy" && echo "$tmp/copy")"
    touch "$tmp/home/models/verified"  # a file where the folder of records would go
    ORCHARD_HOME=$tmp/home run "$ORCHARD" run -p 'The capital of France is' -n 4 --temp 0
    expect_rc 0
    [[ "$(cat "$tmp/out")" == *Paris* ]] || fail "output: $(cat "$tmp/out")" ;;
  run_default_model)  # no -m: the real default model, greedy, knows its geography
    need_default
    run "$ORCHARD" run -p 'The capital of France is' -n 8 --temp 0
    expect_rc 0
    [[ "$(cat "$tmp/out")" == *Paris* ]] || fail "output: $(cat "$tmp/out")"
    [[ "$err" == *"smollm2"* || "$err" == *"Smollm2"* ]] || fail "summary does not name the model: $err" ;;
  run_bos_metadata)  # SmolLM2 says add_bos_token = false: no BOS unless --bos
    need_default
    run "$ORCHARD" run -p 'Hello world' -n 1 --temp 0 --json-stats; expect_rc 0
    plain=$(sed -n 's/.*"prompt_tokens": \([0-9]*\).*/\1/p' "$tmp/err")
    run "$ORCHARD" run -p 'Hello world' -n 1 --temp 0 --json-stats --bos; expect_rc 0
    with_bos=$(sed -n 's/.*"prompt_tokens": \([0-9]*\).*/\1/p' "$tmp/err")
    [ -n "$plain" ] && [ "$with_bos" -eq $((plain + 1)) ] || fail "prompt tokens $plain, with --bos $with_bos"
    run "$ORCHARD" run -n 1 --no-bos; expect_rc 2; expect_err_line "prompt is empty"
    run "$ORCHARD" run -p x --bos --no-bos; expect_rc 2; expect_err_line "--bos" ;;
  *)
    fail "unknown case" ;;
esac
exit 0

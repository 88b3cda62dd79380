#!/usr/bin/env bash
# One case of the model-store commands' tests (run by CTest): `orchard pull` (a path; an http URL served by
# tests/cli/range_server.py on loopback, interrupted and resumed; HTTP errors; a full or unwritable store),
# `create` from a Modelfile (and its errors, with line and column), `list`, `show`, `cp`, `rm`, `ps`, and a
# created model's parameters and system prompt applied by `orchard run`. The model is orchard-random written
# as a 3.5 MB GGUF by `orchard convert`; every case has a store of its own (ORCHARD_HOME in a temporary folder).
# usage: store_commands_test.sh CASE   with ORCHARD (the built binary) in the environment.
# Exit 0 pass, 1 fail (with what differed).
set -u
case_name=$1
: "${ORCHARD:?set ORCHARD to the orchard binary}"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
export ORCHARD_HOME=$tmp/home
store=$ORCHARD_HOME/models

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }
run() {  # run ARGS...: sets rc, out, err
  echo "+ $*" >>"${STORE_TEST_TRACE:-/dev/null}"
  "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1; stdout: $out; stderr: $err"; }
expect_err() { for want in "$@"; do [[ "$err" == *"$want"* ]] || fail "stderr '$err' does not mention '$want'"; done; }
expect_out() { for want in "$@"; do [[ "$out" == *"$want"* ]] || fail "stdout '$out' does not hold '$want'"; done; }
no_half_files() {  # nothing but complete blobs and manifests: no temporary or partial file, no manifest
  local left
  left=$(find "$store" -name '.tmp-*' -o -name 'partial-*' 2>/dev/null)
  [ -z "$left" ] || fail "files left: $left"
  [ -z "$(find "$store/manifests" -type f 2>/dev/null)" ] || fail "a manifest was written"
}
make_model() {  # $tmp/tiny.gguf: orchard-random as GGUF
  "$ORCHARD" convert orchard-random -o "$tmp/tiny.gguf" --type q8_0 >/dev/null 2>"$tmp/convert.err" ||
    fail "convert: $(cat "$tmp/convert.err")"
  sha=$(sha256sum "$tmp/tiny.gguf" | cut -c1-64)
}
serve_file() {  # serve_file ARGS...: range_server.py over $tmp/tiny.gguf; sets url
  python3 "$here/range_server.py" "$tmp/tiny.gguf" "$tmp/port" "$tmp/log" "$@" &
  server_pid=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
  [ -s "$tmp/port" ] || fail "the test server did not start"
  url=http://127.0.0.1:$(cat "$tmp/port")/files/Tiny-Model.Q8_0.gguf
}

case $case_name in
  pull_path)  # copied into a blob named by its sha256, listed, shown; the same file again is stored once
    make_model
    run "$ORCHARD" pull "$tmp/tiny.gguf"; expect_rc 0; expect_out "tiny:latest sha256:$sha"
    cmp -s "$tmp/tiny.gguf" "$store/blobs/sha256-$sha" || fail "the blob differs from the file"
    run "$ORCHARD" pull "$tmp/tiny.gguf" --name other/tiny:q8; expect_rc 0
    [ "$(find "$store/blobs" -type f | wc -l)" -eq 1 ] || fail "blobs: $(ls "$store/blobs")"
    run "$ORCHARD" list; expect_rc 0
    expect_out "NAME" "ID" "SIZE" "MODIFIED" "tiny:latest" "other/tiny:q8" "3.5 MB" "ago"
    run "$ORCHARD" show tiny; expect_rc 0
    expect_out "architecture         llama" "parameters           3.3M" "context length       2048" "quantization         Q8_0"
    run "$ORCHARD" show tiny --template; expect_rc 0 ;;
  pull_not_gguf)
    head -c 5000 /dev/urandom >"$tmp/noise.gguf"
    run "$ORCHARD" pull "$tmp/noise.gguf"; expect_rc 2; expect_err "noise.gguf" "not a GGUF"
    no_half_files
    run "$ORCHARD" pull "$tmp/absent.gguf"; expect_rc 2; expect_err "absent.gguf"
    run "$ORCHARD" pull "$tmp/noise.gguf" --name 'Bad Name'; expect_rc 2; expect_err "'Bad Name' is not a model name" ;;
  pull_url)  # downloaded whole, named by the URL's file name
    make_model; serve_file
    run "$ORCHARD" pull "$url"; expect_rc 0; expect_out "tiny-model.q8_0:latest sha256:$sha"
    cmp -s "$tmp/tiny.gguf" "$store/blobs/sha256-$sha" || fail "the blob differs from the file"
    no_half_files_but_manifest=$(find "$store" -name 'partial-*' -o -name '.tmp-*')
    [ -z "$no_half_files_but_manifest" ] || fail "left: $no_half_files_but_manifest" ;;
  pull_url_resume)  # the server cuts the first transfer at 1 MB: kept as a partial file, no name; resumed
    make_model; serve_file --cut-after 1000000
    run "$ORCHARD" pull "$url" --name tiny; expect_rc 2; expect_err "stopped after 1000000 of 3503648 bytes" "resume"
    [ -z "$(find "$store/manifests" -type f 2>/dev/null)" ] || fail "a name was written for a half file"
    [ -z "$(find "$store/blobs" -name 'sha256-*')" ] || fail "a blob was written for a half file"
    [ "$(stat -c %s "$(find "$store/blobs" -name 'partial-*')")" -eq 1000000 ] || fail "the partial file is not 1 MB"
    run "$ORCHARD" pull "$url" --name tiny; expect_rc 0; expect_out "tiny:latest sha256:$sha"
    grep -qx 'GET bytes=1000000-' "$tmp/log" || fail "no Range request from byte 1000000: $(cat "$tmp/log")"
    cmp -s "$tmp/tiny.gguf" "$store/blobs/sha256-$sha" || fail "the resumed blob differs from the file"
    [ -z "$(find "$store" -name 'partial-*')" ] || fail "the partial file was left" ;;
  pull_url_http_error)
    make_model; serve_file --status 404
    run "$ORCHARD" pull "$url"; expect_rc 2; expect_err "HTTP 404" "$url"
    no_half_files
    run "$ORCHARD" pull "http://127.0.0.1:1/x.gguf"; expect_rc 2; expect_err "127.0.0.1:1" ;;
  pull_full_disk)  # writes past 1 MB fail (RLIMIT_FSIZE, as a full disk does): a typed error, no half file
    make_model
    (trap '' XFSZ; ulimit -f 1024; exec "$ORCHARD" pull "$tmp/tiny.gguf") </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?; err=$(cat "$tmp/err")
    expect_rc 2; expect_err "[store] cannot write" "File too large"
    no_half_files ;;
  pull_unwritable)  # a file where the store's folder would be
    make_model; mkdir -p "$ORCHARD_HOME"; touch "$store"
    run "$ORCHARD" pull "$tmp/tiny.gguf"; expect_rc 2; expect_err "[store] cannot" "$store" ;;
  create_modelfile)  # every instruction recorded; shown back; a model FROM a stored name inherits them
    make_model
    printf 'LICENSE-TEXT\n' >"$tmp/adapter.bin"
    cat >"$tmp/Modelfile" <<'MF'
# a comment
FROM ./tiny.gguf
PARAMETER temperature 0
PARAMETER num_predict 3
PARAMETER stop "<end>"
PARAMETER stop "</s>"
TEMPLATE """{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}assistant:"""
SYSTEM "You are terse."
ADAPTER adapter.bin
license Apache-2.0
MESSAGE user Hello
MF
    run "$ORCHARD" create mini -f "$tmp/Modelfile"; expect_rc 0; expect_out "mini:latest sha256:$sha"
    run "$ORCHARD" show mini --parameters; expect_rc 0; expect_out "temperature" "num_predict" '"<end>"' '"</s>"'
    run "$ORCHARD" show mini --system; expect_rc 0; [ "$out" = "You are terse." ] || fail "system: $out"
    run "$ORCHARD" show mini --template; expect_rc 0; expect_out "{{ m.role }}: {{ m.content }}"
    run "$ORCHARD" show mini --license; expect_rc 0; expect_out "Apache-2.0"
    run "$ORCHARD" show mini --modelfile; expect_rc 0; expect_out "FROM mini:latest" "ADAPTER" "SYSTEM You are terse."
    run "$ORCHARD" show mini; expect_rc 0; expect_out "Parameters" "System" "Adapters" "License"
    printf 'FROM mini\nSYSTEM Be kind.\n' >"$tmp/Modelfile2"
    run "$ORCHARD" create mini2 -f "$tmp/Modelfile2"; expect_rc 0
    run "$ORCHARD" show mini2 --system; [ "$out" = "Be kind." ] || fail "system: $out"
    run "$ORCHARD" show mini2 --parameters; expect_out "num_predict" ;;
  create_applied)  # PARAMETER num_predict 3 and temperature 0 apply to `orchard run`; the flags override
    make_model
    printf 'FROM %s\nPARAMETER num_predict 3\nPARAMETER temperature 0\n' "$tmp/tiny.gguf" >"$tmp/Modelfile"
    run "$ORCHARD" create mini -f "$tmp/Modelfile"; expect_rc 0
    run "$ORCHARD" run -m mini -p 'Hello' --json-stats --ignore-eos; expect_rc 0; expect_err '"completion_tokens": 3'
    first=$out
    run "$ORCHARD" run -m mini -p 'Hello' --json-stats --ignore-eos; [ "$out" = "$first" ] || fail "temperature 0 not applied"
    run "$ORCHARD" run -m mini -p 'Hello' --json-stats --ignore-eos -n 5; expect_rc 0; expect_err '"completion_tokens": 5' ;;
  create_errors)  # line and column of what is wrong; nothing stored
    make_model
    printf 'FROM %s\nPARAMETER temperature 0\n  FORM x\n' "$tmp/tiny.gguf" >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "Modelfile:3:3: unknown instruction 'FORM'"
    printf 'FROM %s\nPARAMETER temperature hot\n' "$tmp/tiny.gguf" >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "Modelfile:2:23: parameter 'temperature' must be a number, got 'hot'"
    printf 'FROM %s\nPARAMETER warmth 1\n' "$tmp/tiny.gguf" >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "Modelfile:2:11: unknown parameter 'warmth'"
    printf 'FROM %s\nSYSTEM """open\n' "$tmp/tiny.gguf" >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "Modelfile:2:8: unterminated"
    printf 'SYSTEM hi\n' >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "no FROM"
    printf 'FROM nothing:here\n' >"$tmp/Modelfile"
    run "$ORCHARD" create m -f "$tmp/Modelfile"; expect_rc 2; expect_err "FROM 'nothing:here'"
    run "$ORCHARD" create m -f "$tmp/absent"; expect_rc 2; expect_err "absent"
    no_half_files ;;
  cp_rm)  # a copy shares the blob; it goes with the last name
    make_model
    run "$ORCHARD" pull "$tmp/tiny.gguf" --name a; expect_rc 0
    run "$ORCHARD" cp a b:v2; expect_rc 0
    run "$ORCHARD" rm a; expect_rc 0; expect_out "deleted 'a'"
    [ -f "$store/blobs/sha256-$sha" ] || fail "the blob went while b:v2 names it"
    run "$ORCHARD" run -m b:v2 -p hi -n 1; expect_rc 0
    run "$ORCHARD" rm b:v2; expect_rc 0
    [ ! -e "$store/blobs/sha256-$sha" ] || fail "the blob stayed with no name on it"
    [ -z "$(find "$store/manifests" -mindepth 1)" ] || fail "manifest folders left: $(find "$store/manifests")"
    run "$ORCHARD" rm a; expect_rc 2; expect_err "no model named 'a:latest'"
    run "$ORCHARD" cp nothing c; expect_rc 2; expect_err "no model named 'nothing:latest'"
    run "$ORCHARD" rm; expect_rc 2 ;;
  ps_no_server)
    run "$ORCHARD" ps --host http://127.0.0.1:1; expect_rc 2; expect_err "no server at http://127.0.0.1:1" ;;
  *)
    fail "unknown case" ;;
esac
exit 0

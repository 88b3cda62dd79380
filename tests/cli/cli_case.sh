# What the command-line test scripts share, sourced by each after `case_name=$1`: ORCHARD (the built binary)
# and the shared data folder ($data: ORCHARD_SHARED_DATA, else ORCHARD_DEFAULT_SHARED_DATA) from the
# environment, a temporary folder ($tmp) removed at exit, and the helpers below. A case exits 0 (pass),
# 1 (fail, saying what differed) or 77 (skipped, saying what is absent).
: "${ORCHARD:?set ORCHARD to the orchard binary}"
data=${ORCHARD_SHARED_DATA:-${ORCHARD_DEFAULT_SHARED_DATA:-}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }
need() { [ -e "$1" ] || { echo "SKIP [$case_name]: absent: $1" >&2; exit 77; }; }

# run_orchard ARGS...: runs orchard with no input; sets rc, err, and its standard output in $tmp/out.
run_orchard() {
  "$ORCHARD" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  err=$(cat "$tmp/err")
}
run() { run_orchard "$@"; }  # a script whose cases all run one subcommand redefines it

expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1; stdout: $(cat "$tmp/out"); stderr: $err"; }
expect_err_line() {  # one line on stderr, containing each argument
  [ "$(printf '%s' "$err" | wc -l)" -eq 0 ] && [ -n "$err" ] || fail "stderr is not one line: '$err'"
  for want in "$@"; do [[ "$err" == *"$want"* ]] || fail "stderr '$err' does not mention '$want'"; done
}

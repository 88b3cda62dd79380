#!/usr/bin/env bash
# One case of the `orchard grammar bench --maskbench` command-line tests (run by CTest).
# usage: maskbench_test.sh CASE   with ORCHARD (the built binary) in the environment, and ORCHARD_SHARED_DATA
# (else ORCHARD_DEFAULT_SHARED_DATA) naming the shared data folder.
# Exit 0 pass, 1 fail (with what differed), 77 skipped (shared data absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
mb=$data/maskbench-dev
llama3=$data/tokenizers/llama3
command -v python3 >/dev/null || { echo "SKIP [$case_name]: python3 absent (checks the JSON lines)" >&2; exit 77; }

# Small real MaskBench files: three with one valid and one invalid test each, and one whose schema uses
# "not" (a compile error or a pass, as the converter decides).
files=(Github_trivial---o25166.json Github_trivial---o19363.json Github_easy---o71308.json
       Synthesized---draft2019_09_valid_enum_id5_subschema1_not_2.json)

case $case_name in
  maskbench_run)
    need "$mb/${files[0]}"; need "$llama3/encoder.json"
    paths=(); for f in "${files[@]}"; do paths+=("$mb/$f"); done
    run grammar bench --maskbench "${paths[@]}" -t "$llama3" --jsonl "$tmp/out.jsonl"; expect_rc 0
    grep -q "^maskbench: 4 schemas, [0-9]* passing, [0-9]* compile errors, [0-9]* validation errors, [0-9]* invalidation errors, [0-9]* timeouts, [0-9]* crashes (8 tests)$" "$tmp/out" \
      || fail "no summary line: $(cat "$tmp/out")"
    grep -q "^TBM us ([0-9]* masks): p25 .* p50 .* p75 .* p90 .* p95 .* p99 .* p99.9 .* max " "$tmp/out" || fail "no TBM line"
    grep -q "^TTFM ms ([0-9]* schemas): p25 .* p99.9 .* max " "$tmp/out" || fail "no TTFM line"
    python3 - "$tmp/out.jsonl" "$tmp/out" "${files[@]}" <<'PY' || fail "JSON lines differ (above)"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = open(sys.argv[2]).read()
ids = sys.argv[3:]
assert [l["id"] for l in lines] == ids, [l["id"] for l in lines]
fields = ["id", "ttfm_us", "max_ttfm_us", "masks_us", "max_mask_us", "num_tokens", "num_tests", "all_mask_us",
          "num_valid_tests", "num_invalid_tests", "passed"]
for l in lines:
    for f in fields:
        assert f in l, (l["id"], f)
    assert l["num_tests"] == 2, l
    assert l["num_tokens"] == len(l["all_mask_us"]), l["id"]
    assert abs(l["masks_us"] - sum(l["all_mask_us"])) < 0.01 * len(l["all_mask_us"]) + 0.01, l["id"]
    assert l["max_mask_us"] == max(l["all_mask_us"], default=0), l["id"]
    if "compile_error" in l:
        assert l["ttfm_us"] == 0 and l["num_tokens"] == 0 and not l["passed"], l
    else:
        assert l["ttfm_us"] > 0, l
for l in lines[:3]:  # these three must pass: one valid test accepted, one invalid rejected
    assert l["passed"] and l["num_valid_tests"] == 1 and l["num_invalid_tests"] == 1, l
    assert "validation_error" not in l and "compile_error" not in l, l
passing = sum(l["passed"] for l in lines)
compile_errors = sum("compile_error" in l for l in lines)
assert re.search(rf"^maskbench: 4 schemas, {passing} passing, {compile_errors} compile errors, 0 validation "
                 r"errors, 0 invalidation errors, 0 timeouts, 0 crashes", summary, re.M), summary
masks = sum(l["num_tokens"] for l in lines)
assert f"TBM us ({masks} masks)" in summary, summary
assert f"TTFM ms ({4 - compile_errors} schemas)" in summary, summary
PY
    # The engine's default builds the token tables in the background; --tables compile builds them all
    # in compile, --tables first-use each at its first mask, and every schema comes out the same.
    grep -q "^token tables built in the background$" "$tmp/out" || fail "default: $(cat "$tmp/out")"
    run grammar bench --maskbench "${paths[@]}" -t "$llama3" --tables compile --jsonl "$tmp/eager.jsonl"; expect_rc 0
    grep -q "^token tables built in compile$" "$tmp/out" || fail "--tables compile: $(cat "$tmp/out")"
    run grammar bench --maskbench "${paths[@]}" -t "$llama3" --tables first-use --jsonl "$tmp/lazy.jsonl"
    expect_rc 0
    grep -q "^token tables built at first use$" "$tmp/out" || fail "--tables first-use: $(cat "$tmp/out")"
    python3 - "$tmp/out.jsonl" "$tmp/eager.jsonl" "$tmp/lazy.jsonl" <<'PY' || fail "outcomes differ (above)"
import json, sys
def outcome(path):
    return [(l["id"], l["passed"], "compile_error" in l, l["num_tokens"]) for l in map(json.loads, open(path))]
assert outcome(sys.argv[1]) == outcome(sys.argv[2]) == outcome(sys.argv[3]), [outcome(p) for p in sys.argv[1:]]
PY
    ;;
  maskbench_stdout_and_folder)  # no --jsonl: the status lines go to stdout; a folder means its *.json
    need "$mb/${files[0]}"; need "$llama3/encoder.json"
    mkdir "$tmp/dir"; ln -s "$mb/${files[1]}" "$tmp/dir/a.json"; ln -s "$mb/${files[0]}" "$tmp/dir/b.json"
    printf 'not a schema file' >"$tmp/dir/README.txt"
    run grammar bench --maskbench "$tmp/dir" -t "$llama3"; expect_rc 0
    [ "$(grep -c '^{"id":' "$tmp/out")" -eq 2 ] || fail "expected 2 status lines: $(cat "$tmp/out")"
    head -1 "$tmp/out" | grep -q '^{"id":"a.json",' || fail "first line is not a.json: $(head -1 "$tmp/out")"
    grep -q "^maskbench: 2 schemas, 2 passing, 0 compile errors" "$tmp/out" || fail "summary: $(cat "$tmp/out")" ;;
  maskbench_timeout)  # a time limit far below the compile time: recorded as a timeout, the run goes on
    # (10 us: at 1 ms this schema finished in time in about 5% of runs)
    need "$mb/${files[0]}"; need "$llama3/encoder.json"
    run grammar bench --maskbench "$mb/${files[2]}" -t "$llama3" --time-limit 0.00001; expect_rc 0
    grep -q '"timeout":' "$tmp/out" || fail "no timeout field: $(cat "$tmp/out")"
    grep -q "^maskbench: 1 schemas, 0 passing, 0 compile errors, 0 validation errors, 0 invalidation errors, 1 timeouts, 0 crashes" "$tmp/out" \
      || fail "summary: $(cat "$tmp/out")" ;;
  maskbench_not_maskbench)  # a file that is not MaskBench JSON: exit 2, one line naming it (no data needed)
    printf '{"schema": {"type": "string"}}' >"$tmp/no_tests.json"
    run grammar bench --maskbench "$tmp/no_tests.json" -t "$tmp/unused-tokenizer"; expect_rc 2
    expect_err_line "no_tests.json: not a MaskBench file: no \"tests\" array"
    printf '{"schema": {}, "tests": [' >"$tmp/broken.json"
    run grammar bench --maskbench "$tmp/broken.json" -t "$tmp/unused-tokenizer"; expect_rc 2
    expect_err_line "broken.json: not JSON"
    printf '{"schema": {}, "tests": [{"valid": true}]}' >"$tmp/no_text.json"
    run grammar bench --maskbench "$tmp/no_text.json" -t "$tmp/unused-tokenizer"; expect_rc 2
    expect_err_line "tests[0] has no string \"text\""
    run grammar bench --maskbench "$tmp/absent.json" -t "$tmp/unused-tokenizer"; expect_rc 2
    expect_err_line "absent.json: no such file or folder" ;;
  maskbench_usage)
    run grammar bench --maskbench; expect_rc 2; expect_err_line "--maskbench"
    printf '{"schema": {}, "tests": []}' >"$tmp/ok.json"
    run grammar bench --maskbench "$tmp/ok.json"; expect_rc 2; expect_err_line "--tokenizer"
    run grammar bench --maskbench "$tmp/ok.json" -t x --time-limit 0; expect_rc 2; expect_err_line "--time-limit"
    run grammar bench --maskbench "$tmp/ok.json" -t x --tables sometimes; expect_rc 2
    expect_err_line "--tables: expected compile, background or first-use, got 'sometimes'"
    run grammar bench --maskbench "$tmp/ok.json" -t x --prefill-ms -1; expect_rc 2
    expect_err_line "--prefill-ms: expected milliseconds from 0 to 60000, got '-1'"
    run grammar bench --maskbench x --help; expect_rc 0
    grep -q "usage: orchard grammar bench --maskbench DIR|FILE... -t TOKENIZER" "$tmp/out" || fail "no usage line" ;;
  *) fail "unknown case" ;;
esac
exit 0

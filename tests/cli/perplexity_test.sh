#!/usr/bin/env bash
# One case of the `orchard perplexity` command-line tests (run by CTest): every bad input is one line on
# stderr and exit status 2; a run on stories260K prints llama-perplexity's output and the same figures
# whatever the batch (chunks split over steps, or several chunks per step).
# usage: perplexity_test.sh CASE   with ORCHARD (the built binary) and ORCHARD_SHARED_DATA (else
# ORCHARD_DEFAULT_SHARED_DATA) in the environment. Exit 0 pass, 1 fail, 77 skipped (shared data absent).
set -u
case_name=$1
source "$(dirname "$0")/cli_case.sh"
model=$data/models/stories260K/stories260K.bin
corpus=$data/corpus/war-and-peace.txt
run() { run_orchard perplexity "$@"; }
# 30 kB of prose: about 17,500 stories260K tokens.
text() { need "$corpus"; head -c 30000 "$corpus" >"$tmp/text.txt"; }
json_field() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

case $case_name in
  perplexity_help)
    run --help; expect_rc 0
    grep -q "usage: orchard perplexity" "$tmp/out" || fail "no usage line"
    grep -q "llama-perplexity" "$tmp/out" || fail "the method is not said" ;;
  perplexity_needs_model)
    run -f x.txt; expect_rc 2; expect_err_line "--model" ;;
  perplexity_needs_file)
    run -m x.gguf; expect_rc 2; expect_err_line "--file" ;;
  perplexity_missing_file)
    need "$model"
    run -m "$model" -f "$tmp/no-such-text.txt"; expect_rc 2; expect_err_line "no-such-text.txt" ;;
  perplexity_unreadable_model)
    text; printf 'not a model' >"$tmp/bad.gguf"
    run -m "$tmp/bad.gguf" -f "$tmp/text.txt"; expect_rc 2; expect_err_line "bad.gguf" ;;
  perplexity_file_too_short)
    need "$model"
    printf 'Too short for two chunks of 64 tokens.' >"$tmp/short.txt"
    run -m "$model" -f "$tmp/short.txt" --ctx 64; expect_rc 2; expect_err_line "needs at least 128" ;;
  perplexity_ctx_over_model)
    need "$model"; text
    run -m "$model" -f "$tmp/text.txt" --ctx 100000; expect_rc 2; expect_err_line "over the model's context" ;;
  perplexity_ctx_too_small)
    run -m "$model" -f x.txt --ctx 2; expect_rc 2; expect_err_line "--ctx" ;;
  perplexity_bad_kv_type)
    run -m "$model" -f x.txt --kv-type q8_0; expect_rc 2; expect_err_line "--kv-type" ;;
  perplexity_stories)
    need "$model"; text
    # llama-perplexity's output: the running estimate per chunk, then the final line.
    run -m "$model" -f "$tmp/text.txt" --ctx 64 --chunks 6 --threads 2; expect_rc 0
    grep -qE '^\[1\][0-9]+\.[0-9]{4},\[2\][0-9.]+,\[3\][0-9.]+,\[4\][0-9.]+,\[5\][0-9.]+,\[6\][0-9.]+,$' "$tmp/out" ||
      fail "no running estimates: $(head -c 200 "$tmp/out")"
    grep -qE '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$' "$tmp/out" || fail "no final line"
    final=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$tmp/out")
    last=$(sed -n 's/.*\[6\]\([0-9.]*\),$/\1/p' "$tmp/out")
    [ "$final" = "$last" ] || fail "final $final is not the last running estimate $last"
    # --json: the same figure, 6 chunks of 31 scored tokens, BOS counted in the tokens (llama2.c adds it).
    run -m "$model" -f "$tmp/text.txt" --ctx 64 --chunks 6 --threads 2 --json; expect_rc 0
    cp "$tmp/out" "$tmp/ref.json"
    [ "$(json_field "$tmp/ref.json" n_scored)" = 186 ] || fail "n_scored $(json_field "$tmp/ref.json" n_scored)"
    [ "$(json_field "$tmp/ref.json" add_bos)" = True ] || fail "stories260K adds BOS"
    python3 - "$tmp/ref.json" "$final" <<'PY' || fail "JSON figures inconsistent"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert len(j["estimates"]) == 6 and j["estimates"][-1] == j["ppl"], j
assert abs(math.exp(j["mean_nll"]) - j["ppl"]) < 1e-9 * j["ppl"], j
assert f"{j['ppl']:.4f}" == sys.argv[2], (j["ppl"], sys.argv[2])
assert 1 < j["ppl"] < 512 and j["ppl_error"] > 0, j  # below the vocabulary size: the model predicts
PY
    # The batch only changes how the chunks are stepped (16: four steps per chunk; 128: two chunks per step;
    # 1000: all six at once): the figures are identical.
    for b in 16 128 1000; do
      run -m "$model" -f "$tmp/text.txt" --ctx 64 --chunks 6 --threads 2 --batch $b --json; expect_rc 0
      python3 - "$tmp/ref.json" "$tmp/out" <<'PY' || fail "--batch $b changed the figures"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["estimates"] == b["estimates"] and a["ppl_error"] == b["ppl_error"], (a, b)
PY
    done ;;
  *) fail "unknown case" ;;
esac
exit 0

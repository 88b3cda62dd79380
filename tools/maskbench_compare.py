#!/usr/bin/env python3
"""Summarize `orchard grammar bench --maskbench ... --jsonl FILE` runs side by side.

Usage: tools/maskbench_compare.py RUN.jsonl [RUN.jsonl ...]

One line per file: schemas passing, TBM (every mask of every test) and TTFM (schemas that compiled)
percentiles by nearest rank, the schemas whose TTFM passed 20 and 100 ms, and the automaton states of
the compiled schemas. Used to pair a build with an older binary run in the same window
(docs/PERFORMANCE.md, MaskBench section), since the shared VM's speed drifts between windows.
"""
import json
import sys


def nearest_rank(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def summarize(path):
    masks, ttfm, states = [], [], []
    passing = schemas = 0
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            schemas += 1
            passing += bool(row.get("passed"))
            masks += row.get("all_mask_us", [])
            if "ttfm_us" in row and not row.get("compile_error"):
                ttfm.append(row["ttfm_us"] / 1000)
                states.append(row.get("compile_stats", {}).get("states", 0))
    masks.sort()
    ttfm.sort()
    states.sort()
    tbm = " ".join(f"p{k} {nearest_rank(masks, q):.2f}" for k, q in (("50", 0.5), ("99", 0.99), ("99.9", 0.999)))
    tt = " ".join(f"p{k} {nearest_rank(ttfm, q):.2f}" for k, q in (("50", 0.5), ("90", 0.9), ("95", 0.95), ("99", 0.99)))
    return (f"{path}: passing {passing}/{schemas} | TBM us {tbm} | TTFM ms {tt} | over 20 ms "
            f"{sum(t > 20 for t in ttfm)}, over 100 ms {sum(t > 100 for t in ttfm)} | states p50 "
            f"{nearest_rank(states, 0.5)} p99 {nearest_rank(states, 0.99)} max {states[-1] if states else 0}")


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in argv[1:]:
        try:
            print(summarize(path))
        except (OSError, ValueError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

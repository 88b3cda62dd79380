#!/usr/bin/env python3
"""BFCL conformance of the tool-call grammars: counts entries, compiled grammars, walks, finished walks
and valid calls, where a walk is valid when it parsed into calls only (no stray content), one call unless
the category is parallel, each naming one of the entry's functions with arguments that validate
(jsonschema, draft 2020-12, formats checked) against that function's normalised parameters.

Either runs bfcl_walks (the C++ random walker, build target `bfcl_walks`) over the shared BFCL files:
  .venv/bin/python tools/bfcl_check.py --binary build-tools/tests/pie/tools/bfcl_walks --format hermes
or checks its JSON Lines output:
  .venv/bin/python tools/bfcl_check.py --input walks.jsonl [--require-all-valid]
"""
import argparse
import collections
import decimal
import json
import os
import subprocess
import sys

import jsonschema

CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple"]


def parse_number(text):
    """JSON numbers as Python's json would read them, except that an integral value in exponent or
    fraction form (1e400, 2.0) stays exact: a float would overflow to inf or round, and JSON Schema counts
    integral values as integers."""
    try:
        value = decimal.Decimal(text)
        if value.adjusted() < 5000 and value == value.to_integral_value():
            return int(value)
    except decimal.DecimalException:  # an exponent past Decimal's range
        pass
    return float(text)


def walk_errors(entry, walk, validators):
    """Why a walk is not a valid answer (empty list when it is)."""
    errors = []
    if not walk["finished"]:
        errors.append(f"unfinished after {walk['n_tokens']} tokens")
    if walk["content"]:
        errors.append(f"content {walk['content'][:80]!r}")
    calls = walk["calls"]
    if not calls:
        errors.append("no call")
    if len(calls) > 1 and not entry["parallel"]:
        errors.append(f"{len(calls)} calls, parallel off")
    for call in calls:
        validator = validators.get(call["name"])
        if validator is None:
            errors.append(f"unknown function {call['name']!r}")
            continue
        try:
            arguments = json.loads(call["arguments"], parse_float=parse_number)
        except json.JSONDecodeError as e:
            errors.append(f"arguments not JSON: {e}")
            continue
        for error in validator.iter_errors(arguments):
            errors.append(f"{call['name']}: {error.message[:160]} at {list(error.absolute_path)}")
    return errors


def check(lines, out):
    counts = collections.Counter()
    by_format = collections.defaultdict(collections.Counter)
    failures = []
    for line in lines:
        entry = json.loads(line)
        fmt = entry["format"]
        c = by_format[fmt]
        counts["entries"] += 1
        c["entries"] += 1
        if not entry["compiled"]:
            failures.append(f"{entry['id']}: not compiled: {entry.get('error', '')[:200]}")
            continue
        counts["compiled"] += 1
        c["compiled"] += 1
        c["compile_ms"] += entry["compile_ms"]
        validators = {}
        for name, schema in entry["tools"].items():
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            validators[name] = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for walk in entry["walks"]:
            counts["walks"] += 1
            c["walks"] += 1
            if walk["finished"]:
                counts["finished"] += 1
                c["finished"] += 1
            errors = walk_errors(entry, walk, validators)
            if errors:
                failures.append(f"{entry['id']} [{fmt}]: {'; '.join(errors)}\n    text: {walk['text'][:300]!r}")
            else:
                counts["valid"] += 1
                c["valid"] += 1
                c["calls"] += len(walk["calls"])
    for fmt, c in sorted(by_format.items()):
        mean_ms = c["compile_ms"] / c["compiled"] if c["compiled"] else 0
        print(f"{fmt}: entries {c['entries']}, compiled {c['compiled']}, walks {c['walks']}, "
              f"finished {c['finished']}, valid {c['valid']} ({c['calls']} calls), "
              f"mean compile {mean_ms:.0f} ms", file=out)
    for f in failures[:50]:
        print("FAIL " + f, file=out)
    if len(failures) > 50:
        print(f"... {len(failures) - 50} more failures", file=out)
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="bfcl_walks output (JSON Lines) to check")
    parser.add_argument("--binary", help="the bfcl_walks program to run")
    parser.add_argument("--format", action="append", help="tool-call format(s) to walk (default hermes)")
    parser.add_argument("--walks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=int, help="entries per category")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    parser.add_argument("--save", help="also write the walks here (JSON Lines)")
    parser.add_argument("--open-objects", action="store_true", help="grammars with objects as written")
    parser.add_argument("--precompute", action="store_true", help="eager token tables (compile times)")
    parser.add_argument("--require-all-valid", action="store_true", help="exit 1 unless every walk is valid")
    args = parser.parse_args()
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            lines = [l for l in f if l.strip()]
    elif args.binary:
        lines = []
        for fmt in args.format or ["hermes"]:
            command = [args.binary, "--encoder", os.path.join(args.data, "tokenizers/llama3/encoder.json"),
                       "--format", fmt, "--walks", str(args.walks), "--seed", str(args.seed)]
            command += ["--open-objects"] if args.open_objects else []
            command += ["--precompute"] if args.precompute else []
            if args.limit:
                command += ["--limit", str(args.limit)]
            command += [os.path.join(args.data, "bfcl", f"BFCL_v4_{c}.json") for c in CATEGORIES]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                sys.exit(f"bfcl_walks failed ({result.returncode}): {result.stderr}")
            lines += [l for l in result.stdout.splitlines() if l.strip()]
        if args.save:
            with open(args.save, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    else:
        parser.error("give --input or --binary")
    counts = check(lines, sys.stdout)
    print(f"total: entries {counts['entries']}, compiled {counts['compiled']}, walks {counts['walks']}, "
          f"finished {counts['finished']}, valid {counts['valid']}")
    if args.require_all_valid and (counts["valid"] != counts["walks"] or counts["compiled"] != counts["entries"]):
        sys.exit(1)


if __name__ == "__main__":
    main()

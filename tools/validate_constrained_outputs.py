#!/usr/bin/env python3
"""Validates constrained-generation outputs with Python jsonschema (an independent implementation).

Input: a JSON Lines file, one record per generation:
  {"name": ..., "schema": <the JSON Schema>, "output": <the generated text>, "finish": "stop" | "length" | ...}
Outputs that finished by the grammar ("stop") must parse as JSON and validate against their schema; those cut
by max_tokens ("length") are counted, not judged; any "error" finish is a failure. "format" is checked as
well where jsonschema's FormatChecker knows the format, and its failures are reported separately (JSON
Schema 2020-12 treats "format" as an annotation by default). Draft-04 schemas whose only errors are integers
written with a fraction (1.0: not an integer in draft 4, an integer since draft 6 and for pse) are counted
apart, as a known difference.

Prints the counts; exit status 0 when every finished output validates, 1 otherwise, 2 on bad input.
usage: validate_constrained_outputs.py OUTPUTS.jsonl [--show N]
"""
import json
import sys

import jsonschema


def validator_class(schema):
    if isinstance(schema, dict) and "$schema" in schema:
        try:
            return jsonschema.validators.validator_for(schema)
        except Exception:  # unknown meta-schema URI: the latest draft
            pass
    return jsonschema.Draft202012Validator


def draft4_integral_float(error):
    return (error.validator == "type" and error.validator_value == "integer" and isinstance(error.instance, float)
            and error.instance.is_integer())


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    show = int(argv[argv.index("--show") + 1]) if "--show" in argv else 5
    counts = {"records": 0, "valid": 0, "invalid": 0, "not_json": 0, "length": 0, "error": 0,
              "format_only": 0, "skipped_schema": 0, "draft4_integral_float": 0}
    failures = []
    with open(argv[1], encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            counts["records"] += 1
            finish = rec.get("finish")
            if finish == "length":
                counts["length"] += 1
                continue
            if finish != "stop":
                counts["error"] += 1
                failures.append((rec.get("name"), f"finish {finish}: {rec.get('error', '')}"))
                continue
            schema = rec["schema"]
            try:
                cls = validator_class(schema)
                cls.check_schema(schema)
            except Exception:
                counts["skipped_schema"] += 1  # jsonschema itself cannot read this schema
                continue
            try:
                value = json.loads(rec["output"])
            except ValueError as e:
                counts["not_json"] += 1
                failures.append((rec.get("name"), f"not JSON ({e}): {rec['output'][:200]!r}"))
                continue
            try:
                errors = list(cls(schema).iter_errors(value))
            except Exception as e:  # a schema jsonschema cannot evaluate (e.g. an unresolvable $ref)
                counts["skipped_schema"] += 1
                continue
            if errors and cls is jsonschema.Draft4Validator and all(draft4_integral_float(e) for e in errors):
                # Draft 4 says 1.0 is not an integer; later drafts (and pse, for every draft) say it is.
                counts["draft4_integral_float"] += 1
                continue
            if errors:
                counts["invalid"] += 1
                failures.append((rec.get("name"), f"{errors[0].message[:200]} at {list(errors[0].absolute_path)}"))
                continue
            counts["valid"] += 1
            if list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value)):
                counts["format_only"] += 1
    judged = counts["valid"] + counts["invalid"] + counts["not_json"] + counts["error"]
    print(f"{counts['records']} outputs: {counts['valid']} of {judged} finished outputs validate "
          f"({counts['invalid']} invalid, {counts['not_json']} not JSON, {counts['error']} errors); "
          f"{counts['length']} cut at max_tokens (not judged); {counts['skipped_schema']} schemas jsonschema "
          f"cannot evaluate; {counts['format_only']} valid outputs fail a 'format' check; "
          f"{counts['draft4_integral_float']} draft-04 outputs spell an integer as 1.0 (valid in later drafts)")
    for name, why in failures[:show]:
        print(f"  FAIL {name}: {why}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""XGrammar's strict mode as a rewrite of the schema: where a schema says nothing of members or items beyond
those it lists, none are allowed.

- An object schema with "properties" and none of "additionalProperties", "unevaluatedProperties",
  "patternProperties" gets "additionalProperties": false -- unless it combines schemas ("allOf", "anyOf",
  "oneOf", "$ref", "if", "dependentSchemas"), or is a branch of an "allOf", where another schema may declare
  the members (there it is left as written).
- An array schema with "prefixItems" and neither "items" nor "unevaluatedItems" gets "items": false.

Everything else is left as it is, so a strict schema is never one Orchard cannot enforce.
"""

_COMBINING = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")
_MEMBER_KEYWORDS = ("additionalProperties", "unevaluatedProperties", "patternProperties")
# Keywords whose value is a schema, a list of schemas, or a map of schemas.
_SCHEMA = ("additionalProperties", "unevaluatedProperties", "items", "additionalItems", "unevaluatedItems",
           "contains", "propertyNames", "not", "if", "then", "else")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def strictly(schema, in_all_of=False):
    """A copy of `schema` in strict mode (the input is not changed)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for k in _SCHEMA:
        if k in out:
            if k == "items" and isinstance(out[k], list):  # draft-04 tuple form
                out[k] = [strictly(s) for s in out[k]]
            else:
                out[k] = strictly(out[k])
    for k in _SCHEMA_LISTS:
        if isinstance(out.get(k), list):
            out[k] = [strictly(s, in_all_of=(k == "allOf")) for s in out[k]]
    for k in _SCHEMA_MAPS:
        if isinstance(out.get(k), dict):
            out[k] = {name: strictly(s) for name, s in out[k].items()}
    if ("properties" in out and not any(k in out for k in _MEMBER_KEYWORDS)
            and not any(k in out for k in _COMBINING) and not in_all_of):
        out["additionalProperties"] = False
    if isinstance(out.get("prefixItems"), list) and "items" not in out and "unevaluatedItems" not in out:
        out["items"] = False
    return out

#!/usr/bin/env python3
"""JSON schemas held during sampling, judged by python3-jsonschema.

Writes a few hundred random schemas (objects with required and optional
properties, arrays with bounds and prefixItems, strings with lengths,
formats and enums of unicode and escaped text, integer bounds, anyOf, type
lists, const, recursive $refs) plus fixed ones, has grammar_walk draw a
random text through each schema's grammar over the demo model's vocabulary
(each step a token drawn uniformly among those the mask allows), and checks
every text: valid UTF-8, JSON, and valid under its schema by jsonschema's
Draft 2020-12 validator (formats date, time, date-time and uuid checked here).

  json_schema_test.py GRAMMAR_WALK MODEL.gguf
"""
import datetime
import json
import random
import re
import subprocess
import sys
import uuid

import jsonschema

NAMES = ["id", "name", "é", "a\"b", "back\\slash", "line\nbreak", "😀", "tab\t", "x y", "ключ"]
TEXTS = ["", "a", "é", "\"", "\\", "\n", "😀", "\u0001", "null", "{}", "ключ", "a\"b\\c"]


def random_schema(rng, depth):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyOf", "types"]
    kind = rng.choice(kinds)
    if kind == "string":
        s = {"type": "string"}
        r = rng.random()
        if r < 0.5:
            lo = rng.randint(0, 3)
            s["minLength"] = lo
            s["maxLength"] = lo + rng.randint(0, 6)
        elif r < 0.7:
            s["format"] = rng.choice(["date", "time", "date-time", "uuid"])
        else:
            s["maxLength"] = rng.randint(0, 8)
        return s
    if kind == "integer":
        s = {"type": "integer"}
        if rng.random() < 0.6:
            lo = rng.randint(-1000, 1000)
            s["minimum"] = lo
            if rng.random() < 0.7:
                s["maximum"] = lo + rng.randint(0, 2000)
        if rng.random() < 0.2:
            s["exclusiveMaximum" if rng.random() < 0.5 else "exclusiveMinimum"] = rng.randint(-50, 50)
            s.pop("minimum", None)
            s.pop("maximum", None)
        return s
    if kind in ("number", "boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        values = rng.sample(TEXTS, rng.randint(1, 4)) + rng.sample([1, -2.5, True, None, [1, "é"],
                                                                    {"k": "v"}], rng.randint(0, 2))
        return {"enum": values}
    if kind == "const":
        return {"const": rng.choice(TEXTS + [3, {"a": [1, None]}])}
    if kind == "object":
        names = rng.sample(NAMES, rng.randint(0, 4))
        props = {n: random_schema(rng, depth + 1) for n in names}
        s = {"type": "object", "properties": props,
             "required": [n for n in names if rng.random() < 0.5]}
        r = rng.random()
        if r < 0.2:
            s["additionalProperties"] = False
        elif r < 0.3:
            s["additionalProperties"] = {"type": "integer", "minimum": 0, "maximum": 9}
        if not props:
            s.pop("properties")
            s.pop("required")
            s["additionalProperties"] = {"type": "boolean"}
        return s
    if kind == "array":
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo,
             "maxItems": lo + rng.randint(0, 3)}
        if rng.random() < 0.3:
            s["prefixItems"] = [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 2))]
            s["minItems"] = 0
        return s
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    return {"type": rng.sample(["string", "integer", "boolean", "null"], 2), "maxLength": 4}


FIXED = [
    {},
    {"type": "object"},
    {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 4},
    # A tree through a recursive $ref.
    {"$defs": {"node": {"type": "object",
                        "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 99},
                                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                "maxItems": 2}},
                        "required": ["v"]}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                      "tags": {"type": "array", "items": {"enum": ["a", "é"]}}},
     "required": ["name", "tags"], "additionalProperties": False},
    {"type": ["string", "null"], "maxLength": 2},
    {"anyOf": [{"type": "integer", "minimum": 5, "maximum": 7}, {"const": "x"}]},
]


def check_format(fmt, value):
    if not isinstance(value, str):
        return True
    if fmt == "date":
        datetime.date.fromisoformat(value)
    elif fmt == "uuid":
        uuid.UUID(value)
        assert re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", value), value
    elif fmt == "time":
        assert re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value), value
        datetime.time.fromisoformat(value[:8])
    elif fmt == "date-time":
        date, _, time = value.partition("T")
        datetime.date.fromisoformat(date)
        check_format("time", time)
    return True


def formats_in(schema, value):
    """Checks the formats along the schema for `value` (plain nesting only)."""
    if not isinstance(schema, dict):
        return
    if "format" in schema:
        check_format(schema["format"], value)
    if isinstance(value, dict):
        for k, v in value.items():
            formats_in(schema.get("properties", {}).get(k), v)
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        for i, v in enumerate(value):
            formats_in(prefix[i] if i < len(prefix) else schema.get("items"), v)


def main():
    walker, model = sys.argv[1], sys.argv[2]
    rng = random.Random(20261206)
    schemas = FIXED + [random_schema(rng, 0) for _ in range(300)]
    lines = "".join(json.dumps(s) + "\n" for s in schemas)
    out = subprocess.run([walker, model, "7"], input=lines.encode(), capture_output=True,
                         timeout=600, check=True).stdout.decode()
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == len(schemas), (len(results), len(schemas))
    complete = 0
    for schema, r in zip(schemas, results):
        where = f"schema {json.dumps(schema, ensure_ascii=False)}\nresult {r}"
        assert "error" not in r, where
        assert r["utf8"], where
        if not r["complete"]:
            continue
        complete += 1
        value = json.loads(r["text"])
        jsonschema.Draft202012Validator(schema).validate(value)
        formats_in(schema, value)
    print(f"{complete} of {len(schemas)} walks complete, every one valid under its schema")
    assert complete >= 0.9 * len(schemas), complete

    # Refusals name the keyword.
    bad = [{"type": "string", "pattern": "^a$"}, {"not": {}}, {"type": "strin"}]
    out = subprocess.run([walker, model, "1"], input="".join(json.dumps(s) + "\n" for s in bad)
                         .encode(), capture_output=True, timeout=60, check=True).stdout.decode()
    errors = [json.loads(line).get("error", "") for line in out.splitlines()]
    assert "pattern" in errors[0] and "not" in errors[1] and "strin" in errors[2], errors
    print("refusals:", errors)


if __name__ == "__main__":
    main()

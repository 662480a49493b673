#!/usr/bin/env python3
"""Output held to a grammar or a JSON schema, end to end: pi-launch --http (with
-np 2, so requests share the batch scheduler) and pi-run, against the demo model.

- GBNF `grammar` (llama-server's field) on /v1/completions, the native /completion and
  chat: the text is one the grammar matches (checked with Python's re for a regular
  grammar), and ends there (finish_reason stop); streamed text equals the whole text.
- `json_schema` (llama-server's), `response_format` json_schema (OpenAI's) and
  json_object (any object, or llama-server's `schema` beside the type): every reply is
  JSON valid under its schema by python3-jsonschema, greedy and sampled.
- A constrained request beside a free one (two at once) leaves the free one's answer as
  it is alone.
- 400s naming the problem: a bad grammar (line and column), a schema keyword outside the
  subset, two constraints at once, a response_format field we do not know.
- pi-run -j SCHEMA and --grammar-file: the same checks; a bad grammar is refused before the
  model loads.

Usage: structured_output_test.py BIN_DIR
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading

import jsonschema
import regex

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
PROMPT = "In the beginning God created"

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 130},
                         "tribe": {"enum": ["Judah", "Levi", "Benjamin"]},
                         "sons": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                  "maxItems": 3}},
          "required": ["name", "age", "tribe"]}


def text_of(r):
    c = r["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def grammar_requests(a):
    gbnf = 'root ::= ("yes" | "no" | "amen") "." ( " " [A-Z] [a-z]{1,8} ){0,3}\n'
    pattern = re.compile(r"(yes|no|amen)\.( [A-Z][a-z]{1,8}){0,3}")
    for temp in (0, 1.0):
        body = {"prompt": PROMPT, "max_tokens": 64, "temperature": temp, "seed": 5,
                "grammar": gbnf}
        st, _, r = call(a, "POST", "/v1/completions", body)
        text = text_of(r) if st == 200 else repr(r)
        check(st == 200 and pattern.fullmatch(text) is not None
              and r["choices"][0]["finish_reason"] == "stop",
              f"grammar, temperature {temp}: {text!r} matches, finish_reason stop")
        st, _, events = stream(a, body)
        streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]
                           if json.loads(e)["choices"])
        check(streamed == text, f"grammar streamed == whole ({streamed!r})")
    # Greedy under the grammar is the most likely token that keeps the text a prefix of a
    # match: checked against each step's 20 most likely tokens with the regex module's
    # partial matching (an independent judge of what may continue).
    chat = {"messages": [{"role": "user", "content": "Is it good?"}], "max_tokens": 64,
            "temperature": 0, "grammar": gbnf, "logprobs": True, "top_logprobs": 20}
    st, _, r = call(a, "POST", "/v1/chat/completions", chat)
    steps = r["choices"][0]["logprobs"]["content"] if st == 200 else []
    text, best = "", True
    for step in steps:
        chosen = step["logprob"]
        for alt in step["top_logprobs"]:
            piece = bytes(alt["bytes"]).decode("utf-8", "replace")
            if alt["logprob"] > chosen and piece and \
                    regex.fullmatch(pattern.pattern, text + piece, partial=True):
                best = False
        text += bytes(step["bytes"]).decode("utf-8", "replace")
    check(st == 200 and steps and best and text == text_of(r)
          and pattern.fullmatch(text) is not None,
          f"chat, greedy: each token the likeliest of those that continue a match ({text!r})")
    st, _, r = call(a, "POST", "/completion", {"prompt": PROMPT, "n_predict": 64,
                                                 "temperature": 0, "grammar": gbnf})
    check(st == 200 and pattern.fullmatch(r.get("content", "")) is not None
          and r["stop_type"] == "eos",
          f"native /completion with a grammar: {r.get('content')!r}, stop_type eos")


def schema_requests(a):
    chat = {"messages": [{"role": "user", "content": "Who was the son of Jacob?"}],
            "max_tokens": 300}
    cases = [
        ("/v1/chat/completions", dict(chat, temperature=0, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                   "schema": PERSON}}), PERSON),
        ("/v1/chat/completions", dict(chat, temperature=1.0, seed=9, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}),
         PERSON),
        ("/v1/chat/completions", dict(chat, temperature=0.7, seed=3, response_format={
            "type": "json_object", "schema": PERSON}), PERSON),
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 300, "temperature": 0.9,
                             "seed": 4, "json_schema": PERSON}, PERSON),
    ]
    for path, body, schema in cases:
        st, _, r = call(a, "POST", path, body)
        text = text_of(r) if st == 200 else repr(r)
        try:
            jsonschema.Draft202012Validator(schema).validate(json.loads(text))
            valid = True
        except (ValueError, jsonschema.ValidationError):
            valid = False
        check(st == 200 and valid and r["choices"][0]["finish_reason"] == "stop",
              f"{path} {list(k for k in body if k in ('response_format', 'json_schema'))}: "
              f"valid JSON under the schema: {text!r}")
    # json_object alone: an object (the demo model may ramble inside a string: the
    # reply is cut at max_tokens, or whole and parsed).
    st, _, r = call(a, "POST", "/v1/chat/completions",
                    dict(chat, temperature=0, max_tokens=200,
                         response_format={"type": "json_object"}))
    text = text_of(r) if st == 200 else ""
    whole = r["choices"][0]["finish_reason"] == "stop" if st == 200 else False
    check(st == 200 and text.startswith("{")
          and (not whole or isinstance(json.loads(text), dict)),
          f"json_object: an object ({'whole' if whole else 'cut at max_tokens'}: {text[:60]!r})")


def beside_free(a):
    free = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0}
    alone = text_of(call(a, "POST", "/v1/completions", free)[2])
    out = {}

    def run(key, body):
        out[key] = call(a, "POST", "/v1/completions", body)

    threads = [threading.Thread(target=run, args=("free", free)),
               threading.Thread(target=run, args=("json", dict(free, max_tokens=400,
                                                               json_schema=PERSON)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(text_of(out["free"][2]) == alone, "a free request beside a constrained one: its text alone")
    jsonschema.validate(json.loads(text_of(out["json"][2])), PERSON)
    check(True, "... and the constrained one valid")


def refusals(a):
    greedy = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    for path, body, words in (
            ("/v1/completions", dict(greedy, grammar="root ::= \"a\" b"), "rule 'b'"),
            ("/v1/completions", dict(greedy, grammar="root ::= [a-"), "line 1, column"),
            ("/v1/completions", dict(greedy, grammar=5), "grammar must be a string"),
            ("/v1/completions", dict(greedy, grammar="root ::= root \"a\" | \"b\""),
             "left recursive"),
            ("/completion", dict(greedy, json_schema={"type": "string", "pattern": "^a"}),
             "pattern"),
            ("/v1/completions", dict(greedy, grammar="root ::= \"a\"", json_schema={}),
             "give one"),
            ("/v1/chat/completions", dict(chat, json_schema={}, response_format={
                "type": "json_object"}), "give one"),
            ("/v1/chat/completions", dict(chat, response_format={
                "type": "json_schema", "json_schema": {"schema": {"not": {}}}}), "'not'"),
            ("/v1/chat/completions", dict(chat, response_format={
                "type": "json_schema", "json_schema": {"schema": {}, "format": 1}}), "format"),
            ("/v1/chat/completions", dict(chat, response_format={"type": "xml"}), "xml"),
            ("/v1/chat/completions", dict(chat, response_format={
                "type": "json_object", "strict": True}), "strict")):
        st, _, r = call(a, "POST", path, body)
        msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else repr(r)
        check(st == 400 and words in msg, f"{path}: 400 naming {words!r} ({msg!r})")


def pi_run(bin_dir, tmp):
    run = [os.path.join(bin_dir, "pi-run"), "-m", MODEL, "-p", PROMPT, "-n", "300", "-t", "2",
           "--json", "--temp", "0.8", "-s", "11"]
    r = subprocess.run(run + ["-j", json.dumps(PERSON)], capture_output=True, text=True,
                       timeout=300)
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    text = out.get("text", "")
    try:
        jsonschema.validate(json.loads(text), PERSON)
        valid = True
    except (ValueError, jsonschema.ValidationError):
        valid = False
    check(valid, f"pi-run -j: valid under the schema ({text!r})")
    path = os.path.join(tmp, "yesno.gbnf")
    with open(path, "w") as f:
        f.write('# yes or no\nroot ::= "yes" | "no"\n')
    r = subprocess.run(run + ["--grammar-file", path], capture_output=True, text=True, timeout=300)
    text = json.loads(r.stdout).get("text") if r.returncode == 0 else r.stderr
    check(text in ("yes", "no"), f"pi-run --grammar-file: {text!r}")
    r = subprocess.run(run + ["--grammar", "root ::= x"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode != 0 and "rule 'x' is used but never defined" in r.stderr
          and "pi-run: model" not in r.stderr,
          f"pi-run --grammar with an error: refused before loading ({r.stderr.strip()!r})")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "1024", "-np", "2",
                   "--chat-template", "chatml")
        check(s.http is not None, "pi-launch --http 127.0.0.1:0 serves")
        grammar_requests(s.http)
        schema_requests(s.http)
        beside_free(s.http)
        refusals(s.http)
        check(s.stop() == 0, "pi-launch stops cleanly")
        pi_run(bin_dir, tmp)
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tool calls through pi-launch --http, against the demo model served with each tool
syntax's template: chatml (Hermes), llama3 (Llama 3.1's), mistral-v3 (Mistral's) and
phi3 (the generic JSON syntax).

- tool_choice required and named (one call: parallel_tool_calls false): finish_reason
  tool_calls, content null, each call's id, name, and arguments a JSON string valid
  under the tool's parameters by python3-jsonschema; streamed, the deltas assembled
  give the same calls as the whole reply (ids aside: each reply makes its own).
- Parallel calls cut by max_tokens (Hermes, Mistral, generic): the whole calls before
  the cut one come back as tool_calls, finish_reason length, whole and streamed.
- tool_choice auto: a reply of text or of calls, each well formed; none: plain text.
- A conversation with the assistant's calls and the tools' results is taken, and
  /apply-template renders the results in the family's own markers (Hermes:
  <tool_response> blocks; Llama 3.1: an ipython turn; Mistral: [TOOL_RESULTS]).
- 400s naming the problem: tools malformed, a bad or repeated name, an unknown named
  tool, tool_choice without tools, a tool message without its id or answering no
  call, tools beside response_format, logprobs with tools, functions, a parameters
  schema outside the subset.

Usage: tool_calls_test.py BIN_DIR
"""

import json
import os
import sys
import tempfile

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
WEATHER_ARGS = {"type": "object",
                "properties": {"city": {"type": "string", "maxLength": 10},
                               "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather",
                                           "parameters": WEATHER_ARGS}},
         {"type": "function", "function": {"name": "now", "parameters": {
             "type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
             "required": ["tz"]}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
       "max_tokens": 300, "temperature": 0, "tools": TOOLS}


def valid_calls(calls):
    for c in calls:
        if not (c["id"].startswith("call_") and c["type"] == "function"):
            return False
        jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[c["function"]["name"]])
    return True


def required_and_named(a, label):
    for choice in ("required", {"type": "function", "function": {"name": "now"}}):
        body = dict(ASK, tool_choice=choice, parallel_tool_calls=False)
        st, _, r = call(a, "POST", "/v1/chat/completions", body)
        c = r["choices"][0] if st == 200 else {}
        m = c.get("message", {})
        calls = m.get("tool_calls", [])
        named = isinstance(choice, dict)
        check(st == 200 and c["finish_reason"] == "tool_calls" and m["content"] is None
              and len(calls) == 1 and valid_calls(calls)
              and (not named or calls[0]["function"]["name"] == "now"),
              f"{label}, tool_choice {choice}: one call, its arguments valid ({calls})")
        st, _, events = stream(a, body, path="/v1/chat/completions")
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        assembled = {}
        for ch in chunks:
            for d in ch["choices"][0]["delta"].get("tool_calls", []) if ch["choices"] else []:
                entry = assembled.setdefault(d["index"], {"name": "", "arguments": ""})
                entry["name"] += d.get("function", {}).get("name", "")
                entry["arguments"] += d.get("function", {}).get("arguments", "")
        whole = [{"name": x["function"]["name"], "arguments": x["function"]["arguments"]}
                 for x in calls]
        check(events[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"].get("role") == "assistant"
              and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
              and [assembled[i] for i in sorted(assembled)] == whole,
              f"{label}, streamed: the deltas assemble to the whole reply's calls")


def cut_calls(a, label):
    """Parallel calls cut by max_tokens: the whole calls before the cut one come back as
    tool_calls with finish_reason length, whole and streamed; cut inside the second call,
    the first alone."""
    body = dict(ASK, tool_choice="required")
    st, _, r = call(a, "POST", "/v1/chat/completions", body)
    c = r["choices"][0] if st == 200 else {}
    calls = c.get("message", {}).get("tool_calls") or []
    check(st == 200 and c["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 300
          and len(calls) >= (1 if label == "generic" else 2) and valid_calls(calls),
          f"{label}, parallel calls cut at 300 tokens: {len(calls)} whole calls kept, "
          f"finish_reason {c.get('finish_reason')}")
    st, _, events = stream(a, body, path="/v1/chat/completions")
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    names = [d["function"]["name"] for ch in chunks if ch["choices"]
             for d in ch["choices"][0]["delta"].get("tool_calls", [])]
    check(events[-1] == "[DONE]" and chunks[-1]["choices"][0]["finish_reason"] == "length"
          and names == [x["function"]["name"] for x in calls],
          f"{label}, the same streamed: {names}, finish_reason length")
    if label == "generic":
        return
    st, _, one = call(a, "POST", "/v1/chat/completions", dict(body, parallel_tool_calls=False))
    n = one["usage"]["completion_tokens"] + 2 if st == 200 else 1
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(body, max_tokens=n))
    c = r["choices"][0] if st == 200 else {}
    first = [{k: x["function"][k] for k in ("name", "arguments")} for x in calls[:1]]
    got = [{k: x["function"][k] for k in ("name", "arguments")}
           for x in c.get("message", {}).get("tool_calls") or []]
    check(st == 200 and c["finish_reason"] == "length" and got == first,
          f"{label}, cut at {n} tokens, inside the second call: the first call alone ({got})")


def auto_and_none(a, label):
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(ASK, tool_choice="auto"))
    m = r["choices"][0]["message"] if st == 200 else {}
    ok = st == 200 and (valid_calls(m.get("tool_calls", [])) if m.get("tool_calls")
                        else isinstance(m.get("content"), str))
    check(ok, f"{label}, auto: text or well-formed calls ({json.dumps(m)[:120]})")
    st, _, events = stream(a, dict(ASK, tool_choice="auto"), path="/v1/chat/completions")
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    streamed = "".join(d.get("content") or "" for d in deltas)
    with_text = sum(1 for d in deltas if d.get("content"))
    check(streamed == (m.get("content") or "") and
          (with_text > 1 or len(streamed) < 20 or label == "generic"),
          f"{label}, auto streamed: the content deltas ({with_text}) add up to the whole content")
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(ASK, tool_choice="none",
                                                            max_tokens=8))
    m = r["choices"][0]["message"] if st == 200 else {}
    check(st == 200 and "tool_calls" not in m and isinstance(m["content"], str),
          f"{label}, none: plain text")


def history(a, label, marker):
    convo = [{"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function",
                  "function": {"name": "get_weather",
                               "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
             {"role": "user", "content": "And tomorrow?"}]
    st, _, r = call(a, "POST", "/v1/chat/completions",
                    {"messages": convo, "tools": TOOLS, "max_tokens": 4})
    check(st == 200, f"{label}: a conversation with calls and results is taken")
    st, _, r = call(a, "POST", "/apply-template", {"messages": convo})
    check(st == 200 and marker in r.get("prompt", "") and "18 degrees" in r.get("prompt", ""),
          f"{label}: /apply-template renders the result ({marker!r})")
    bare = r.get("prompt", "")
    st, _, r = call(a, "POST", "/apply-template", {"messages": convo, "tools": TOOLS})
    check(st == 200 and "The weather" in r.get("prompt", "") and "The weather" not in bare,
          f"{label}: /apply-template with tools writes them into the prompt")


def refusals(a):
    user = [{"role": "user", "content": "hi"}]
    base = {"messages": user, "max_tokens": 4}
    for body, words in (
            (dict(base, tools={"a": 1}), "tools must be an array"),
            (dict(base, tools=[{"type": "function", "function": {"name": "a b"}}]), "name must be"),
            (dict(base, tools=[TOOLS[1], TOOLS[1]]), "a second tool named 'now'"),
            (dict(base, tools=TOOLS, tool_choice={"type": "function",
                                                   "function": {"name": "nope"}}), "'nope'"),
            (dict(base, tool_choice="auto"), "no tools given"),
            (dict(base, tools=TOOLS, tool_choice="sometimes"), "tool_choice must be"),
            (dict(base, tools=TOOLS, tool_choice={"type": 1}), "tool_choice must be"),
            (dict(base, messages=user + [{"role": "tool", "content": "x"}]), "tool_call_id"),
            (dict(base, messages=user + [{"role": "tool", "content": "x", "tool_call_id": "c9"}]),
             "answers no call"),
            (dict(base, tools=TOOLS, response_format={"type": "json_object"}), "give one"),
            (dict(base, tools=TOOLS, logprobs=True), "logprobs with tools"),
            (dict(base, functions=[{"name": "f"}]), "functions"),
            (dict(base, tools=TOOLS, parallel_tool_calls="yes"), "parallel_tool_calls"),
            (dict(base, tools=[{"type": "function", "function": {
                "name": "f", "parameters": {"type": "object", "not": {}}}}]), "'not'"),
            (dict(base, tools=[{"type": "function", "function": {"name": "f", "x": 1}}]),
             "tools[0].function.x")):
        st, _, r = call(a, "POST", "/v1/chat/completions", body)
        msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else repr(r)
        check(st == 400 and words in msg, f"400 naming {words!r} ({msg!r})")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for template, label, marker in (
                ("chatml", "hermes", "<tool_response>"),
                ("llama3", "llama3", "<|start_header_id|>ipython<|end_header_id|>"),
                ("mistral-v3", "mistral", "[TOOL_RESULTS] {\"content\": 18 degrees"),
                ("phi3", "generic", "\"tool_response\"")):
            s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "2048",
                       "--chat-template", template)
            check(s.http is not None, f"pi-launch --chat-template {template} serves")
            required_and_named(s.http, label)
            if label != "llama3":  # (one call a reply)
                cut_calls(s.http, label)
            auto_and_none(s.http, label)
            history(s.http, label, marker)
            if template == "chatml":
                refusals(s.http)
            check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""POST /v1/responses (OpenAI's Responses API) through pi-launch --http on the demo model
with the chatml template, against /v1/chat/completions asked the same:

- instructions and input (a string; items of text parts; a developer message joined to the
  instructions): the output message's text, the status (incomplete at max_output_tokens,
  with its reason) and the usage equal the chat completion's;
- flat function tools with tool_choice required: a function_call item whose arguments are
  valid under the tool's schema (python3-jsonschema); a conversation with function_call and
  function_call_output items answers as the chat with the assistant's calls and the tool's
  result;
- text.format json_schema and json_object: the text is valid JSON (under the schema);
- streamed: "event: TYPE" lines matching each payload's type, sequence numbers 0, 1, ...,
  response.created first, the text's deltas adding up to the whole reply's text, its done
  events, and response.completed / response.incomplete with the whole reply's output; a
  required tool call streamed as output_item.added, function_call_arguments.delta/done;
- 400s naming the field: store, previous_response_id, reasoning, a web_search tool,
  an image part, an unknown field or item type, truncation auto, a bad text.format.

Usage: responses_test.py BIN_DIR
"""

import http.client
import json
import os
import sys
import tempfile

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"]}
FLAT_TOOL = {"type": "function", "name": "get_weather", "description": "The weather",
             "parameters": WEATHER}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather",
                                              "parameters": WEATHER}}


def respond(a, body):
    st, _, r = call(a, "POST", "/v1/responses", dict(body, model="demo-kjv-f16"))
    return st, r


def chat(a, body):
    st, _, r = call(a, "POST", "/v1/chat/completions", body)
    return r if st == 200 else {}


def text_of(r):
    msgs = [o for o in r.get("output", []) if o["type"] == "message"]
    return msgs[0]["content"][0]["text"] if msgs else None


def same_text(a, body, messages, label):
    st, r = respond(a, dict(body, max_output_tokens=12, temperature=0))
    c = chat(a, {"messages": messages, "max_completion_tokens": 12, "temperature": 0})
    choice = c.get("choices", [{}])[0]
    at_limit = choice.get("finish_reason") == "length"
    check(st == 200 and r["object"] == "response" and r["id"].startswith("resp_")
          and text_of(r) == choice.get("message", {}).get("content")
          and r["status"] == ("incomplete" if at_limit else "completed")
          and (r["incomplete_details"] == {"reason": "max_output_tokens"}) == at_limit
          and r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"]
          and r["usage"]["output_tokens"] == c["usage"]["completion_tokens"]
          and r["max_output_tokens"] == 12,
          f"{label}: the chat completion's text, status and usage ({text_of(r)!r})")


def texts(a):
    same_text(a, {"instructions": "Be brief.", "input": "In the beginning"},
              [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "In the beginning"}], "instructions and a string")
    items = [{"role": "developer", "content": "Answer in verse."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "And God said"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Let there be light"}]},
             {"role": "user", "content": "And then?"}]
    same_text(a, {"instructions": "Be brief.", "input": items},
              [{"role": "system", "content": "Be brief.\n\nAnswer in verse."},
               {"role": "user", "content": "And God said"},
               {"role": "assistant", "content": "Let there be light"},
               {"role": "user", "content": "And then?"}], "items, a developer message")


def tools(a):
    st, r = respond(a, {"input": "Weather in Paris?", "tools": [FLAT_TOOL],
                        "tool_choice": "required", "parallel_tool_calls": False,
                        "max_output_tokens": 200, "temperature": 0})
    calls = [o for o in r.get("output", []) if o["type"] == "function_call"]
    ok = st == 200 and len(calls) == 1 and calls[0]["name"] == "get_weather" \
        and calls[0]["call_id"].startswith("call_") and r["tools"] == [FLAT_TOOL]
    if ok:
        jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)
    check(ok, f"tool_choice required: one function_call, its arguments valid ({calls})")
    args = "{\"city\": \"Paris\", \"unit\": \"c\"}"
    st, r = respond(a, {"input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": args},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 degrees"}],
        "tools": [FLAT_TOOL], "tool_choice": "none", "max_output_tokens": 8, "temperature": 0})
    c = chat(a, {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"}],
        "tools": [CHAT_TOOL], "tool_choice": "none", "max_completion_tokens": 8, "temperature": 0})
    check(st == 200 and text_of(r) == c["choices"][0]["message"]["content"],
          f"function_call and function_call_output items: the chat's answer ({text_of(r)!r})")


def formats(a):
    schema = {"type": "object", "properties": {"verse": {"type": "string", "maxLength": 20}},
              "required": ["verse"]}
    for fmt in ({"type": "json_schema", "name": "v", "schema": schema, "strict": True},
                {"type": "json_object"}):
        st, r = respond(a, {"input": "A verse", "text": {"format": fmt},
                            "max_output_tokens": 120, "temperature": 0})
        try:
            value = json.loads(text_of(r))
            if fmt["type"] == "json_schema":
                jsonschema.validate(value, schema)
            ok = st == 200 and isinstance(value, dict) and r["text"] == {"format": fmt}
        except (TypeError, ValueError, jsonschema.ValidationError):
            ok = False
        check(ok, f"text.format {fmt['type']}: valid JSON ({text_of(r)!r})")


def events_of(a, body):
    """(status, [(event line's type, payload)]) of a streamed response."""
    host, port = a.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/responses", body=json.dumps(dict(body, model="demo-kjv-f16",
                                                               stream=True)))
    r = conn.getresponse()
    raw = r.read().decode()
    conn.close()
    out = []
    for block in raw.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        if "data" in lines:
            out.append((lines.get("event"), json.loads(lines["data"])))
    return r.status, r.getheader("Content-Type"), out


def streamed(a):
    body = {"instructions": "Be brief.", "input": "In the beginning", "max_output_tokens": 24,
            "temperature": 0}
    st, whole = respond(a, body)
    st2, ctype, events = events_of(a, body)
    types = [e["type"] for _, e in events]
    text = "".join(e["delta"] for _, e in events if e["type"] == "response.output_text.delta")
    last = events[-1][1] if events else {}
    check(st == 200 and st2 == 200 and ctype.startswith("text/event-stream")
          and all(t == e["type"] for t, e in events)
          and [e["sequence_number"] for _, e in events] == list(range(len(events)))
          and types[:2] == ["response.created", "response.in_progress"]
          and "response.output_text.done" in types and "response.output_item.done" in types
          and text == text_of(whole) and types.count("response.output_text.delta") > 1
          and last["type"] == "response." + ("incomplete" if whole["status"] == "incomplete"
                                             else "completed")
          and text_of(last["response"]) == text_of(whole)
          and last["response"]["usage"] == whole["usage"],
          f"streamed text: the events add up to the whole reply ({len(events)} events)")
    tool_body = {"input": "Weather in Paris?", "tools": [FLAT_TOOL], "tool_choice": "required",
                 "parallel_tool_calls": False, "max_output_tokens": 200, "temperature": 0}
    st, whole = respond(a, tool_body)
    st2, _, events = events_of(a, tool_body)
    done = [e for _, e in events if e["type"] == "response.function_call_arguments.done"]
    added = [e for _, e in events if e["type"] == "response.output_item.added"]
    calls = [o for o in whole.get("output", []) if o["type"] == "function_call"]
    final = [o for o in events[-1][1]["response"]["output"] if o["type"] == "function_call"] \
        if events else []
    check(st == 200 and st2 == 200 and len(done) == 1 and len(calls) == 1
          and done[0]["arguments"] == calls[0]["arguments"]
          and added[-1]["item"]["type"] == "function_call"
          and [c["arguments"] for c in final] == [calls[0]["arguments"]],
          f"streamed tool call: its item and arguments' events ({done[0]['arguments'] if done else None})")


def refusals(a):
    base = {"input": "hi", "max_output_tokens": 4}
    for extra, words in (({"store": True}, "store: stored responses"),
                         ({"previous_response_id": "resp_1"}, "previous_response_id"),
                         ({"reasoning": {"effort": "low"}}, "reasoning"),
                         ({"tools": [{"type": "web_search"}]}, "tools[0]: web_search tools"),
                         ({"input": [{"role": "user", "content": [{"type": "input_image",
                                                                    "image_url": "x"}]}]},
                          "input[0].content[0]: input_image parts"),
                         ({"input": [{"type": "reasoning", "summary": []}]},
                          "input[0]: items of type reasoning"),
                         ({"seed": 3}, "unrecognized request argument: seed"),
                         ({"truncation": "auto"}, "truncation"),
                         ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
                         ({"tools": [FLAT_TOOL], "tool_choice": {"type": "file_search"}},
                          "tool_choice must be"),
                         # (read as a chat body: the errors still in the Responses API's names)
                         ({"max_output_tokens": "x"}, "max_output_tokens must be an integer"),
                         ({"text": {"format": {"type": "json_schema", "name": "s", "schema": {
                             "type": "string", "pattern": "a+"}}}},
                          "text.format: /: keyword 'pattern'")):
        st, r = respond(a, dict(base, **extra))
        msg = (r.get("error") or {}).get("message", "") if isinstance(r, dict) else repr(r)
        check(st == 400 and words in msg, f"400 naming {words!r} ({msg!r})")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "2048", "--chat-template", "chatml")
        check(s.http is not None, "pi-launch serves")
        texts(s.http)
        tools(s.http)
        formats(s.http)
        streamed(s.http)
        refusals(s.http)
        check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

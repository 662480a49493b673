"""The official OpenAI Python SDK against a running pi-launch --http: scripts/sdk_checks.sh
starts one and runs this with PI_URL (http://HOST:PORT), PI_KEY and PI_MODEL set, the SDK
on PYTHONPATH. Each check prints PASS or FAIL; the exit status is 1 when any failed.

Made for the demo model, as check.mjs is (docs/sdk-checks.md): tool parameters are enums,
tool calls ask for one call, and a json_object reply cut by max_tokens inside a string
counts as the model's text.
"""

import asyncio
import json
import math
import os
import sys
import traceback

import openai
from openai import AsyncOpenAI, OpenAI

BASE = os.environ["PI_URL"]
KEY = os.environ["PI_KEY"]
MODEL = os.environ["PI_MODEL"]
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)
results = []

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Rome"]}},
                       "required": ["city"], "additionalProperties": False},
    },
}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
BRIEF = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heaven?"}]
state = {}


def check(name):
    def run(f):
        try:
            detail = f()
            results.append((name, True))
            print(f"PASS {name} {detail or ''}")
        except Exception as e:  # noqa: BLE001 (any failure is the check's)
            results.append((name, False))
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            print(f"FAIL {name}: {tb}")
        return f
    return run


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


@check("models.list")
def _():
    ids = [m.id for m in client.models.list()]
    expect(MODEL in ids, f"ids {ids}")
    return ",".join(ids)


@check("models.retrieve")
def _():
    m = client.models.retrieve(MODEL)
    expect(m.id == MODEL, m)


@check("chat.completions whole")
def _():
    r = client.chat.completions.create(model=MODEL, messages=BRIEF, max_tokens=12, temperature=0,
                                       seed=1)
    text = r.choices[0].message.content
    expect(isinstance(text, str) and text, "empty")
    expect(r.usage.completion_tokens <= 12, r.usage)
    expect(r.system_fingerprint, "no fingerprint")
    state["whole"] = text
    return json.dumps(text)


@check("chat.completions stream equals whole")
def _():
    s = client.chat.completions.create(model=MODEL, messages=BRIEF, max_tokens=12, temperature=0,
                                       seed=1, stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for c in s:
        if c.choices and c.choices[0].delta.content:
            text += c.choices[0].delta.content
        if c.usage:
            usage = c.usage
    expect(text == state.get("whole"), f"{text!r} vs {state.get('whole')!r}")
    expect(usage and usage.completion_tokens > 0, "no usage chunk")


@check("chat.completions n=2 + logprobs")
def _():
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, n=2, seed=3,
                                       logprobs=True, top_logprobs=2)
    expect(len(r.choices) == 2, f"{len(r.choices)} choices")
    content = r.choices[0].logprobs.content
    expect(content and len(content[0].top_logprobs) == 2 and content[0].logprob <= 0, "logprobs")
    expect(all(t.bytes is not None for t in content), "bytes")


@check("chat.completions stream n=2")
def _():
    texts = ["", ""]
    for c in client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, n=2, seed=3,
                                            stream=True):
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
    expect(texts[0] and texts[1], texts)


@check("tools tool_choice required")
def _():
    r = client.chat.completions.create(model=MODEL, messages=MSGS, tools=[WEATHER],
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_tokens=200)
    m = r.choices[0].message
    expect(m.tool_calls, m)
    call = m.tool_calls[0]
    expect(call.function.name == "get_weather", call.function.name)
    expect(isinstance(json.loads(call.function.arguments)["city"], str), call.function.arguments)
    expect(r.choices[0].finish_reason == "tool_calls", r.choices[0].finish_reason)
    state["call"] = call
    return call.function.arguments


@check("tools named, streamed")
def _():
    name, args, call_id, finish = "", "", "", ""
    for c in client.chat.completions.create(
            model=MODEL, messages=MSGS, tools=[WEATHER], parallel_tool_calls=False, max_tokens=200,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True):
        if not c.choices:
            continue
        for t in c.choices[0].delta.tool_calls or []:
            call_id = t.id or call_id
            if t.function:
                name += t.function.name or ""
                args += t.function.arguments or ""
        finish = c.choices[0].finish_reason or finish
    expect(name == "get_weather" and call_id, f"{name} {call_id}")
    json.loads(args)
    expect(finish == "tool_calls", finish)


@check("tools: the tool's answer back")
def _():
    call = state["call"]
    r = client.chat.completions.create(model=MODEL, max_tokens=10, tools=[WEATHER], messages=[
        *MSGS,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"},
    ])
    expect(r.choices[0].message.role == "assistant", r.choices[0])


@check("response_format json_object")
def _():
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give me JSON."}],
                                       response_format={"type": "json_object"}, max_tokens=300)
    if r.choices[0].finish_reason == "length":
        return "cut by max_tokens inside a string (the demo model's text)"
    json.loads(r.choices[0].message.content)


@check("response_format json_schema")
def _():
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "alive"],
              "properties": {"name": {"type": "string", "enum": ["Ruth", "Job"]},
                             "alive": {"type": "boolean"}}}
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A person."}], max_tokens=200,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "strict": True, "schema": schema}})
    p = json.loads(r.choices[0].message.content)
    expect(p["name"] in ("Ruth", "Job") and isinstance(p["alive"], bool), p)
    return json.dumps(p)


@check("completions n=2, two prompts")
def _():
    r = client.completions.create(model=MODEL, prompt=["In the beginning", "And God said"],
                                  max_tokens=5, n=2, seed=5)
    expect([c.index for c in r.choices] == [0, 1, 2, 3], [c.index for c in r.choices])


@check("completions stream + echo")
def _():
    t = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="In the beginning", max_tokens=5, stream=True, echo=True,
        temperature=0) if c.choices)
    expect(t.startswith("In the beginning"), t)


@check("embeddings (the SDK's default encoding)")
def _():
    r = client.embeddings.create(model=MODEL, input="In the beginning")
    e = r.data[0].embedding
    expect(len(r.data) == 1 and len(e) > 16, len(e))
    norm = math.sqrt(sum(x * x for x in e))
    expect(abs(norm - 1) < 1e-3, f"norm {norm}")
    return f"dim {len(e)}"


@check("embeddings float, several")
def _():
    r = client.embeddings.create(model=MODEL, input=["a", "b c"], encoding_format="float")
    expect(len(r.data) == 2 and r.usage.prompt_tokens > 0, r.usage)


@check("async client: chat streamed equals whole")
def _():
    async def run():
        aclient = AsyncOpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)
        s = await aclient.chat.completions.create(model=MODEL, messages=BRIEF, max_tokens=12,
                                                  temperature=0, seed=1, stream=True)
        text = ""
        async for c in s:
            if c.choices and c.choices[0].delta.content:
                text += c.choices[0].delta.content
        await aclient.close()
        return text
    text = asyncio.run(run())
    expect(text == state.get("whole"), f"{text!r} vs {state.get('whole')!r}")


@check("errors: unknown field is an APIError 400 naming it")
def _():
    try:
        client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2,
                                       extra_body={"modalities": ["audio"]})
    except openai.BadRequestError as e:
        expect(e.status_code == 400 and "modalities" in str(e), e)
        return str(e)
    raise AssertionError("accepted")


@check("errors: wrong key is 401 AuthenticationError")
def _():
    bad = OpenAI(base_url=BASE + "/v1", api_key="sk-wrong-0123456789abcdef", max_retries=0)
    try:
        bad.models.list()
    except openai.AuthenticationError:
        return None
    raise AssertionError("accepted")


passed = sum(1 for _, ok in results if ok)
print(f"{passed} of {len(results)} checks pass (openai {openai.__version__})")
sys.exit(0 if passed == len(results) else 1)

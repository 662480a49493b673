#!/usr/bin/env python3
"""Renders conversations, with tools and without, through the models' own Jinja chat
templates (as Hugging Face transformers renders them: python3-jinja2, tojson as
json.dumps) and through pi's /apply-template, and compares the texts byte for byte.

The templates come from a llama.cpp checkout (its models/templates/*.jinja, and Mistral
7B v0.3's from tests/test-chat-template.cpp): Qwen 2.5, Llama 3.1-3.3, Mistral 7B v0.3 and
Nemo with tools; Phi 3.5, Gemma 2 and DeepSeek R1's distills without (and each with
whitespace around the messages, which some templates trim), so this check runs where one
is at hand:

    scripts/check_chat_templates.py LLAMA_CPP_DIR [BIN_DIR]

Each template is written into a copy of the demo model (tokenizer.chat_template), which
pi-launch serves without --chat-template: so the family pi detects in the template is
checked too. Exit 1 when a rendering differs (both texts printed), 0 when all are equal.
"""

import ast
import json
import os
import re
import sys
import tempfile

import jinja2
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import pigguf  # noqa: E402
from http_api_test import call, launch  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "description": "A city, in English"},
                          "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "now", "parameters": {
             "type": "object", "properties": {}}}}]


def conversation(ids, calls):
    """OpenAI's messages (arguments as JSON text) and Hugging Face's (a dict)."""
    made = [{"id": ids[i], "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]
    openai = [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": made}]
    openai += [{"role": "tool", "tool_call_id": ids[i], "content": result}
               for i, result in enumerate(["18 C", "noon"][:len(calls)])]
    openai += [{"role": "assistant", "content": "18 C at noon."},
               {"role": "user", "content": "And Rome?"}]
    hf = json.loads(json.dumps(openai))
    for m in hf:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return openai, hf


PLAIN = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Who are you?"}]
NO_SYSTEM = PLAIN[1:]
# R1's answers carry their thinking, which its template drops from the history.
THINKING = [{"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
            {"role": "user", "content": "And 3+3?"}]


def spaced(messages):
    """The messages with whitespace around their texts (templates that trim remove it)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        if m["role"] in ("system", "user", "assistant") and isinstance(m.get("content"), str):
            m["content"] = " \n" + m["content"] + "  "
    return out


def render(template, messages, tools, eos):
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    kw = {"messages": messages, "add_generation_prompt": True, "bos_token": "",
          "eos_token": eos}
    if tools is not None:
        kw["tools"] = tools
    return env.from_string(template).render(**kw)


def mistral_v03(llama_cpp):
    """Mistral 7B v0.3's template: llama.cpp's chat-template test holds it as a C string."""
    with open(os.path.join(llama_cpp, "tests", "test-chat-template.cpp")) as f:
        src = f.read()
    for m in re.finditer(r'/\* \.template_str= \*/ ("(?:[^"\\]|\\.)*")', src):
        text = ast.literal_eval(m.group(1))
        if "[AVAILABLE_TOOLS] [" in text:
            return text
    raise SystemExit("no Mistral v0.3 template in tests/test-chat-template.cpp")


def main():
    llama_cpp = sys.argv[1]
    bin_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build", "bin")

    def jinja(name):
        with open(os.path.join(llama_cpp, "models", "templates", name)) as f:
            return f.read()

    two_calls = [("get_weather", {"city": "Paris", "unit": "c"}), ("now", {})]
    one_call = two_calls[:1]
    # (pi's template, the model's template, its source, eos, the calls (None: no tools
    # conversation), ids, the plain conversations to check too)
    plain = [("plain", PLAIN), ("plain, spaced", spaced(PLAIN))]
    cases = [
        ("chatml", jinja("Qwen-Qwen2.5-7B-Instruct.jinja"), "Qwen 2.5", "<|im_end|>",
         two_calls, ["call_1", "call_2"], plain),
        ("llama3", jinja("meta-llama-Llama-3.1-8B-Instruct.jinja"), "Llama 3.1", "<|eot_id|>",
         one_call, ["call_1"], []),
        ("llama3", jinja("meta-llama-Llama-3.2-3B-Instruct.jinja"), "Llama 3.2", "<|eot_id|>",
         one_call, ["call_1"], []),
        ("llama3", jinja("meta-llama-Llama-3.3-70B-Instruct.jinja"), "Llama 3.3", "<|eot_id|>",
         one_call, ["call_1"], []),
        ("mistral-v3", mistral_v03(llama_cpp), "Mistral 7B v0.3", "</s>",
         two_calls, ["abcDEF123", "ghiJKL456"], plain),
        ("mistral-v3-tekken", jinja("mistralai-Mistral-Nemo-Instruct-2407.jinja"),
         "Mistral Nemo", "</s>", two_calls, ["abcDEF123", "ghiJKL456"], plain),
        ("phi3", jinja("microsoft-Phi-3.5-mini-instruct.jinja"), "Phi 3.5 mini", "<|endoftext|>",
         None, [], plain),
        ("gemma", jinja("google-gemma-2-2b-it.jinja"), "Gemma 2", "<eos>", None, [],
         [("plain", NO_SYSTEM), ("plain, spaced", spaced(NO_SYSTEM))]),
        ("deepseek-r1", jinja("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
         "DeepSeek R1 Distill Qwen", "", None, [], plain + [("thinking", THINKING)]),
        ("deepseek-r1", jinja("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"),
         "DeepSeek R1 Distill Llama", "", None, [], plain + [("thinking", THINKING)]),
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, template, source, eos, calls, ids, plain in cases:
            model = os.path.join(tmp, "model.gguf")
            pigguf.copy_with_metadata(MODEL, model, tokenizer__chat_template=template)
            server = launch(bin_dir, tmp, "-m", model, "-c", "256")
            st, _, props = call(server.http, "GET", "/props") if server.http else (0, {}, {})
            detected = props.get("chat_template") if st == 200 else None
            failed += detected != name
            print(f"{'ok  ' if detected == name else 'FAIL'} {source}'s template read as "
                  f"{detected} ({name} expected)")
            address = server.http
            checks = []
            if calls is not None:
                openai, hf = conversation(ids, calls)
                checks.append(("tools", openai, hf, TOOLS))
                if name == "llama3":  # (its templates trim the messages, not a tool's result)
                    checks.append(("tools, spaced", spaced(openai), spaced(hf), TOOLS))
            checks += [(what, m, m, None) for what, m in plain]
            for what, messages, hf_messages, tools in checks:
                want = render(template, hf_messages, tools, eos)
                body = {"messages": messages}
                if tools is not None:
                    body["tools"] = tools
                st, _, r = call(address, "POST", "/apply-template", body)
                got = r.get("prompt") if st == 200 else f"HTTP {st}: {r}"
                same = got == want
                failed += not same
                print(f"{'ok  ' if same else 'FAIL'} {name} as {source}'s template, {what}")
                if not same:
                    print(f"  template: {want!r}\n  pi:       {got!r}")
            server.stop()
    print(f"{failed} differ" if failed else "all equal")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

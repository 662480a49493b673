#!/usr/bin/env python3
"""pi-launch --http: several choices in one request (n, and several prompts in one
/v1/completions request), checked with Python's standard library on 127.0.0.1 against the
demo model, one request at a time (-np 1) and batched (-np 3).

Each choice is the answer its prompt gets asked alone: greedy choices equal the single
request's text; a sampled choice k equals the single request with seed + k (the documented
rule), so choices are reproducible and differ. Choices are indexed prompt by prompt, n
each; the usage counts each prompt once and every choice's tokens. Streamed, each choice's
deltas concatenate to its whole text, each choice ends with one chunk carrying its
finish_reason, and with stream_options.include_usage the last chunk before [DONE] carries the
request's usage. Chat completions take n too; echo and logprobs go with each choice. Refused
with a 400 naming the problem: n 0 or over 16, over 16 prompts, more choices than the server
holds at once, suffix with several prompts. A client that leaves
mid-stream cancels every choice: the engine is free for the next request. The prompt is
evaluated once (pi_prompt_tokens_total counts it once; cache_prompt false, each time): the
other choices take its positions and its last token's logits, and their log-probabilities
equal those of an uncached run; the same prompt asked again evaluates nothing. The same
with -np 3 on the device path (--vram-budget with --host-device), where the device's
layers' positions are copied on the gpu worker.

llama-server's prompts: text and token ids mixed in one prompt (each text piece tokenized
alone, BOS before a first one) answer as the ids /tokenize gives their pieces; prompts of
both kinds in one request; several prompts in the native /completion: a list of native
replies indexed in prompt order (streamed: each chunk under its index, each prompt ending
with its "stop" object, no [DONE]); the native response_fields keeps the fields named,
nested ones by path, and "prompt" shows BOS as llama-server does.

Usage: choices_test.py BIN_DIR
"""

import http.client
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
PROMPTS = ["In the beginning God created", "And the LORD spake unto Moses"]


def text(a, body, path="/v1/completions"):
    st, _, r = call(a, "POST", path, body)
    if st != 200:
        return None, None
    c = r["choices"][0]
    return (c["text"] if "text" in c else c["message"]["content"]), r["usage"]


def whole(a, label):
    greedy = {"max_tokens": 12, "temperature": 0}
    alone = [text(a, dict(greedy, prompt=p)) for p in PROMPTS]
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, prompt=PROMPTS[0], n=3))
    check(st == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2]
          and all(c["text"] == alone[0][0] for c in r["choices"])
          and r["usage"]["prompt_tokens"] == alone[0][1]["prompt_tokens"]
          and r["usage"]["completion_tokens"] == 3 * alone[0][1]["completion_tokens"]
          and "timings" not in r,
          f"{label}: n 3 greedy: three choices, each the single request's text; the prompt "
          "counted once")
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, prompt=PROMPTS, n=2))
    want = [alone[0][0], alone[0][0], alone[1][0], alone[1][0]]
    check(st == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
          and [c["text"] for c in r["choices"]] == want
          and r["usage"]["prompt_tokens"] == alone[0][1]["prompt_tokens"]
          + alone[1][1]["prompt_tokens"],
          f"{label}: two prompts, n 2: choices prompt by prompt, each its prompt's text")
    st, _, ids = call(a, "POST", "/tokenize", {"content": PROMPTS[1]})
    st2, _, r = call(a, "POST", "/v1/completions",
                     dict(greedy, prompt=[ids["tokens"], ids["tokens"]]))
    check(st2 == 200 and all(c["text"] == alone[1][0] for c in r["choices"])
          and len(r["choices"]) == 2, f"{label}: prompts as token-id arrays")

    sampled = {"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 1.0, "seed": 7}
    singles = [text(a, dict(sampled, seed=7 + k))[0] for k in range(3)]
    st, _, r = call(a, "POST", "/v1/completions", dict(sampled, n=3))
    got = [c["text"] for c in r["choices"]] if st == 200 else None
    check(got == singles and len(set(got)) > 1,
          f"{label}: sampled n 3 with seed 7: choice k is seed 7 + k's answer, and they differ")
    st, _, r2 = call(a, "POST", "/v1/completions", dict(sampled, n=3, seed=None))
    check(st == 200 and len(r2["choices"]) == 3, f"{label}: n 3 with a random seed")

    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, prompt=PROMPTS, echo=True))
    check(st == 200 and [c["text"] for c in r["choices"]] == [p + t for p, t in
                                                               zip(PROMPTS, [x[0] for x in alone])],
          f"{label}: echo: each choice starts with its own prompt")
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, prompt=PROMPTS[0], n=2, logprobs=2))
    check(st == 200 and all(len(c["logprobs"]["tokens"]) == alone[0][1]["completion_tokens"]
                            for c in r["choices"])
          and r["choices"][0]["logprobs"] == r["choices"][1]["logprobs"],
          f"{label}: logprobs with each choice")

    chat = {"messages": [{"role": "user", "content": "Who made the heaven?"}], "max_tokens": 10,
            "temperature": 0}
    one, _ = text(a, chat, "/v1/chat/completions")
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(chat, n=2))
    check(st == 200 and [c["index"] for c in r["choices"]] == [0, 1]
          and all(c["message"]["content"] == one for c in r["choices"]),
          f"{label}: chat n 2: each choice the single reply")
    return alone


def streamed(a, alone, label):
    greedy = {"max_tokens": 12, "temperature": 0, "prompt": PROMPTS, "n": 2,
              "stream_options": {"include_usage": True}}
    st, ctype, events = stream(a, greedy)
    chunks = [json.loads(e) for e in events[:-1]]
    texts, finishes = {}, {}
    for c in chunks[:-1]:
        for ch in c["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
            if ch["finish_reason"] is not None:
                finishes[ch["index"]] = finishes.get(ch["index"], 0) + 1
    want = {0: alone[0][0], 1: alone[0][0], 2: alone[1][0], 3: alone[1][0]}
    usage = chunks[-1].get("usage") if chunks else None
    check(st == 200 and events[-1] == "[DONE]" and texts == want
          and finishes == {0: 1, 1: 1, 2: 1, 3: 1}
          and chunks[-1]["choices"] == [] and usage is not None
          and usage["completion_tokens"] == 2 * (alone[0][1]["completion_tokens"]
                                                 + alone[1][1]["completion_tokens"])
          and all("usage" not in c for c in chunks[:-1]),
          f"{label}: streamed, two prompts, n 2: each choice's deltas its text, one finish "
          "each, the usage last, [DONE]")
    chat = {"messages": [{"role": "user", "content": "Who made the heaven?"}], "max_tokens": 10,
            "temperature": 0}
    one, _ = text(a, chat, "/v1/chat/completions")
    st, _, events = stream(a, dict(chat, n=2), path="/v1/chat/completions")
    texts, roles = {}, {}
    for e in events[:-1]:
        for ch in json.loads(e)["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["delta"].get("content", "")
            if "role" in ch["delta"]:
                roles[ch["index"]] = roles.get(ch["index"], 0) + 1
    check(st == 200 and events[-1] == "[DONE]" and texts == {0: one, 1: one}
          and roles == {0: 1, 1: 1},
          f"{label}: streamed chat n 2: each choice's role once, its deltas the reply")


def prompt_tokens(a):
    """pi_prompt_tokens_total: prompt tokens evaluated so far."""
    st, _, text_ = call(a, "GET", "/metrics")
    for line in text_.splitlines():
        if line.startswith("pi_prompt_tokens_total "):
            return float(line.split()[1])
    return None


def shared(a, label):
    """The n choices' prompt is evaluated once; the others take its positions and logits,
    bit for bit: their log-probabilities equal an uncached evaluation's."""
    prompt = "Then said Jesus unto them, Verily, verily, I say unto you"
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3}
    before = prompt_tokens(a)
    st, _, r = call(a, "POST", "/v1/completions", dict(body, n=3))
    after = prompt_tokens(a)
    st2, _, alone = call(a, "POST", "/v1/completions", dict(body, cache_prompt=False))
    n_prompt = alone["usage"]["prompt_tokens"]
    want = alone["choices"][0]["logprobs"]
    check(st == 200 and st2 == 200 and all(c["logprobs"] == want for c in r["choices"])
          and after - before == n_prompt,
          f"{label}: n 3: the prompt evaluated once ({after - before:.0f} of {3 * n_prompt} "
          "tokens), each choice's log-probabilities those of an uncached run")
    after = prompt_tokens(a)
    st, _, again = call(a, "POST", "/v1/completions", dict(body, n=1))
    check(st == 200 and again["choices"][0]["logprobs"] == want
          and again["timings"]["prompt_n"] == 0,
          f"{label}: the same prompt asked again: nothing evaluated, the same answer")
    st, _, fresh = call(a, "POST", "/v1/completions", dict(body, n=2, cache_prompt=False))
    check(st == 200 and prompt_tokens(a) - after == 2 * n_prompt
          and all(c["logprobs"] == want for c in fresh["choices"]),
          f"{label}: cache_prompt false: each choice evaluates its prompt")


def refusals(a, label):
    base = {"prompt": PROMPTS[0], "max_tokens": 4}
    for body, words in ((dict(base, n=0), "n"), (dict(base, n=17), "n"),
                        (dict(base, n=12), "at most"),
                        (dict(base, prompt=["a"] * 17), "17 prompts"),
                        (dict(base, prompt=["a", "b"], suffix="c"), "suffix"),
                        (dict(base, prompt=[[1, {"x": 2}]]), "prompt 0")):
        st, _, r = call(a, "POST", "/v1/completions", body)
        msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else repr(r)
        check(st == 400 and words in msg, f"{label}: 400 naming {words!r} ({msg})")
    st, _, r = call(a, "POST", "/completion", dict(base, prompt=["a"] * 17))
    check(st == 400 and "17 prompts" in r["error"]["message"],
          f"{label}: the native /completion takes at most 16 prompts")


def llama_server_prompts(a, label):
    def tokens(t, special):
        return call(a, "POST", "/tokenize", {"content": t, "add_special": special})[2]["tokens"]
    greedy = {"max_tokens": 10, "temperature": 0, "logprobs": 2}
    head, tail = tokens("In the beginning", True), tokens(" God created", False)

    def choice(prompt):
        st, _, r = call(a, "POST", "/v1/completions", dict(greedy, prompt=prompt))
        return (r["choices"][0]["text"], r["choices"][0]["logprobs"]) if st == 200 else st
    plain = choice(head + tail)
    check(plain == choice(head + [" God created"]) and plain == choice([*head, " God created"]),
          f"{label}: ids then text in one prompt: as the ids of its pieces")
    lead = tokens("In the beginning", True) + [1039]
    check(choice(["In the beginning", 1039]) == choice(lead),
          f"{label}: a mixed prompt led by text has BOS")
    st, _, r = call(a, "POST", "/v1/completions",
                    dict(greedy, prompt=[PROMPTS[0], tokens(PROMPTS[1], True)]))
    alone = [choice(PROMPTS[0]), choice(PROMPTS[1])]
    check(st == 200 and [(c["text"], c["logprobs"]) for c in r["choices"]] == alone,
          f"{label}: a text and ids in one request: each as asked alone")
    native = {"n_predict": 8, "temperature": 0}
    one = [call(a, "POST", "/completion", dict(native, prompt=p))[2] for p in PROMPTS]
    st, _, r = call(a, "POST", "/completion",
                    dict(native, prompt=[PROMPTS[0], tokens(PROMPTS[1], True)]))
    check(st == 200 and isinstance(r, list) and [x["index"] for x in r] == [0, 1]
          and [x["content"] for x in r] == [x["content"] for x in one]
          and [x["prompt"] for x in r] == [x["prompt"] for x in one],
          f"{label}: native /completion with two prompts: a list, each as alone")
    st, _, events = stream(a, dict(native, prompt=PROMPTS), path="/completion")
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    got = {0: "", 1: ""}
    ends = []
    for c in chunks:
        got[c["index"]] += c["content"]
        if c["stop"]:
            ends.append(c["index"])
    check(st == 200 and "[DONE]" not in events and sorted(ends) == [0, 1]
          and [got[0], got[1]] == [x["content"] for x in one],
          f"{label}: native stream of two prompts: each under its index, one stop each")
    st, _, r = call(a, "POST", "/completion", dict(native, prompt=PROMPTS[0], response_fields=[
        "content", "generation_settings/n_predict", "prompt", "no/such"]))
    check(st == 200 and sorted(r) == ["content", "generation_settings/n_predict", "prompt"]
          and r["content"] == one[0]["content"] and r["generation_settings/n_predict"] == 8
          and r["prompt"] == "<s> " + PROMPTS[0],
          f"{label}: response_fields: those fields alone ({sorted(r) if st == 200 else st})")


def leaves(a, label):
    """A client gone mid-stream: every choice cancelled, the engine free."""
    host, port = a.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": PROMPTS[0], "max_tokens": 3000, "n": 3, "stream": True, "ignore_eos": True}))
    r = conn.getresponse()
    r.fp.readline()  # the first chunk's size line: it runs
    conn.sock.close()
    conn.close()
    idle = False
    for _ in range(300):
        st, _, h = call(a, "GET", "/health")
        if st == 200 and h["running"] == 0 and h["queued"] == 0:
            idle = True
            break
        time.sleep(0.1)
    got, _ = text(a, {"prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0})
    check(idle and got is not None, f"{label}: a client gone mid-stream cancels all its choices")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("-np 1", []), ("-np 3", ["-np", "3"])):
            s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "4096", "--chat-template",
                       "chatml", *extra)
            check(s.http is not None, f"{label}: pi-launch --http serves")
            if s.http is None:
                break
            try:
                alone = whole(s.http, label)
                streamed(s.http, alone, label)
                shared(s.http, label)
                refusals(s.http, label)
                llama_server_prompts(s.http, label)
                leaves(s.http, label)
            finally:
                check(s.stop() == 0, f"{label}: pi-launch stops cleanly")
        # The device path: the device's layers' positions are copied on the gpu worker.
        label = "-np 3, the device path (--host-device)"
        s = launch(bin_dir, tmp, "-m", demo_down_t(bin_dir, tmp, profile=True), "-t", "2", "-c",
                   "1024", "--chat-template", "chatml", "-np", "3", "--vram-budget", "8M",
                   "--host-device")
        check(s.http is not None, f"{label}: pi-launch --http serves")
        if s.http is not None:
            try:
                shared(s.http, label)
            finally:
                check(s.stop() == 0, f"{label}: pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

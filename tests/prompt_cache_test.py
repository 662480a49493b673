#!/usr/bin/env python3
"""Prompt caching (coordinator/engine/prompt_cache.h) through pi-launch's HTTP API: a
sequence's KV cache keeps its last prompt, and the next request evaluates only what
follows the prefix they share. The answers must be the uncached ones bit for bit.

On the demo model, for the serial scheduler and for continuous batching (-np 2), with
small prompt chunks (-b 7 and -b 3, so the cached prefixes end inside a chunk) and the
sparse modes whose decode steps differ from a prompt's (the default: its predictors;
oracle): a four-turn chat, each turn asked with the cache (the default) and with
"cache_prompt": false, in turn. Each pair must have the same text, token log-probabilities
(the logits' log-softmax, compared exactly) and usage; the cached turns after the first
must evaluate fewer prompt tokens (timings.prompt_n) than the prompt has; with -np 2 two
conversations interleaved each find their own sequence again. The same on the device path
(--vram-budget with --host-device: the device's layers and KV cache in a gpu worker
process, the prompt's tokens sent one at a time, dense where the host would batch them).

Usage: prompt_cache_test.py BIN_DIR
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
TURNS = ["In the beginning God created", "And the earth", "Let there be light",
         "And God saw the light"]


def ask(a, messages, cached):
    body = {"messages": messages, "max_tokens": 10, "temperature": 0, "logprobs": True,
            "top_logprobs": 2}
    if not cached:
        body["cache_prompt"] = False
    st, _, r = call(a, "POST", "/v1/chat/completions", body)
    return r if st == 200 else None


def conversation(a, label, others=None):
    """Four turns; each asked cached and uncached. `others`: another conversation's
    (address, messages) to interleave a turn of between this one's."""
    messages = []
    for turn, text in enumerate(TURNS):
        messages.append({"role": "user", "content": text})
        cached = ask(a, messages, True)
        if others is not None:
            ask(a, others, True)  # another conversation takes a sequence meanwhile
        plain = ask(a, messages, False)
        same = (cached is not None and plain is not None
                and cached["choices"][0]["message"] == plain["choices"][0]["message"]
                and cached["choices"][0]["logprobs"] == plain["choices"][0]["logprobs"]
                and cached["usage"] == plain["usage"])
        check(same, f"{label}, turn {turn + 1}: cached == uncached, log-probabilities exactly")
        if cached is None:
            return
        prompt_n, tokens = cached["timings"]["prompt_n"], cached["usage"]["prompt_tokens"]
        if turn > 0:
            check(prompt_n < tokens and plain["timings"]["prompt_n"] == tokens,
                  f"{label}, turn {turn + 1}: {prompt_n} of {tokens} prompt tokens evaluated "
                  f"(uncached: {plain['timings']['prompt_n']})")
        messages.append({"role": "assistant", "content": cached["choices"][0]["message"]["content"]})


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        for model, args, label in (
                (MODEL, ["-b", "7"], "serial, -b 7, predictors"),
                (MODEL, ["-b", "3", "--sparse", "oracle"], "serial, -b 3, oracle"),
                (MODEL, ["-np", "2", "-b", "7", "--sparse", "oracle"], "-np 2, -b 7, oracle"),
                (demo_t, ["-b", "5", "--sparse", "oracle", "--vram-budget", "8M", "--host-device"],
                 "the device path (--host-device, a gpu worker), -b 5, oracle")):
            s = launch(bin_dir, tmp, "-m", model, "-t", "2", "-c", "1024", "--chat-template",
                       "chatml", "--cpu-workers", "0", *args)
            check(s.http is not None, f"pi-launch {' '.join(args)}")
            other = [{"role": "user", "content": "And God said"}] if "-np" in args else None
            conversation(s.http, label, other)
            check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

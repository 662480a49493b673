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

The prompt store (--cache-ram): serial and -np 2, on the host path and the device path
(the device's layers' part of an entry kept in the gpu worker), a conversation whose
sequence another conversation took finds its prefix in the store (fewer prompt tokens
evaluated, the same answer exactly); with --cache-ram 0 it evaluates all; a 1 MiB store holds one of three
~250-token prompts (the last let go comes back, the oldest is evicted) and /metrics says so.

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


def metric(a, name):
    st, _, text = call(a, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def turn(a, messages, label):
    """One turn asked with the cache, then without: the same answer, log-probabilities
    exactly; returns (prompt tokens evaluated, prompt tokens, the reply's text)."""
    cached = ask(a, messages, True)
    plain = ask(a, messages, False)
    same = (cached is not None and plain is not None
            and cached["choices"][0]["message"] == plain["choices"][0]["message"]
            and cached["choices"][0]["logprobs"] == plain["choices"][0]["logprobs"])
    check(same, f"{label}: cached == uncached, log-probabilities exactly")
    if not same:
        return -1, 0, ""
    return (cached["timings"]["prompt_n"], cached["usage"]["prompt_tokens"],
            cached["choices"][0]["message"]["content"])


def store(bin_dir, tmp, demo_t):
    """--cache-ram: a prompt whose sequence another conversation took comes back from the
    store, on the host path and the device path (the device's layers' part kept in the gpu
    worker); evicted past the cap; off with 0."""
    lines = open(os.path.join(ROOT, "models", "kjv-valid.txt")).read().splitlines()
    common = ["-t", "2", "-c", "1024", "--chat-template", "chatml", "--cpu-workers", "0",
              "-b", "7", "--sparse", "oracle"]
    base = ["-m", MODEL, *common]
    device = ["-m", demo_t, *common, "--vram-budget", "8M", "--host-device"]
    for args, label in ((base + ["--cache-ram", "64"], "serial, --cache-ram 64"),
                        (base + ["--cache-ram", "64", "-np", "2"], "-np 2, --cache-ram 64"),
                        (base + ["--cache-ram", "0"], "serial, --cache-ram 0"),
                        (device + ["--cache-ram", "64"], "device path, serial, --cache-ram 64"),
                        (device + ["--cache-ram", "64", "-np", "2"],
                         "device path, -np 2, --cache-ram 64")):
        s = launch(bin_dir, tmp, *args)
        check(s.http is not None, f"pi-launch {label}")
        talks = [[{"role": "user", "content": t}] for t in
                 ("In the beginning God created", "And God said", "Let there be light")]
        firsts = []
        for i, m in enumerate(talks[:(3 if "-np" in args else 2)]):
            _, _, text = turn(s.http, m, f"{label}: conversation {i + 1}, turn 1")
            firsts.append(text)
            m += [{"role": "assistant", "content": text}]
        talks[0].append({"role": "user", "content": "And the earth"})
        n, tokens, _ = turn(s.http, talks[0], f"{label}: conversation 1, turn 2")
        # (Conversations share the template's opening: a chunk or two from the sequence.)
        kept = args[args.index("--cache-ram") + 1] != "0"
        check((n < tokens - 20) if kept else (n > tokens - 20),
              f"{label}: conversation 1's turn 2 after the others: {n} of {tokens} prompt tokens "
              f"evaluated ({'its prefix from the store' if kept else 'nothing kept'})")
        prompts = metric(s.http, "pi_prompt_store_prompts")
        check((prompts >= 1) if kept else (prompts == 0 and metric(s.http, "pi_prompt_store_bytes") == 0),
              f"{label}: /metrics: {prompts} prompts in the store")
        check(s.stop() == 0, "pi-launch stops cleanly")

    # Past the cap: a 1 MiB store holds one of these ~250-token prompts (3 KiB a position).
    s = launch(bin_dir, tmp, *base, "--cache-ram", "1")
    talks = [[{"role": "user", "content": " ".join(lines[6 * i:6 * i + 6])}] for i in range(3)]
    sizes = []
    for i, m in enumerate(talks):
        _, tokens, text = turn(s.http, m, f"--cache-ram 1: conversation {i + 1}, turn 1")
        sizes.append(tokens)
        m += [{"role": "assistant", "content": text}, {"role": "user", "content": "And God said"}]
    check(all(200 <= t <= 320 for t in sizes) and metric(s.http, "pi_prompt_store_prompts") == 1
          and metric(s.http, "pi_prompt_store_bytes") <= 1 << 20,
          f"--cache-ram 1: one prompt kept within 1 MiB (prompts of {sizes} tokens)")
    n, tokens, _ = turn(s.http, talks[1], "--cache-ram 1: conversation 2, turn 2")
    check(n < tokens - 200, f"--cache-ram 1: the last prompt let go comes back ({n} of {tokens})")
    n, tokens, _ = turn(s.http, talks[0], "--cache-ram 1: conversation 1, turn 2")
    check(n > tokens - 20, f"--cache-ram 1: the oldest was evicted ({n} of {tokens} evaluated)")
    check(s.stop() == 0, "pi-launch stops cleanly")


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
        store(bin_dir, tmp, demo_t)
    finish()


if __name__ == "__main__":
    main()

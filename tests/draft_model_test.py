#!/usr/bin/env python3
"""Speculative decoding through pi-launch (--model-draft; coordinator/engine/speculative.h).

The demo model served with the smaller SiLU demo model (the same vocabulary) as its draft:
greedy answers of the native /completion and of chat, whole and streamed, equal those of
the same server without a draft, as llama.cpp's test_speculative asks; pi-run says how many
proposals it took. Refused at start, naming why: -np 2 (drafting is one request at a time),
the device path (--vram-budget: a device evaluates a run token by token), a draft of another
vocabulary, --draft-max 0. A request's speculative.n_max/.n_min/.p_min (llama-server's) tune
its drafting, and are refused, naming why, where nothing drafts.

Usage: draft_model_test.py BIN_DIR
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
DRAFT = os.path.join(ROOT, "models", "demo-silu-kjv-f16.gguf")
PROMPTS = ["And God said", "In the beginning God created the heaven", "The LORD is my shepherd"]


def answers(address):
    out = []
    for p in PROMPTS:
        st, _, r = call(address, "POST", "/completion",
                        {"prompt": p, "n_predict": 40, "temperature": 0, "top_k": 1})
        out.append(r["content"] if st == 200 else f"status {st}: {r}")
    body = {"messages": [{"role": "user", "content": "Who made the heaven?"}], "max_tokens": 24,
            "temperature": 0}
    st, _, r = call(address, "POST", "/v1/chat/completions", body)
    out.append(r["choices"][0]["message"]["content"] if st == 200 else f"status {st}: {r}")
    _, _, events = stream(address, body, path="/v1/chat/completions")
    out.append("".join((json.loads(e)["choices"][0]["delta"].get("content") or "")
                       for e in events if e != "[DONE]" and json.loads(e)["choices"]))
    return out


def refused(bin_dir, args, words, what):
    p = subprocess.run([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    check(p.returncode != 0 and words in p.stderr,
          f"{what}: exit {p.returncode}, {p.stderr.strip().splitlines()[-1:] if p.stderr else ''}")


def main():
    bin_dir = sys.argv[1]
    base = ["-m", MODEL, "-t", "2", "-c", "512", "--cpu-workers", "0", "--sparse", "off",
            "--chat-template", "chatml"]
    with tempfile.TemporaryDirectory() as tmp:
        s = launch(bin_dir, tmp, *base)
        plain = answers(s.http)
        for path, body in (("/completion", {"prompt": "x", "n_predict": 2, "speculative.p_min": 0}),
                           ("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                             "speculative.n_max": 4})):
            st, _, r = call(s.http, "POST", path, body)
            check(st == 400 and "this server has none" in r["error"]["message"],
                  f"speculative.* without a draft model, {path}: {st}")
        check(s.stop() == 0, "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, *base, "-np", "2")
        st, _, r = call(s.http, "POST", "/completion",
                        {"prompt": "x", "n_predict": 2, "speculative.n_min": 1})
        check(st == 400 and "this server has none" in r["error"]["message"],
              f"speculative.* with -np 2: {st} {r}")
        st, _, r = call(s.http, "POST", "/completion", {"prompt": "x", "n_predict": 2})
        check(st == 200, "the next request runs")
        check(s.stop() == 0, "pi-launch stops cleanly")
        for extra in (["--draft-p-min", "0", "--draft-max", "4"], ["--draft-p-min", "0.5"]):
            s = launch(bin_dir, tmp, *base, "-md", DRAFT, *extra)
            drafted = answers(s.http)
            check(drafted == plain and all(len(a) > 20 for a in plain),
                  f"{' '.join(extra)}: the answers equal those without a draft ({drafted[0]!r})")
            check("draft model" in s.stderr(), "pi-launch names the draft model")
            st, _, r = call(s.http, "POST", "/completion",
                            {"prompt": PROMPTS[0], "n_predict": 40, "temperature": 0,
                             "speculative.n_max": 2, "speculative.p_min": 0.1})
            check(st == 200 and r["content"] == plain[0], "a request's speculative.* fields")
            st, _, r = call(s.http, "POST", "/completion",
                            {"prompt": "x", "speculative.p_min": 2})
            check(st == 400 and "speculative.p_min" in r["error"]["message"],
                  f"speculative.p_min 2: {st} {r}")
            check(s.stop() == 0, "pi-launch stops cleanly")
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", MODEL, "-md", DRAFT,
                            "--draft-p-min", "0", "--draft-max", "4", "-p", PROMPTS[0], "-n", "40",
                            "--temp", "0", "--sparse", "off", "-t", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        line = [x for x in p.stderr.splitlines() if "speculative:" in x]
        check(p.returncode == 0 and line and "accepted" in line[0] and
              p.stdout.strip().endswith(plain[0].strip()), f"pi-run -md: {line}")

        refused(bin_dir, [*base, "-md", DRAFT, "-np", "2"], "give -np 1", "-np 2")
        refused(bin_dir, [*base, "-md", DRAFT, "--draft-max", "0"], "--draft-max must be",
                "--draft-max 0")
        other = os.path.join(tmp, "bytes.gguf")
        subprocess.run([os.path.join(bin_dir, "pi-synth"), "-o", other, "--n-vocab", "300",
                        "--n-embd", "64", "--n-layer", "1", "--n-ff", "128", "--n-head", "2",
                        "--tokenizer", "bytes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        refused(bin_dir, [*base, "-md", other], "(at most 128 apart)", "a draft of another vocabulary")
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        refused(bin_dir, ["-m", demo_t, "-c", "256", "--cpu-workers", "0", "--vram-budget", "8M",
                          "--host-device", "-md", DRAFT], "layers run on a GPU", "the device path")
    finish()


if __name__ == "__main__":
    main()

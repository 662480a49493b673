#!/usr/bin/env python3
"""Fill-in-the-middle through pi-launch --http: llama-server's POST /infill and OpenAI's
`suffix`, on a copy of the demo model whose metadata names three of its tokens as the FIM
markers (tokenizer.ggml.fim_pre/suf/mid_token_id).

- /infill's answer equals POST /completion's for the prompt built here, token by token,
  from /tokenize's pieces: [BOS] [PRE] prefix prompt [SUF] suffix [MID] (with
  --spm-infill: [SUF] suffix [PRE] prefix prompt), the other files (input_extra) before
  them after snippet lines; streamed, the chunks add up to the whole.
- /v1/completions with a suffix answers what /infill does for that prefix and suffix.
- A prefix too long for the context keeps its end and says truncated.
- 400s naming the problem: fields of the wrong type or unknown, a suffix with token ids or
  echo, and, on the demo model itself (no FIM markers), /infill and a suffix.

Usage: infill_http_test.py BIN_DIR
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import pigguf  # noqa: E402
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
PRE, SUF, MID = 100, 101, 102
SETTINGS = {"n_predict": 12, "temperature": 0, "cache_prompt": False}


def tokens(a, text):
    st, _, r = call(a, "POST", "/tokenize", {"content": text})
    return r["tokens"] if st == 200 and text else []


def expected_prompt(a, prefix, suffix, prompt="", extra=(), spm=False):
    bos = call(a, "POST", "/tokenize", {"content": "x", "add_special": True})[2]["tokens"][:1]
    snippets = []
    for f in extra:
        snippets += tokens(a, "\n\n--- snippet ---\n\n") + tokens(a, f["text"])
    pre = [PRE] + tokens(a, prefix) + tokens(a, prompt)
    suf = [SUF] + tokens(a, suffix)
    return bos + snippets + (suf + pre if spm else pre + suf) + [MID]


def same_as_completion(a, body, ids, label):
    st, _, r = call(a, "POST", "/infill", dict(SETTINGS, **body))
    st2, _, want = call(a, "POST", "/completion", dict(SETTINGS, prompt=ids))
    check(st == 200 and st2 == 200 and r["content"] == want["content"]
          and r["tokens_evaluated"] == len(ids) and not r["truncated"],
          f"{label}: /infill answers /completion's answer to the prompt built here "
          f"({r.get('content')!r}, {len(ids)} tokens)")
    return r


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        fim = os.path.join(tmp, "demo-fim.gguf")
        pigguf.copy_with_metadata(MODEL, fim, tokenizer__ggml__fim_pre_token_id=PRE,
                                  tokenizer__ggml__fim_suf_token_id=SUF,
                                  tokenizer__ggml__fim_mid_token_id=MID)
        s = launch(bin_dir, tmp, "-m", fim, "-t", "2", "-c", "256")
        a = s.http
        check(a is not None, "pi-launch serves the model with FIM markers")
        body = {"input_prefix": "In the beginning God created", "input_suffix": "the earth.",
                "prompt": " the heaven"}
        r = same_as_completion(a, body, expected_prompt(a, body["input_prefix"],
                                                        body["input_suffix"], body["prompt"]),
                               "prefix, prompt and suffix")
        st, _, events = stream(a, dict(SETTINGS, **body), path="/infill")
        chunks = [json.loads(e) for e in events]
        check(st == 200 and "".join(c["content"] for c in chunks) == r["content"]
              and chunks[-1]["stop"],
              "streamed: the chunks add up to the whole answer")
        extra = [{"filename": "gen.txt", "text": "And God said"}, {"text": "Let there be"}]
        same_as_completion(a, dict(body, input_extra=extra),
                           expected_prompt(a, body["input_prefix"], body["input_suffix"],
                                           body["prompt"], extra),
                           "other files after snippet lines")
        st, _, c = call(a, "POST", "/v1/completions",
                        {"prompt": body["input_prefix"], "suffix": body["input_suffix"],
                         "max_tokens": 12, "temperature": 0})
        st2, _, i = call(a, "POST", "/infill", dict(SETTINGS, input_prefix=body["input_prefix"],
                                                    input_suffix=body["input_suffix"]))
        check(st == 200 and st2 == 200 and c["choices"][0]["text"] == i["content"],
              f"/v1/completions with a suffix answers as /infill ({i.get('content')!r})")
        long_prefix = "And the evening and the morning were the first day. " * 40
        st, _, r = call(a, "POST", "/infill", dict(SETTINGS, input_prefix=long_prefix,
                                                   input_suffix="x"))
        check(st == 200 and r["truncated"] and r["tokens_evaluated"] <= 256 - 12,
              f"a prefix over the context: its end kept, truncated ({r.get('tokens_evaluated')} "
              "tokens)")
        for bad, words in (({"input_prefix": 5}, "input_prefix must be a string"),
                           ({"input_extra": {"text": "x"}}, "input_extra must be an array"),
                           ({"input_extra": [{"text": "x", "lang": "py"}]},
                            "input_extra[0].lang: unrecognized field"),
                           ({"input_extra": [{"text": 1}]}, "input_extra[0].text must be"),
                           ({"input_extra": [{"filename": "a.py"}]},
                            "input_extra[0].text is required"),
                           ({"suffix": "x"}, "unrecognized request argument: suffix")):
            st, _, r = call(a, "POST", "/infill", dict(SETTINGS, **bad))
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(st == 400 and words in msg, f"/infill: 400 naming {words!r} ({msg!r})")
        for bad, words in (({"prompt": [1, 2], "suffix": "x"}, "the prompt must be text"),
                           ({"prompt": "a", "suffix": "x", "echo": True}, "echo: with suffix"),
                           ({"prompt": "a", "suffix": 3}, "suffix must be a string")):
            st, _, r = call(a, "POST", "/v1/completions", dict(bad, max_tokens=4))
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(st == 400 and words in msg, f"suffix: 400 naming {words!r} ({msg!r})")
        check(s.stop() == 0, "pi-launch stops cleanly")

        s = launch(bin_dir, tmp, "-m", fim, "-t", "2", "-c", "256", "--spm-infill")
        same_as_completion(s.http, body, expected_prompt(s.http, body["input_prefix"],
                                                         body["input_suffix"], body["prompt"],
                                                         spm=True),
                           "--spm-infill: the suffix first")
        check(s.stop() == 0, "pi-launch stops cleanly")

        s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "256")
        for path, req in (("/infill", {"input_prefix": "a", "input_suffix": "b"}),
                          ("/v1/completions", {"prompt": "a", "suffix": "b"})):
            st, _, r = call(s.http, "POST", path, dict(req, max_tokens=4))
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(st == 400 and "no fill-in-the-middle tokens" in msg,
                  f"a model without FIM markers: {path} is a 400 saying so ({msg!r})")
        check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

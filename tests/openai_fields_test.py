#!/usr/bin/env python3
"""pi-launch --http: each OpenAI request field, checked with Python's standard library on
127.0.0.1 against the demo model (--chat-template chatml). A field is either honoured or
refused with a 400 that names it; none is skipped.

- Refused by name: functions, function_call (the deprecated ones; tools:
  tool_calls_test.py), suffix, best_of, n_probs, post_sampling_probs, store, metadata, an
  unknown field; a
  response_format schema keyword outside the subset (structured_output_test.py has the
  rest); image content parts; a tool message answering no call, malformed
  tool_calls; n over 16; over 16 prompts (choices_test.py has n and several prompts);
  stream_options without stream; echo with logprobs.
- Honoured: max_completion_tokens (the count; differing from max_tokens is a 400);
  response_format text; content as text parts (joined by newlines, as llama-server does)
  and an assistant's null content; the developer role (rendered as system); logit_bias
  (OpenAI's object and llama-server's pairs; a ban changes the first token, a boost of
  +100 makes every token the boosted one); presence_penalty and frequency_penalty
  (the same tokens as pi-run's --presence-penalty / --frequency-penalty, which
  check_pi_run.py holds against an independent sampler; out of range a 400); echo
  (whole and streamed); stream_options.include_usage (a last chunk with no choices and
  the usage); user; cache_prompt; GET /v1/models/{id}; system_fingerprint in replies
  and chunks; timings_per_token (llama-server's: each streamed chunk, native, chat and
  completions, carries the timings so far: predicted_n counting 1, 2, ... and the
  prompt's count the last object's; a whole reply as without it); the native
  /completion's post_sampling_probs ("prob" and "top_probs": greedy, the token 1 and the
  alternatives 0; sampled with top_k 3, the survivors' probabilities summing to 1);
  --verbose's "__verbose" (the native reply of the same generation) in whole replies.

Usage: openai_fields_test.py BIN_DIR
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch, stream  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
PROMPT = "In the beginning God created"


def error(address, path, body):
    """(status, error message) of a request expected to fail."""
    st, _, r = call(address, "POST", path, body)
    return st, r["error"]["message"] if isinstance(r, dict) and "error" in r else repr(r)


def refusals(a, greedy, chat):
    for field, value, path in (
            ("functions", [{"name": "f"}], "chat"), ("function_call", "auto", "chat"),
            ("suffix", "the end", "completions"), ("best_of", 2, "completions"),
            ("n_probs", 3, "completions"), ("post_sampling_probs", True, "completions"),
            ("store", True, "chat"), ("metadata", {}, "chat"),
            ("no_such_field", 1, "completions"), ("no_such_field", 1, "chat")):
        body = dict(chat if path == "chat" else greedy, **{field: value})
        st, msg = error(a, f"/v1/{'chat/' if path == 'chat' else ''}completions", body)
        check(st == 400 and field in msg, f"{field} on {path}: 400 naming it ({msg!r})")
    for body, path, words in (
            (dict(chat, response_format={"type": "json_schema", "json_schema": {
                "schema": {"type": "string", "pattern": "a+"}}}), "chat", "pattern"),
            (dict(chat, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]), "chat",
             "image_url"),
            (dict(chat, messages=[{"role": "tool", "content": "42", "tool_call_id": "c"}]), "chat",
             "tool"),
            (dict(chat, messages=[{"role": "assistant", "content": None, "tool_calls": [{"id": 1}]}]),
             "chat", "tool_calls[0]"),
            (dict(chat, messages=[{"role": "user", "content": "hi", "name": "bob"}]), "chat",
             "name"),
            (dict(chat, messages=[{"role": "user", "content": None}]), "chat", "null"),
            (dict(chat, max_tokens=4, max_completion_tokens=5), "chat", "max_completion_tokens"),
            (dict(chat, presence_penalty=2.5), "chat", "presence_penalty"),
            (dict(greedy, frequency_penalty=-3), "completions", "frequency_penalty"),
            (dict(greedy, logit_bias={"abc": 1}), "completions", "logit_bias"),
            (dict(greedy, logit_bias={"5": 101}), "completions", "logit_bias"),
            (dict(greedy, logit_bias={"99999999": 1}), "completions", "vocabulary"),
            (dict(greedy, n=17), "completions", "n"),
            (dict(greedy, prompt=["a"] * 17), "completions", "17 prompts"),
            (dict(greedy, stream_options={"include_usage": True}), "completions", "stream"),
            (dict(greedy, echo=True, logprobs=1), "completions", "echo"),
            (dict(greedy, user=5), "completions", "user")):
        st, msg = error(a, f"/v1/{'chat/' if path == 'chat' else ''}completions", body)
        check(st == 400 and words in msg, f"400 naming {words!r} ({msg!r})")


def chat_fields(a, chat):
    st, _, base = call(a, "POST", "/v1/chat/completions", chat)
    text = base["choices"][0]["message"]["content"] if st == 200 else None
    check(st == 200 and base.get("system_fingerprint", "").startswith("b"),
          f"a chat reply with its system_fingerprint ({base.get('system_fingerprint')!r})")
    st, _, r = call(a, "POST", "/v1/chat/completions",
                    dict(chat, max_tokens=None, max_completion_tokens=3))
    check(st == 200 and r["usage"]["completion_tokens"] == 3, "max_completion_tokens 3: 3 tokens")
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(chat, response_format={"type": "text"}))
    check(st == 200 and r["choices"][0]["message"]["content"] == text,
          "response_format text: the same reply")
    # Text parts are joined by a newline; a developer message is the system's.
    system, user = chat["messages"]
    parts = dict(chat, messages=[system, {"role": "user", "content": [
        {"type": "text", "text": "In the"}, {"type": "text", "text": "beginning"}]}])
    joined = dict(chat, messages=[system, {"role": "user", "content": "In the\nbeginning"}])
    r1 = call(a, "POST", "/v1/chat/completions", parts)[2]
    r2 = call(a, "POST", "/v1/chat/completions", joined)[2]
    check(r1["choices"][0]["message"]["content"] == r2["choices"][0]["message"]["content"]
          and r1["usage"] == r2["usage"], "content parts == their text joined by newlines")
    dev = dict(chat, messages=[dict(system, role="developer"), user])
    r = call(a, "POST", "/v1/chat/completions", dev)[2]
    check(r["choices"][0]["message"]["content"] == text and r["usage"] == base["usage"],
          "a developer message is rendered as the system's")
    history = dict(chat, messages=[system, user, {"role": "assistant", "content": None}, user])
    st, _, r = call(a, "POST", "/v1/chat/completions", history)
    check(st == 200, "an assistant message with content null is taken")
    st, _, r = call(a, "POST", "/v1/chat/completions", dict(chat, user="u-1", cache_prompt=True))
    check(st == 200 and r["choices"][0]["message"]["content"] == text,
          "user and cache_prompt: the same reply")


def completion_fields(a, greedy, bin_dir):
    st, _, base = call(a, "POST", "/v1/completions", dict(greedy, logprobs=0))
    check(st == 200, "the greedy completion")
    tokens = base["choices"][0]["logprobs"]["tokens"]
    text = base["choices"][0]["text"]
    p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", MODEL, "-p", PROMPT, "-n", "1",
                        "--temp", "0", "--json"], capture_output=True, text=True, timeout=120)
    first = json.loads(p.stdout)["generated_tokens"][0]
    for bias in ({str(first): -100}, [[first, False]]):
        st, _, r = call(a, "POST", "/v1/completions", dict(greedy, logit_bias=bias, logprobs=0))
        got = r["choices"][0]["logprobs"]["tokens"] if st == 200 else None
        check(st == 200 and got[0] != tokens[0],
              f"logit_bias {bias}: the first token is no longer {tokens[0]!r} ({got and got[0]!r})")
    boost = call(a, "POST", "/tokenize", {"content": " God"})[2]["tokens"][-1]
    piece = call(a, "POST", "/detokenize", {"tokens": [boost]})[2]["content"]
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, logit_bias={str(boost): 100},
                                                        logprobs=0, max_tokens=5))
    got = r["choices"][0]["logprobs"]["tokens"] if st == 200 else None
    check(st == 200 and len(got) == 5 and all(t.strip() == piece.strip() for t in got),
          f"logit_bias +100: every token is token {boost} ({got})")
    # An end of text forced first: no text, no completion tokens, but one token sampled
    # (timings.predicted_n counts it, as llama-server's does).
    import sentencepiece as spm  # noqa: E402
    eos = spm.SentencePieceProcessor(
        model_file=os.path.join(ROOT, "models", "demo-tokenizer.model")).eos_id()
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, logit_bias={str(eos): 100}))
    check(st == 200 and r["choices"][0]["text"] == "" and r["choices"][0]["finish_reason"] == "stop"
          and r["usage"]["completion_tokens"] == 0 and r["timings"]["predicted_n"] == 1,
          f"an end of text sampled first: empty, stop, predicted_n 1 ({r.get('timings')})")
    # The penalties give pi-run's tokens (check_pi_run.py holds pi-run to a reference).
    for flags, fields in ((["--frequency-penalty", "1.5"], {"frequency_penalty": 1.5}),
                          (["--presence-penalty", "2"], {"presence_penalty": 2})):
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", MODEL, "-p", PROMPT, "-n",
                            str(greedy["max_tokens"]), "--temp", "0", "--json", *flags],
                           capture_output=True, text=True, timeout=120)
        want = json.loads(p.stdout)["text"] if p.returncode == 0 else None
        st, _, r = call(a, "POST", "/v1/completions", dict(greedy, **fields))
        check(st == 200 and r["choices"][0]["text"] == want and want != text,
              f"{fields}: pi-run's text, not the unpenalized one ({want!r})")
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, echo=True))
    check(st == 200 and r["choices"][0]["text"] == PROMPT + text, "echo: the prompt, then the text")
    st, _, events = stream(a, dict(greedy, echo=True, stream_options={"include_usage": True}))
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    check(st == 200 and streamed == PROMPT + text, "echo streamed: the prompt first")
    check(chunks and chunks[-1]["choices"] == [] and chunks[-1]["usage"] == base["usage"]
          and all(c["choices"] for c in chunks[:-1]),
          "stream_options.include_usage: a last chunk with the usage and no choices")
    check(all(c.get("system_fingerprint") == base["system_fingerprint"] for c in chunks),
          "every chunk carries the system_fingerprint")


def llama_server_routes(a, greedy, chat):
    """llama-server's own routes: its paths without /v1, /props, /slots, /apply-template,
    /tokenize with pieces."""
    whole = call(a, "POST", "/v1/completions", greedy)[2]["choices"][0]["text"]
    st, _, r = call(a, "POST", "/completions", {"prompt": PROMPT, "n_predict": greedy["max_tokens"],
                                                "temperature": 0})
    check(st == 200 and r["content"] == whole,
          "POST /completions: llama-server's alias of the native /completion")
    st, _, r = call(a, "POST", "/chat/completions", chat)
    check(st == 200 and r["object"] == "chat.completion", "POST /chat/completions")
    st, _, r = call(a, "GET", "/models")
    check(st == 200 and r["data"][0]["id"] == "demo-kjv-f16", "GET /models")
    st, _, r = call(a, "GET", "/props")
    check(st == 200 and r["total_slots"] == 1 and r["chat_template"] == "chatml"
          and r["default_generation_settings"]["n_ctx"] == 512
          and r["model_path"].endswith("demo-kjv-f16.gguf"), f"GET /props ({r})")
    st, _, r = call(a, "GET", "/slots")
    check(st == 200 and r == [{"id": 0, "n_ctx": 512, "is_processing": False}], f"GET /slots ({r})")
    st, _, r = call(a, "POST", "/apply-template", {"messages": chat["messages"]})
    check(st == 200 and r["prompt"] == (
        "<|im_start|>system\nAnswer as the King James Bible.<|im_end|>\n"
        "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n"),
        "POST /apply-template: the ChatML prompt")
    st, msg = error(a, "/apply-template", {"messages": chat["messages"], "max_tokens": 3})
    check(st == 400 and "max_tokens" in msg, f"/apply-template takes messages and tools only ({msg!r})")
    ids = call(a, "POST", "/tokenize", {"content": "Sea of Galilee \u00e9"})[2]["tokens"]
    st, _, r = call(a, "POST", "/tokenize", {"content": "Sea of Galilee \u00e9", "with_pieces": True})
    pieces = r["tokens"] if st == 200 else []
    text = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                    for p in pieces).decode()
    check([p["id"] for p in pieces] == ids and text.replace("\u2581", " ").strip()
          == "Sea of Galilee \u00e9", f"/tokenize with_pieces: the ids with their pieces, bytes where not UTF-8 ({pieces})")
    st, msg = error(a, "/tokenize", {"content": "a", "parse_special": True})
    check(st == 400 and "parse_special" in msg, f"/tokenize refuses what it does not read ({msg!r})")
    native(a, greedy, whole)
    st, _, r = call(a, "OPTIONS", "/v1/completions", headers={"Origin": "http://x"})
    check(st == 405, "without --cors an OPTIONS request is not answered as a preflight")


def native(a, greedy, whole):
    """llama-server's native POST /completion: its fields, whole and streamed."""
    body = {"prompt": PROMPT, "n_predict": greedy["max_tokens"], "temperature": 0,
            "return_tokens": True}
    st, _, r = call(a, "POST", "/completion", body)
    check(st == 200 and r["content"] == whole and r["stop"] is True
          and r["tokens_predicted"] == greedy["max_tokens"] == len(r["tokens"])
          and r["stop_type"] == "limit" and r["prompt"] == "<s> " + PROMPT
          and r["model"] == "demo-kjv-f16"
          and r["generation_settings"]["n_predict"] == greedy["max_tokens"]
          and r["timings"]["predicted_n"] == greedy["max_tokens"]
          # (asked before: the prompt is cached whole, none of it evaluated again)
          and r["timings"]["prompt_n"] == 0 < r["tokens_evaluated"],
          f"POST /completion: the same text, llama-server's fields ({str(r)[:300]})")
    st, _, events = stream(a, body, path="/completion")
    chunks = [json.loads(e) for e in events]
    check(st == 200 and chunks and chunks[-1]["stop"] is True
          and all(c["stop"] is False for c in chunks[:-1])
          and "".join(c["content"] for c in chunks) == whole
          and sum((c["tokens"] for c in chunks), []) == r["tokens"]
          and chunks[-1]["stop_type"] == "limit" and "[DONE]" not in events,
          "POST /completion streamed: chunks add up to the text and tokens, the last stop: true")
    st, _, events = stream(a, dict(body, return_tokens=False), path="/completion")
    chunks = [json.loads(e) for e in events][:-1]
    check(st == 200 and chunks and all(len(c["tokens"]) >= 1 for c in chunks if c["content"])
          and sum((c["tokens"] for c in chunks), []) == r["tokens"],
          "streamed without return_tokens: each chunk still carries its token ids (llama-server's)")
    word = whole.split()[2]
    st, _, w = call(a, "POST", "/completion", dict(body, stop=[word]))
    check(st == 200 and w["stop_type"] == "word" and w["stopping_word"] == word
          and whole.startswith(w["content"]) and word not in w["content"],
          f"a stop string: stop_type word, stopping_word {word!r}")
    st, _, p = call(a, "POST", "/completion", dict(body, n_probs=2))
    probs = p.get("completion_probabilities", []) if st == 200 else []
    check(len(probs) == greedy["max_tokens"]
          and all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["logprob"] == e["logprob"]
                  for e in probs) and [e["id"] for e in probs] == r["tokens"],
          "n_probs 2: each token's log-probability and 2 alternatives, greedy = the first")
    st, _, p = call(a, "POST", "/completion", dict(body, n_probs=3, post_sampling_probs=True))
    probs = p.get("completion_probabilities", []) if st == 200 else []
    check(len(probs) == greedy["max_tokens"] and [e["id"] for e in probs] == r["tokens"]
          and all(e["prob"] == 1.0 and "logprob" not in e and len(e["top_probs"]) == 3
                  and e["top_probs"][0]["id"] == e["id"] and e["top_probs"][0]["prob"] == 1.0
                  and all(t["prob"] == 0.0 for t in e["top_probs"][1:]) for e in probs)
          and p["generation_settings"]["post_sampling_probs"] is True,
          "post_sampling_probs, greedy: each token's probability 1, the next by logit 0")
    st, _, p = call(a, "POST", "/completion", dict(body, temperature=0.8, top_k=3, seed=5,
                                                   n_probs=5, post_sampling_probs=True))
    probs = p.get("completion_probabilities", []) if st == 200 else []
    check(len(probs) == greedy["max_tokens"]
          and all(1 <= len(e["top_probs"]) <= 3
                  and abs(sum(t["prob"] for t in e["top_probs"]) - 1) < 1e-4
                  and any(t["id"] == e["id"] and t["prob"] == e["prob"] for t in e["top_probs"])
                  for e in probs),
          "post_sampling_probs, sampled with top_k 3: the survivors' probabilities, summing to "
          "1, the drawn token among them")
    timings_per_token(a, body, r)
    n_prompt = r["tokens_evaluated"]
    st, _, full = call(a, "POST", "/completion", {"prompt": PROMPT, "n_predict": -1,
                                                 "ignore_eos": True, "temperature": 0})
    # (the last token is sampled from the last position's logits, never evaluated: one
    # more than the positions left)
    check(st == 200 and full["truncated"] is True and full["stop_type"] == "limit"
          and full["tokens_predicted"] == 512 - n_prompt + 1,
          f"a reply the full context stopped: truncated, the context's tokens "
          f"({full.get('tokens_predicted')} of {512 - n_prompt + 1})")
    for field, value in (("mirostat", 2), ("logprobs", 1), ("samplers", ["top_k"]),
                         ("dry_multiplier", 0.5)):
        st, msg = error(a, "/completion", dict(body, **{field: value}))
        check(st == 400 and field in msg, f"/completion {field}: 400 naming it ({msg!r})")


def timings_per_token(a, body, whole):
    n = whole["tokens_predicted"]
    body = dict(body, cache_prompt=False, timings_per_token=True)
    for path, req in (("/completion", body),
                      ("/v1/completions", {"prompt": PROMPT, "max_tokens": n, "temperature": 0,
                                           "cache_prompt": False, "timings_per_token": True}),
                      ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}],
                                                "max_tokens": n, "temperature": 0,
                                                "timings_per_token": True})):
        st, _, events = stream(a, req, path=path)
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        last = chunks[-1]["timings"] if chunks and "timings" in chunks[-1] else {}
        told = [c["timings"] for c in chunks[:-1] if "timings" in c]
        fields = ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                  "predicted_per_second", "predicted_per_token_ms")
        check(st == 200 and len(told) == len(chunks) - 1 == n
              and [t["predicted_n"] for t in told] == list(range(1, n + 1))
              and all(all(f in t for f in fields) and t["prompt_n"] == last["prompt_n"] > 0
                      and t["predicted_ms"] >= 0 for t in told)
              and last["predicted_n"] == n,
              f"{path} timings_per_token: each chunk with the timings so far")
    st, _, r = call(a, "POST", "/completion", body)
    check(st == 200 and r["content"] == whole["content"], "timings_per_token on a whole reply")
    st, msg = error(a, "/completion", dict(body, timings_per_token=1))
    check(st == 400 and "timings_per_token" in msg, f"timings_per_token 1: 400 ({msg!r})")


def verbose(a, quiet, chat):
    """--verbose: whole chat and completions replies carry "__verbose", the native reply of
    the same generation (its content the reply's text, the prompt as the model read it);
    without the flag, none."""
    body = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0}
    st, _, r = call(a, "POST", "/v1/completions", body)
    v = r.get("__verbose", {}) if st == 200 else {}
    check(st == 200 and v.get("content") == r["choices"][0]["text"]
          and v.get("prompt") == "<s> " + PROMPT
          and v.get("tokens_predicted") == r["usage"]["completion_tokens"] == 5,
          f"--verbose: a completion's __verbose, the native reply ({str(v)[:120]})")
    st, _, r = call(a, "POST", "/v1/chat/completions", chat)
    v = r.get("__verbose", {}) if st == 200 else {}
    check(st == 200 and v.get("content") == r["choices"][0]["message"]["content"]
          and v.get("prompt", "").startswith("<s> <|im_start|>system\nAnswer as")
          and v["prompt"].endswith("<|im_start|>user\nIn the beginning<|im_end|>\n"
                                   "<|im_start|>assistant\n"),
          f"--verbose: a chat's __verbose, the prompt the template rendered ({v.get('prompt')!r})")
    st, _, r = call(quiet, "POST", "/v1/chat/completions", chat)
    check(st == 200 and "__verbose" not in r, "without --verbose: no __verbose")


def llama_server_flags(a, greedy):
    """--alias, --any-model-name, --cors; --seed, --temp and -n as the defaults of requests
    that give none, -n also a cap."""
    plain = {"prompt": PROMPT}
    st, _, r = call(a, "POST", "/v1/completions", plain)
    st2, _, r2 = call(a, "POST", "/v1/completions",
                      dict(plain, seed=7, temperature=0.9, max_tokens=5))
    st3, _, r3 = call(a, "POST", "/v1/completions", dict(plain, max_tokens=50, temperature=0))
    check(st == st2 == st3 == 200 and r["usage"]["completion_tokens"] == 5
          and r["choices"][0]["text"] == r2["choices"][0]["text"]
          and r3["usage"]["completion_tokens"] == 5,
          "--seed 7 --temp 0.9 -n 5: a request giving none gets them; max_tokens 50 is capped at 5")
    st, _, page = call(a, "GET", "/")
    check(st == 404 and "--no-webui" in page["error"]["message"], "--no-webui: GET / is a 404")
    st, _, p = call(a, "GET", "/props")
    params = p["default_generation_settings"]["params"] if st == 200 else {}
    check(params.get("seed") == 7 and abs(params.get("temperature", 0) - 0.9) < 1e-6
          and params.get("n_predict") == 5, f"/props shows the defaults ({params})")
    st, _, r = call(a, "GET", "/v1/models")
    check(st == 200 and r["data"][0]["id"] == "kjv", "--alias names the model")
    st, _, r = call(a, "POST", "/v1/completions", dict(greedy, model="gpt-3.5-turbo"))
    check(st == 200 and r["model"] == "kjv", "--any-model-name: another name is served")
    st, _, r = call(a, "GET", "/v1/models/gpt-4o")
    check(st == 200 and r["id"] == "kjv", "--any-model-name: /v1/models/{any} is the model")
    st, headers, _ = call(a, "OPTIONS", "/v1/chat/completions",
                          headers={"Origin": "http://app.example",
                                   "Access-Control-Request-Method": "POST"})
    check(st == 204 and headers.get("Access-Control-Allow-Origin") == "http://app.example"
          and "POST" in headers.get("Access-Control-Allow-Methods", "")
          and "Authorization" in headers.get("Access-Control-Allow-Headers", ""),
          f"--cors: the preflight is answered ({st} {headers})")
    st, headers, _ = call(a, "POST", "/v1/completions", greedy, headers={"Origin": "http://app.example"})
    check(st == 200 and headers.get("Access-Control-Allow-Origin") == "http://app.example",
          "--cors: a reply to the origin carries Access-Control-Allow-Origin")
    st, headers, _ = call(a, "POST", "/v1/completions", greedy, headers={"Origin": "http://evil.example"})
    check(st == 200 and "Access-Control-Allow-Origin" not in headers,
          "--cors: another origin gets no CORS header")
    host, port = a.split(":")
    import http.client
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(dict(greedy, stream=True)),
                 headers={"Origin": "http://app.example"})
    r = conn.getresponse()
    r.read()
    check(r.getheader("Access-Control-Allow-Origin") == "http://app.example",
          "--cors: a stream's head carries it too")
    conn.close()


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        s = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "512", "--chat-template", "chatml")
        check(s.http is not None, "pi-launch --http 127.0.0.1:0 serves")
        a = s.http
        greedy = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
        chat = {"messages": [{"role": "system", "content": "Answer as the King James Bible."},
                             {"role": "user", "content": "In the beginning"}],
                "max_tokens": 8, "temperature": 0}
        refusals(a, greedy, chat)
        chat_fields(a, chat)
        completion_fields(a, greedy, bin_dir)
        st, _, r = call(a, "GET", "/v1/models/demo-kjv-f16")
        check(st == 200 and r["id"] == "demo-kjv-f16" and r["object"] == "model",
              "GET /v1/models/{id}: the model")
        st, _, r = call(a, "GET", "/v1/models/gpt-4")
        check(st == 404 and "gpt-4" in r["error"]["message"], "GET /v1/models/gpt-4: 404")
        llama_server_routes(a, greedy, chat)
        s2 = launch(bin_dir, tmp, "-m", MODEL, "-t", "2", "-c", "512", "--alias", "kjv",
                    "--any-model-name", "--cors", "http://app.example", "--seed", "7", "--temp",
                    "0.9", "-n", "5", "--no-webui", "--no-context-shift", "--verbose",
                    "--chat-template", "chatml")
        llama_server_flags(s2.http, greedy)
        verbose(s2.http, a, chat)
        check(s.stop() == 0 and s2.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""pi-launch --http: the OpenAI-style HTTP API, checked with Python's standard library (an
HTTP client independent of ours) on 127.0.0.1.

On the demo model stored with ffn_down_t (--sparse oracle, one cpu worker):
- /v1/completions, greedy: the golden text (tests/data/demo_greedy.json, from the numpy
  reference), usage counts, finish_reason "length"; streamed (server-sent events), the
  deltas concatenate to the same text, the last chunk carries finish_reason and usage, then
  "data: [DONE]"; a stop string ends the text before it with finish_reason "stop"; the same
  seed gives the same sampled text.
- /v1/chat/completions: without a template a 400 naming --chat-template; with
  --chat-template chatml the reply equals the plain completion of the same conversation
  written out in ChatML by hand, streamed as chat.completion.chunk deltas (role first).
- /v1/models, /health, /tokenize (python3-sentencepiece's ids), /detokenize.
- Errors in OpenAI's shape and status: malformed JSON, a field of the wrong type, n=10 (more
  choices than the server holds at once), a
  prompt longer than the context (400, naming the field), an unknown model or path (404),
  a body over the limit (413), the queue full (503 with Retry-After), no or a wrong API key
  (401; /health stays open).
- A client that disconnects mid-stream frees the engine: the next request is served.

Usage: http_api_test.py BIN_DIR
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish, launch_http  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
TOKENIZER = os.path.join(ROOT, "models", "demo-tokenizer.model")
GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"
KEY = "an-api-key-0123456789abcdef"

def launch(bin_dir, tmp, *args):
    """pi-launch with --http on free ports; the HTTP address from its log."""
    return launch_http(bin_dir, os.path.join(tmp, f"launch-{time.monotonic_ns()}.log"), *args)


def call(address, method, path, body=None, headers=None, raw=None):
    """(status, headers, parsed JSON or text) of one request."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers or {})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    try:
        return r.status, dict(r.getheaders()), json.loads(text)
    except ValueError:
        return r.status, dict(r.getheaders()), text


def stream(address, body, headers=None, path="/v1/completions"):
    """The server-sent events of a streamed completion: the list of data payloads."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", path, body=json.dumps(dict(body, stream=True)),
                 headers=headers or {})
    r = conn.getresponse()
    events = []
    for line in r.read().decode().split("\n"):
        if line.startswith("data: "):
            events.append(line[6:])
    conn.close()
    return r.status, r.getheader("Content-Type"), events


def main():
    bin_dir = sys.argv[1]
    with open(GOLDEN) as f:
        golden = json.load(f)
    n = len(golden["generated_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = os.path.join(tmp, "demo-down-t.gguf")
        subprocess.run([os.path.join(bin_dir, "pi-quantize"), MODEL, demo_t, "f16", "--down-t"],
                       capture_output=True, check=True, timeout=300)
        served = ["-m", demo_t, "--sparse", "oracle", "-t", "2", "-c", "4096"]
        s = launch(bin_dir, tmp, *served)
        check(s.http is not None, "pi-launch --http 127.0.0.1:0 serves")
        a = s.http
        greedy = {"prompt": PROMPT, "max_tokens": n, "temperature": 0}

        st, _, r = call(a, "POST", "/v1/completions", greedy)
        check(st == 200 and r["choices"][0]["text"] == golden["text"]
              and r["choices"][0]["finish_reason"] == "length" and r["object"] == "text_completion"
              and r["model"] == "demo-down-t"
              and r["usage"] == {"prompt_tokens": 6, "completion_tokens": n, "total_tokens": 6 + n},
              "/v1/completions greedy: the golden text, usage, finish_reason length")
        st, ctype, events = stream(a, greedy)
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        check(st == 200 and ctype == "text/event-stream" and events[-1] == "[DONE]"
              and text == golden["text"] and chunks[-1]["choices"][0]["finish_reason"] == "length"
              and chunks[-1]["usage"]["completion_tokens"] == n
              and all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]),
              "streamed: deltas concatenate to the same text, finish and usage last, [DONE]")
        st, _, r = call(a, "POST", "/v1/completions", dict(greedy, stop=["LORD"]))
        t = r["choices"][0]["text"]
        check(st == 200 and r["choices"][0]["finish_reason"] == "stop" and "LORD" not in t
              and golden["text"].startswith(t) and len(t) < len(golden["text"]),
              f"a stop string ends the text before it ({t!r})")
        st, _, events = stream(a, dict(greedy, stop=["LORD"]))
        deltas = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        check(st == 200 and deltas == t, "streamed with the stop string: the same text (held "
              "back, never sent)")
        st, _, r = call(a, "POST", "/v1/completions",
                        dict(greedy, repeat_last_n=2000000000, repeat_penalty=1.1))
        check(st == 200 and r["usage"]["completion_tokens"] == n,
              "repeat_last_n 2000000000 (the whole context) is served, not allocated")
        sampled = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.9, "seed": 42}
        r1 = call(a, "POST", "/v1/completions", sampled)[2]["choices"][0]["text"]
        r2 = call(a, "POST", "/v1/completions", sampled)[2]["choices"][0]["text"]
        check(r1 == r2, "the same seed gives the same sampled text")

        st, _, r = call(a, "GET", "/v1/models")
        check(st == 200 and r["data"][0]["id"] == "demo-down-t" and r["data"][0]["meta"]["n_ctx"] == 4096,
              "/v1/models lists the model")
        st, _, r = call(a, "GET", "/health")
        check(st == 200 and r["status"] == "ok" and r["running"] == 0, "/health: ok, idle")
        import sentencepiece as spm  # noqa: E402
        sp = spm.SentencePieceProcessor(model_file=TOKENIZER)
        st, _, r = call(a, "POST", "/tokenize", {"content": PROMPT})
        check(st == 200 and r["tokens"] == sp.encode(PROMPT), "/tokenize == sentencepiece")
        st, _, r = call(a, "POST", "/detokenize", {"tokens": sp.encode(PROMPT)})
        check(st == 200 and r["content"] == PROMPT, "/detokenize round trip")

        for body, raw, status, words in (
                (None, "{not json", 400, "not JSON"),
                ({"prompt": PROMPT, "max_tokens": "ten"}, None, 400, "max_tokens"),
                ({"prompt": PROMPT, "temperature": "hot"}, None, 400, "temperature"),
                ({"prompt": PROMPT, "n": 10}, None, 400, "at most 9 requests at once"),
                ({"prompt": PROMPT, "stop": [""]}, None, 400, "stop"),
                ({}, None, 400, "prompt is required"),
                ({"prompt": "And God said " * 2000}, None, 400, "exceeds the available context"),
                ({"prompt": PROMPT, "model": "gpt-4"}, None, 404, "gpt-4")):
            st, _, r = call(a, "POST", "/v1/completions", body, raw=raw)
            check(st == status and r["error"]["code"] == status and words in r["error"]["message"],
                  f"{status}: {r['error']['message'] if isinstance(r, dict) else r!r}")
        st, _, r = call(a, "GET", "/v2/nothing")
        check(st == 404 and "error" in r, "an unknown path: 404")
        # A body over the limit: the answer comes before the body is all sent.
        sock = socket.create_connection((a.split(":")[0], int(a.split(":")[1])))
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {2 << 20}"
                     "\r\n\r\n".encode())
        try:
            sock.sendall(b"x" * (2 << 20))
        except OSError:
            pass  # the server stopped reading: its answer is already there
        answer = sock.recv(4096).decode(errors="replace")
        sock.close()
        check(answer.startswith("HTTP/1.1 413"), f"a body over the limit: 413 ({answer[:20]!r})")

        # A client that disconnects mid-stream frees the engine.
        host, port = a.split(":")
        sock = socket.create_connection((host, int(port)))
        body = json.dumps({"prompt": PROMPT, "max_tokens": -1, "ignore_eos": True, "stream": True})
        sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      f"\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        sock.recv(4096)  # the headers and the first events
        sock.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and call(a, "GET", "/health")[2]["running"] != 0:
            time.sleep(0.05)
        check(call(a, "GET", "/health")[2]["running"] == 0, "a client gone mid-stream frees the engine")
        st, _, r = call(a, "POST", "/v1/completions", greedy)
        check(st == 200 and r["choices"][0]["text"] == golden["text"], "the next request is served")
        check("cancelled" in s.stderr(), "the server logs the request as cancelled")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # The queue full: 503 with Retry-After.
        s = launch(bin_dir, tmp, *served, "--max-queue", "0")
        sock = socket.create_connection(tuple(s.http.split(":")))
        sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                      f"\r\n\r\n{body}").encode())
        sock.recv(4096)  # running
        st, headers, r = call(s.http, "POST", "/v1/completions", greedy)
        check(st == 503 and headers.get("Retry-After") == "1" and "--max-queue" in r["error"]["message"],
              "the queue full: 503 with Retry-After")
        sock.close()
        check(s.stop() == 0, "pi-launch stops cleanly")

        # Chat completions: the demo model has no template, so they need --chat-template.
        chat = {"messages": [{"role": "system", "content": "Answer as the King James Bible."},
                             {"role": "user", "content": "In the beginning"}],
                "max_tokens": 16, "temperature": 0}
        s = launch(bin_dir, tmp, *served)
        st, _, r = call(s.http, "POST", "/v1/chat/completions", chat)
        check(st == 400 and "--chat-template" in r["error"]["message"],
              "chat without a template: 400 naming --chat-template")
        check(s.stop() == 0, "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, *served, "--chat-template", "chatml")
        st, _, r = call(s.http, "POST", "/v1/chat/completions", chat)
        reply = r["choices"][0]["message"] if st == 200 else {}
        # The same conversation written out in ChatML by hand, as a plain completion.
        chatml = ("<|im_start|>system\nAnswer as the King James Bible.<|im_end|>\n"
                  "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n")
        st2, _, r2 = call(s.http, "POST", "/v1/completions",
                          {"prompt": chatml, "max_tokens": 16, "temperature": 0})
        check(st == 200 and r["object"] == "chat.completion" and reply["role"] == "assistant"
              and st2 == 200 and reply["content"] == r2["choices"][0]["text"]
              and r["usage"] == r2["usage"],
              "chat completion == the completion of the conversation in ChatML written by hand")
        st, ctype, events = stream(s.http, chat, path="/v1/chat/completions")
        chunks = [json.loads(e) for e in events[:-1]]
        deltas = [c["choices"][0]["delta"] for c in chunks]
        check(st == 200 and events[-1] == "[DONE]" and deltas[0].get("role") == "assistant"
              and "".join(d.get("content", "") for d in deltas) == reply.get("content")
              and chunks[-1]["choices"][0]["finish_reason"] == "length"
              and chunks[-1]["object"] == "chat.completion.chunk",
              "streamed chat: the role first, deltas == the whole reply, finish last, [DONE]")
        st, _, r = call(s.http, "POST", "/v1/chat/completions",
                        {"messages": [{"role": "robot", "content": "x"}]})
        check(st == 400 and "role 'robot'" in r["error"]["message"], "an unknown role: 400")
        st, _, r = call(s.http, "POST", "/v1/chat/completions", {"messages": "hi"})
        check(st == 400 and "messages" in r["error"]["message"], "messages not an array: 400")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # logprobs (whole responses): each token's log-probability under the model, checked
        # against a log-softmax of pi-dump-logits' logits for the same tokens (numpy).
        s = launch(bin_dir, tmp, *served, "--chat-template", "chatml")
        st, _, r = call(s.http, "POST", "/v1/completions", dict(greedy, max_tokens=6, logprobs=3))
        lp = r["choices"][0]["logprobs"] if st == 200 else {}
        check(st == 200 and len(lp["tokens"]) == 6 and "".join(lp["tokens"]) == r["choices"][0]["text"]
              and all(len(t) == 3 for t in lp["top_logprobs"])
              and all(abs(max(t.values()) - v) < 1e-6 for t, v in zip(lp["top_logprobs"], lp["token_logprobs"]))
              and lp["text_offset"][0] == 0,
              "completions logprobs: 6 tokens spelling the text, 3 alternatives each, greedy = the top")
        if st == 200:
            # The same greedy tokens' ids, from pi-run.
            p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", demo_t, "--sparse", "oracle",
                                "-p", PROMPT, "-n", "6", "--temp", "0", "--json"],
                               capture_output=True, text=True, timeout=120)
            run = json.loads(p.stdout)
            ids, generated = run["prompt_tokens"], {"tokens": run["generated_tokens"]}
            dump = os.path.join(tmp, "logits.f32")
            seq = ids + generated["tokens"][:5]
            subprocess.run([os.path.join(bin_dir, "pi-dump-logits"), "-m", demo_t, "--tokens",
                            ",".join(map(str, seq)), "--out", dump, "--mode", "decode"],
                           capture_output=True, check=True, timeout=120)
            import numpy as np
            logits = np.fromfile(dump, dtype=np.float32).reshape(len(seq), -1).astype(np.float64)
            rows = logits[len(ids) - 1:]
            ref = rows - (rows.max(axis=1, keepdims=True) +
                          np.log(np.exp(rows - rows.max(axis=1, keepdims=True)).sum(axis=1,
                                                                                   keepdims=True)))
            want = [ref[i, t] for i, t in enumerate(generated["tokens"][:6])]
            got = lp["token_logprobs"][:len(want)]
            check(len(want) >= 5 and max(abs(a - b) for a, b in zip(got, want)) < 1e-3,
                  f"logprobs equal numpy's log-softmax of the logits ({got[:3]} vs {want[:3]})")
        st, _, r = call(s.http, "POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4,
                         "temperature": 0, "logprobs": True, "top_logprobs": 2})
        content = r["choices"][0]["logprobs"]["content"] if st == 200 else []
        check(st == 200 and len(content) == 4 and all(len(c["top_logprobs"]) == 2 and
                                                      bytes(c["bytes"]).decode(errors="replace")
                                                      == c["token"] for c in content),
              "chat logprobs: content entries with token, logprob, bytes and 2 alternatives")
        # Streamed: the chunks' logprobs add up to the whole response's.
        whole = call(s.http, "POST", "/v1/completions", dict(greedy, max_tokens=12, logprobs=2,
                                                            stop=["the"]))[2]["choices"][0]
        st, _, events = stream(s.http, dict(greedy, max_tokens=12, logprobs=2, stop=["the"]))
        chunks = [json.loads(e)["choices"][0] for e in events if e != "[DONE]"]
        tokens = sum((c["logprobs"]["tokens"] for c in chunks if c.get("logprobs")), [])
        values = sum((c["logprobs"]["token_logprobs"] for c in chunks if c.get("logprobs")), [])
        offsets = sum((c["logprobs"]["text_offset"] for c in chunks if c.get("logprobs")), [])
        check(st == 200 and tokens == whole["logprobs"]["tokens"]
              and values == whole["logprobs"]["token_logprobs"]
              and offsets == whole["logprobs"]["text_offset"],
              f"streamed logprobs (with a stop string) add up to the whole response's ({len(tokens)} "
              f"tokens)")
        for body, words in (({"logprobs": 6}, "logprobs"), ({"logprobs": "2"}, "logprobs"),
                            ({"top_logprobs": 2}, None)):
            path = "/v1/chat/completions" if words is None else "/v1/completions"
            req = dict(greedy, **body) if words else {"messages": [{"role": "user", "content": "hi"}],
                                                      **body}
            st, _, r = call(s.http, "POST", path, req)
            check(st == 400, f"bad logprobs request {body}: 400 ({r['error']['message']!r})")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # pi-bench --server drives the API with concurrent clients.
        s = launch(bin_dir, tmp, *served)
        p = subprocess.run([os.path.join(bin_dir, "pi-bench"), "--server", s.http, "--clients",
                            "1,3", "--requests", "6", "-n", "8", "-o", "json"],
                           capture_output=True, text=True, timeout=300)
        rows = json.loads(p.stdout) if p.returncode == 0 else []
        check(len(rows) == 2 and all(r["ok"] == 6 and r["errors"] == 0 and r["tokens"] == 48
                                     and r["tokens_per_second"] > 0 and r["ttft_p50_ms"] > 0
                                     for r in rows) and [r["clients"] for r in rows] == [1, 3],
              f"pi-bench --server: 1 and 3 clients, every request streamed 8 tokens ({p.stderr[-200:]!r})")
        # A scripted conversation, each turn with the prompt cache and without (a first
        # prompt no request above asked: nothing of it cached).
        first_file = os.path.join(tmp, "first.txt")
        with open(first_file, "w") as f:
            f.write("And the earth was without form, and void")
        p = subprocess.run([os.path.join(bin_dir, "pi-bench"), "--server", s.http, "--conversation",
                            "3", "-n", "48", "-o", "json", "--prompt-file", first_file],
                           capture_output=True, text=True, timeout=300)
        turns = json.loads(p.stdout) if p.returncode == 0 else []
        check(len(turns) == 3 and turns[2]["prompt_evaluated"] < turns[2]["prompt_tokens"]
              and turns[0]["prompt_evaluated"] == turns[0]["prompt_tokens"]
              and all(t["ttft_cached_ms"] > 0 and t["ttft_uncached_ms"] > 0 for t in turns),
              f"pi-bench --server --conversation 3: the third turn reuses the cached prompt "
              f"({turns[-1] if turns else p.stderr[-200:]!r})")
        # Two conversations taking turns on the one sequence: each later turn's prefix comes
        # back from the prompt store.
        p = subprocess.run([os.path.join(bin_dir, "pi-bench"), "--server", s.http, "--conversation",
                            "3", "--conversations", "2", "-n", "48", "-o", "json", "--prompt-file",
                            first_file], capture_output=True, text=True, timeout=300)
        turns = json.loads(p.stdout) if p.returncode == 0 else []
        check(len(turns) == 6 and [t["conversation"] for t in turns] == [1, 2] * 3
              and all(t["prompt_evaluated"] < t["prompt_tokens"] - 30 for t in turns[4:]),
              f"pi-bench --server --conversation 3 --conversations 2: the third turns start from "
              f"the store ({turns[4:] if turns else p.stderr[-200:]!r})")
        # With a long prompt sent back to back meanwhile (its requests end with the run's).
        long_file = os.path.join(tmp, "long.txt")
        with open(long_file, "w") as f:
            f.write(" ".join(["In the beginning"] * 40))
        p = subprocess.run([os.path.join(bin_dir, "pi-bench"), "--server", s.http, "--clients", "1",
                            "--requests", "4", "-n", "4", "-o", "json",
                            "--background-prompt-file", long_file],
                           capture_output=True, text=True, timeout=300)
        rows = json.loads(p.stdout) if p.returncode == 0 else []
        check(len(rows) == 1 and rows[0]["ok"] == 4 and rows[0]["background_prompts"] >= 1,
              f"pi-bench --server --background-prompt-file: 4 requests beside "
              f"{rows[0]['background_prompts'] if rows else '?'} long prompts ({p.stderr[-200:]!r})")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # An API key.
        key_file = os.path.join(tmp, "key")
        with open(key_file, "w") as f:
            f.write(KEY + "\n")
        s = launch(bin_dir, tmp, *served, "--api-key-file", key_file)
        for headers, status in (({}, 401), ({"Authorization": "Bearer wrong-key-0123456789"}, 401),
                                ({"Authorization": "Bearer " + KEY}, 200)):
            st, _, r = call(s.http, "POST", "/v1/completions", greedy, headers=headers)
            check(st == status, f"API key {headers.get('Authorization', 'missing')!r}: {status}")
        check(call(s.http, "GET", "/health")[0] == 200, "/health needs no key")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # While the model loads (here: a remote worker nobody runs, tried for 10 s), the
        # HTTP server answers: /health 503 "loading", the API 503 saying so, the page.
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("a-worker-token-0123456789\n")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            nobody = f"127.0.0.1:{sock.getsockname()[1]}"
        log = os.path.join(tmp, "loading.log")
        with open(log, "w") as err:
            proc = subprocess.Popen([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0",
                                     "--http", "127.0.0.1:0", *served, "--cpu-worker", nobody,
                                     "--auth-token-file", token], stdout=subprocess.DEVNULL,
                                    stderr=err)
        address = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and address is None and proc.poll() is None:
            for line in open(log).read().splitlines():
                if "while the model loads" in line:
                    address = line.split("http://", 1)[1].split()[0]
            time.sleep(0.05)
        check(address is not None, "the HTTP server is up before the model is loaded")
        if address:
            st, headers, r = call(address, "GET", "/health")
            check(st == 503 and r == {"status": "loading"} and headers.get("Retry-After") == "1",
                  f"/health while loading: 503 {r}")
            st, _, r = call(address, "POST", "/v1/completions", greedy)
            check(st == 503 and "loading" in r["error"]["message"],
                  f"a completion while loading: 503 ({r['error']['message']!r})")
            st, headers, _ = call(address, "GET", "/")
            check(st == 200 and headers.get("Content-Type", "").startswith("text/html"),
                  "the page while loading")
        rc = proc.wait(timeout=60)
        check(rc == 1 and nobody in open(log).read(),
              "the load fails (the worker is unreachable): exit 1, naming it")

    finish()


if __name__ == "__main__":
    main()

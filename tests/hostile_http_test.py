#!/usr/bin/env python3
"""pi-launch --http against hostile clients, each a raw socket on 127.0.0.0/8 (nothing here
uses our own client code). Each case was a way to stop, stall or exhaust the server:

- a chunked body whose trailer has a 70 KiB field (it aborted the process), 100k tiny
  trailer fields, a 1 MiB chunk extension: 431 (401 first without the key), the server
  alive;
- malformed framing (a bad Content-Length, a header line without a colon, a NUL byte): 400
  in OpenAI's error shape;
- a header sent a byte at a time: the connection closed at the header deadline;
- idle connections filling the per-client cap: one more from that address is refused 503
  at once, a client from another address (127.0.0.2) is served, and the idle ones are closed
  at the idle deadline (they held every slot for over 70 s);
- a client that half-closes after its request (shutdown(SHUT_WR)) still gets its answer,
  whole and streamed; one that closes its socket while a long non-streamed answer runs
  frees the engine within half a second (llama.cpp's server test looks after 1 s);
- streams reset by their clients mid-write, eight at a time for 5 s (the stream's head was
  let go under its write: the process died after some tens of them): the server lives on
  and serves the golden text;
- clients that never read their stream (1 KiB receive buffer, events bigger than the
  kernel's buffers hold) with -np 1 and -np 2: a normal client is still served the golden
  text, and the stuck ones are cancelled (their stream full, or the write deadline);
- integers in [2^63, 2^64): 400 naming the field, never a wrap to -1;
- 48 concurrent 1 MB prompts (answered 400 before tokenizing, by the byte bound) and 100k
  stop strings: refused at once, the server's memory bounded;
- a restart on the same port right after the server closed connections (TIME_WAIT): it
  binds (SO_REUSEADDR).

Usage: hostile_http_test.py BIN_DIR
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import (Peaks, asan_memory_factor, check, finish, http_body,  # noqa: E402
                            http_status, launch_http, recv_all)

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"
KEY = "a-hostile-test-key-0123456789"
AUTH = f"Authorization: Bearer {KEY}\r\n"
TIMEOUT_S = 3  # --timeout: the body's read and each write
IDLE_S = 2     # --http-idle-timeout (and the header deadline)
PER_CLIENT = 8
RESET_S = 5    # reset_mid_stream_case's length

MEMORY = asan_memory_factor()  # memory bounds under AddressSanitizer


def launch(bin_dir, tmp, *args, port=0):
    p = launch_http(bin_dir, os.path.join(tmp, f"launch-{time.monotonic_ns()}.log"),
                    "--cpu-workers", "0", "-c", "4096", "--timeout", str(TIMEOUT_S),
                    "--http-idle-timeout", str(IDLE_S), "--http-max-connections-per-client",
                    str(PER_CLIENT), *args, http_port=port)
    return p


def connect(address, source="127.0.0.1", rcvbuf=None):
    host, port = address.split(":")
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.connect((host, int(port)))
    return s


def exchange(address, raw, source="127.0.0.1", timeout=20, half_close=False):
    """Sends raw bytes; returns everything read until the server closes (or the timeout)."""
    s = connect(address, source)
    s.settimeout(timeout)
    try:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    data = recv_all(s)
    s.close()
    return data


def request(path, body=None, key=True, extra="", raw=None):
    data = raw.encode() if raw is not None else json.dumps(body).encode() if body is not None else b""
    post = body is not None or raw is not None
    head = (f"{'POST' if post else 'GET'} {path} HTTP/1.1\r\nHost: x\r\n"
            f"{AUTH if key else ''}Connection: close\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


def healthy(address, source="127.0.0.1"):
    return http_status(exchange(address, request("/health"), source=source, timeout=10)) == 200


def framing_cases(a):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 4, "temperature": 0}).encode()
    # {} takes the Authorization line, or nothing.
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n{}Transfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n")
    chunk = b"%x\r\n" % len(body) + body + b"\r\n"
    big_trailer = chunk + b"0\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
    r = exchange(a, head.format("").encode() + big_trailer)
    check(http_status(r) == 401, f"a 70 KiB trailer without the key: 401 before the body "
          f"({r[:12]!r})")
    r = exchange(a, head.format(AUTH).encode() + big_trailer)
    check(http_status(r) == 431 and b"trailer" in http_body(r), f"a 70 KiB trailer with the key: 431 "
          f"({http_body(r)[:80]!r})")
    check(healthy(a), "the server is alive after it")
    tiny = chunk + b"0\r\n" + b"".join(b"T%d: v\r\n" % i for i in range(100000)) + b"\r\n"
    r = exchange(a, head.format(AUTH).encode() + tiny)
    check(http_status(r) == 431, f"100k tiny trailer fields: 431 ({r[:12]!r})")
    r = exchange(a, head.format(AUTH).encode() + b"%x;" % len(body) + b"e" * (1 << 20) + b"\r\n")
    check(http_status(r) == 431, f"a 1 MiB chunk extension: 431 ({r[:12]!r})")
    r = exchange(a, head.format(AUTH).encode() + chunk + b"0\r\n\r\n")
    check(http_status(r) == 200 and json.loads(http_body(r))["usage"]["completion_tokens"] == 4,
          "a well-formed chunked body is served")
    for raw, what in ((b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
                       "a bad Content-Length"),
                      (b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
                       "a header line without a colon"),
                      (b"GET /health HTTP/1.1\r\nHo\x00st: x\r\n\r\n", "a NUL byte"),
                      (b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", "a bad version")):
        r = exchange(a, raw)
        err = json.loads(http_body(r) or b"{}").get("error", {})
        check(http_status(r) == 400 and err.get("code") == 400, f"{what}: 400 ({err.get('message')!r})")
    check(healthy(a), "the server is alive after the framing cases")


def slow_and_idle_cases(a):
    # A header a byte at a time: closed at the header deadline.
    s = connect(a)
    s.settimeout(10)
    t0 = time.monotonic()
    closed_at = None
    for ch in b"GET /health HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n":
        try:
            s.sendall(bytes([ch]))
        except OSError:
            closed_at = time.monotonic() - t0
            break
        time.sleep(0.25)
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed_at = time.monotonic() - t0
                break
        except BlockingIOError:
            pass
        except OSError:
            closed_at = time.monotonic() - t0
            break
        s.setblocking(True)
        s.settimeout(10)
    s.close()
    check(closed_at is not None and closed_at < IDLE_S + 2,
          f"a header sent a byte at a time: closed at the header deadline ({closed_at} s)")
    # Idle connections up to the per-client cap.
    idle = [connect(a) for _ in range(PER_CLIENT)]
    time.sleep(0.2)
    r = exchange(a, request("/health"))
    check(http_status(r) == 503 and b"127.0.0.1" in http_body(r),
          f"one more from 127.0.0.1: 503 at once ({http_body(r)[:90]!r})")
    t0 = time.monotonic()
    check(healthy(a, source="127.0.0.2") and time.monotonic() - t0 < 2,
          "a client from 127.0.0.2 is served meanwhile")
    time.sleep(IDLE_S + 1)
    closed = 0
    for s in idle:
        s.settimeout(2)
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        s.close()
    check(closed == PER_CLIENT, f"the idle connections are closed at the idle deadline "
          f"({closed} of {PER_CLIENT})")
    check(healthy(a), "127.0.0.1 is served again")


def half_close_cases(a, golden):
    n = len(golden["generated_tokens"])
    greedy = {"prompt": PROMPT, "max_tokens": n, "temperature": 0}
    r = exchange(a, request("/v1/completions", greedy), half_close=True)
    check(http_status(r) == 200 and json.loads(http_body(r))["choices"][0]["text"] == golden["text"],
          "a half-closed client gets its whole answer")
    r = exchange(a, request("/v1/completions", dict(greedy, stream=True)), half_close=True)
    events = [e[6:] for e in http_body(r).decode().split("\n") if e.startswith("data: ")]
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    check(http_status(r) == 200 and events and events[-1] == "[DONE]" and text == golden["text"],
          "a half-closed client gets its whole stream")
    s = connect(a)
    s.sendall(request("/v1/completions", {"prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True}))
    time.sleep(0.3)
    running = json.loads(http_body(exchange(a, request("/health"))))["running"]
    s.close()
    time.sleep(0.5)
    after = json.loads(http_body(exchange(a, request("/health"))))["running"]
    check(running == 1 and after == 0,
          f"a client that closed mid-answer frees the engine within 0.5 s ({running} -> {after})")


def reset_mid_stream_case(s, a, golden):
    """Clients that ask for a stream, read a few bytes of it (or none) and reset the
    connection, eight at a time for RESET_S seconds: a reset could land while the stream's
    head was being written, and the connection let the head go under the write (a
    use-after-free: the process died after some tens of resets)."""
    import random
    import struct
    deadline = time.monotonic() + RESET_S
    counts = [0] * 8
    body = json.dumps({"prompt": PROMPT, "max_tokens": 32, "stream": True})

    def resetting(i):
        rng = random.Random(i)
        while time.monotonic() < deadline and s.proc.poll() is None:
            try:
                c = connect(a, source="127.0.0.%d" % (3 + i))
                c.settimeout(5)
                c.sendall(request("/v1/completions", raw=body))
                if rng.random() < 0.5:
                    c.recv(rng.randint(1, 300))
                else:
                    time.sleep(rng.random() * 0.05)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
                counts[i] += 1
            except OSError:
                time.sleep(0.01)

    threads = [threading.Thread(target=resetting, args=(i,)) for i in range(len(counts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = s.proc.poll() is None
    check(alive and sum(counts) >= 50, f"{sum(counts)} streams reset mid-write: the server "
          f"lives on (exit status {s.proc.returncode})")
    n = len(golden["generated_tokens"])
    r = exchange(a, request("/v1/completions", {"prompt": PROMPT, "max_tokens": n,
                                                "temperature": 0})) if alive else b""
    check(http_status(r) == 200 and json.loads(http_body(r))["choices"][0]["text"] == golden["text"],
          "... and serves the golden text after them")


def never_reading_case(bin_dir, tmp, golden, n_seq):
    s = launch(bin_dir, tmp, "-np", str(n_seq), "--chat-template", "chatml")
    a = s.http
    n = len(golden["generated_tokens"])
    stuck = []
    # Events of ~1.7 KB (20 alternatives each): more than the kernel's socket buffers hold
    # long before the context is full, so the server's writes block.
    long_req = request("/v1/chat/completions", {
        "messages": [{"role": "user", "content": PROMPT}], "max_tokens": -1, "ignore_eos": True,
        "stream": True, "logprobs": True, "top_logprobs": 20, "temperature": 0})
    for _ in range(n_seq):
        c = connect(a, rcvbuf=1024)
        c.sendall(long_req)
        stuck.append(c)
    time.sleep(0.3)
    t0 = time.monotonic()
    r = exchange(a, request("/v1/completions", {"prompt": PROMPT, "max_tokens": n,
                                                "temperature": 0}), timeout=180)
    took = time.monotonic() - t0
    ok = http_status(r) == 200 and json.loads(http_body(r))["choices"][0]["text"] == golden["text"]
    check(ok, f"-np {n_seq}: {n_seq} never-reading client(s), a normal one served the golden "
          f"text in {took:.1f} s")
    deadline = time.monotonic() + 60
    log = ""
    while time.monotonic() < deadline:
        log = s.stderr()
        if log.count("did not") >= n_seq:
            break
        time.sleep(0.1)
    check(log.count("did not") >= n_seq, f"-np {n_seq}: the stuck clients were cancelled "
          f"({log.count('did not')} of {n_seq} logged)")
    check(healthy(a), f"-np {n_seq}: the server is healthy after them")
    for c in stuck:
        c.close()
    check(s.stop() == 0, f"-np {n_seq}: pi-launch stops cleanly")


def size_cases(s, a):
    for field in ("max_tokens", "top_k"):
        # Written by hand: 2^64 - 1 is an unsigned JSON integer.
        r = exchange(a, request("/v1/completions",
                                raw=f'{{"prompt": "{PROMPT}", "{field}": 18446744073709551615}}'))
        msg = json.loads(http_body(r) or b"{}").get("error", {}).get("message", "")
        check(http_status(r) == 400 and field in msg and "got -1" not in msg,
              f"{field} 2^64-1: 400 naming it ({msg!r})")
    r = exchange(a, request("/v1/completions", {"prompt": PROMPT, "stop": ["x"] * 100000}))
    msg = json.loads(http_body(r) or b"{}").get("error", {}).get("message", "")
    check(http_status(r) == 400 and "stop" in msg, f"100k stop strings: 400 ({msg!r})")
    results = []
    big = request("/v1/completions", {"prompt": "And God said " * 76000, "max_tokens": 1})

    def flood(i):
        results.append(exchange(a, big, source=f"127.0.1.{i % 200 + 1}", timeout=60))

    with Peaks(s.proc.pid) as peaks:
        threads = [threading.Thread(target=flood, args=(i,)) for i in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    statuses = [http_status(r) for r in results]
    msgs = {json.loads(http_body(r) or b"{}").get("error", {}).get("message", "")[:60] for r in results}
    check(statuses.count(400) == 48, f"48 concurrent 1 MB prompts: all 400 ({msgs})")
    check(peaks.rss - peaks.base_rss < 400 * MEMORY, f"... the server's memory rose "
          f"{peaks.rss - peaks.base_rss:.0f} MB (from {peaks.base_rss:.0f} MB; it was 2 GiB before "
          f"prompts were bounded by bytes)")


def main():
    bin_dir = sys.argv[1]
    with open(GOLDEN) as f:
        golden = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        key_file = os.path.join(tmp, "key")
        with open(key_file, "w") as f:
            f.write(KEY + "\n")
        s = launch(bin_dir, tmp, "--api-key-file", key_file)
        check(s.http is not None, "pi-launch --http serves")
        a = s.http
        framing_cases(a)
        slow_and_idle_cases(a)
        half_close_cases(a, golden)
        reset_mid_stream_case(s, a, golden)
        size_cases(s, a)
        # Connections the server closed itself (Connection: close) leave TIME_WAIT on its port.
        for _ in range(3):
            exchange(a, request("/health"))
        port = int(a.split(":")[1])
        check(s.stop() == 0 and "terminate" not in s.stderr(), "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, "--api-key-file", key_file, port=port)
        check(s.http == a and healthy(a), f"a restart on the same port binds at once ({s.http})")
        check(s.stop() == 0, "pi-launch stops cleanly")
        for n_seq in (1, 2):
            never_reading_case(bin_dir, tmp, golden, n_seq)
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A bounded hostile soak of pi-launch --http (-np 2): for SOAK_S seconds, normal clients
(greedy completions, whole and streamed, from 127.0.0.2) run beside hostile ones from
127.0.0.1 — idle connections, headers sent a byte at a time, streams never read (1 KiB
receive buffer), streams dropped mid-way with a reset, bodies over the limit, 70 KiB
trailers, 1 MB prompts, 100k stop strings. Every normal answer must equal the answer the
same request got alone before the soak; afterwards the server's threads, open descriptors
and memory must come back to their levels before it. All on 127.0.0.0/8.

Usage: hostile_soak_test.py BIN_DIR
"""

import json
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import (asan_memory_factor, check, finish, http_body,  # noqa: E402
                            http_final, launch_http, proc_status, recv_all)

SOAK_S = 20
PROMPTS = ["In the beginning God created", "And the earth was without form",
           "And God said, Let there be light"]

MEMORY = asan_memory_factor()  # memory bounds under AddressSanitizer


def launch(bin_dir, tmp):
    return launch_http(bin_dir, os.path.join(tmp, "soak.log"), "--cpu-workers", "0", "-np", "2",
                       "-c", "2048", "--timeout", "3", "--http-idle-timeout", "2",
                       "--http-max-connections-per-client", "24")


def connect(address, source, rcvbuf=None):
    host, port = address.split(":")
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(30)
    s.connect((host, int(port)))
    return s


def post(path, body_bytes, extra=b""):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body_bytes) + body_bytes)


def completion(address, prompt, stream):
    """The text of a greedy completion, or a "<failed: ...>" string saying how the request
    failed (its status line and the start of its body, or the stream's last event)."""
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0,
                       "stream": stream}).encode()
    s = connect(address, "127.0.0.2")
    try:
        s.sendall(post("/v1/completions", body))
        reply = recv_all(s)
    finally:
        s.close()
    if not http_final(reply).startswith(b"HTTP/1.1 200"):
        return "<failed: %r %r>" % (http_final(reply)[:40], http_body(reply)[:200])
    data = http_body(reply).decode(errors="replace")
    if not stream:
        return json.loads(data)["choices"][0]["text"]
    events = [e[6:] for e in data.split("\n") if e.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "<failed: no [DONE], %d events, last %r>" % (len(events), events[-1:])
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def hostile(address, kind, deadline, counts):
    """One hostile client's loop of `kind` until the deadline."""
    rng = random.Random(hash(kind))
    while time.monotonic() < deadline:
        try:
            if kind == "idle":
                s = connect(address, "127.0.0.1")
                s.settimeout(5)
                recv_all(s)  # until the idle deadline closes it
                s.close()
            elif kind == "slow":
                s = connect(address, "127.0.0.1")
                try:  # closed by the server at the header deadline
                    for ch in b"GET /health HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxx\r\n":
                        s.sendall(bytes([ch]))
                        time.sleep(0.3)
                except OSError:
                    pass
                s.close()
            elif kind == "never_reading":
                s = connect(address, "127.0.0.1", rcvbuf=1024)
                s.sendall(post("/v1/completions", json.dumps({
                    "prompt": "And God said", "max_tokens": -1, "ignore_eos": True,
                    "stream": True, "logprobs": 5}).encode()))
                time.sleep(5)
                s.close()
            elif kind == "dropping":
                s = connect(address, "127.0.0.1")
                s.sendall(post("/v1/completions", json.dumps({
                    "prompt": "And God said", "max_tokens": 64, "stream": True}).encode()))
                s.recv(rng.randint(1, 2000))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()  # a reset, mid-stream
            elif kind == "oversized":
                choice = rng.randint(0, 3)
                if choice == 0:
                    raw = post("/v1/completions", b"x" * (1536 << 10))
                elif choice == 1:
                    body = b'{"prompt": "a"}'
                    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                           b"chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\nX: " +
                           b"a" * 70000 + b"\r\n\r\n")
                elif choice == 2:
                    raw = post("/v1/completions", json.dumps(
                        {"prompt": "And God said " * 76000}).encode())
                else:
                    raw = post("/v1/completions", json.dumps(
                        {"prompt": "a", "stop": ["x"] * 100000}).encode())
                s = connect(address, "127.0.0.1")
                try:
                    s.sendall(raw)
                except OSError:
                    pass
                reply = recv_all(s)
                s.close()
                status = http_final(reply)[9:12]
                if status not in (b"400", b"413", b"431"):
                    counts["bad_refusals"] = counts.get("bad_refusals", 0) + 1
            counts[kind] = counts.get(kind, 0) + 1
        except OSError:
            counts[kind + "_errors"] = counts.get(kind + "_errors", 0) + 1
            time.sleep(0.05)


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        s = launch(bin_dir, tmp)
        check(s.http is not None, "pi-launch --http -np 2 serves")
        a = s.http
        solo = {p: completion(a, p, False) for p in PROMPTS}
        check(not any(v.startswith("<failed") for v in solo.values()),
              f"each prompt's answer alone ({solo})")
        time.sleep(1)
        pid = s.proc.pid
        base = (proc_status(pid, "Threads:"), fds(pid), proc_status(pid, "VmRSS:") / 1024)
        deadline = time.monotonic() + SOAK_S
        counts = {}
        hostiles = [threading.Thread(target=hostile, args=(a, kind, deadline, counts))
                    for kind in ("idle", "idle", "idle", "slow", "slow", "never_reading",
                                 "never_reading", "dropping", "dropping", "oversized")]
        for t in hostiles:
            t.start()
        answers, wrong = [0, 0, 0], []

        def normal(i):
            k = 0
            while time.monotonic() < deadline:
                prompt = PROMPTS[(i + k) % len(PROMPTS)]
                try:
                    got = completion(a, prompt, stream=k % 2 == 1)
                except OSError as e:  # a timeout: this client was stalled
                    got = "<failed: %r>" % e
                if got != solo[prompt]:
                    wrong.append((prompt, got))
                answers[i] += 1
                k += 1

        normals = [threading.Thread(target=normal, args=(i,)) for i in range(len(answers))]
        for t in normals:
            t.start()
        for t in normals + hostiles:
            t.join()
        if s.proc.poll() is not None:  # the server itself fell: say how, with its last words
            check(False, f"pi-launch still runs after the soak (exit status {s.proc.returncode}; "
                         f"its log ends: {s.stderr()[-2000:]!r})")
        # No normal client stalled: each got answers all through the soak (at least 2 in its
        # 20 s, whatever else the machine runs), every one its solo answer.
        check(not wrong and min(answers) >= 2,
              f"{answers} normal answers (per client) beside hostile clients, every one its solo "
              f"answer ({len(wrong)} wrong: {wrong[:2]}); hostile rounds {sorted(counts.items())}")
        check(counts.get("bad_refusals", 0) == 0, "every oversized request refused 400/413/431")
        # Back to the levels before the soak (the idle and stuck connections close by their
        # deadlines: 2 s idle, 3 s writes).
        after = base
        settle = time.monotonic() + 20
        while time.monotonic() < settle:
            after = (proc_status(pid, "Threads:"), fds(pid), proc_status(pid, "VmRSS:") / 1024)
            if after[0] <= base[0] and after[1] <= base[1] + 2:
                break
            time.sleep(0.25)
        check(after[0] <= base[0] and after[1] <= base[1] + 2 and after[2] - base[2] < 64 * MEMORY,
              f"threads {base[0]} -> {after[0]}, descriptors {base[1]} -> {after[1]}, RSS "
              f"{base[2]:.0f} -> {after[2]:.0f} MB after the soak")
        check(completion(a, PROMPTS[0], True) == solo[PROMPTS[0]], "served normally after it")
        check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

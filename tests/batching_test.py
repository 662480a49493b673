#!/usr/bin/env python3
"""Continuous batching (pi-launch -np N): requests generating at once, each step evaluating
them all together, and each request's greedy answer equal to its answer alone.

On the demo model stored with ffn_down_t (--sparse oracle):
- 1, 2, 4 and 8 concurrent requests of different prompts and lengths (streamed or not)
  against -np 4: each equals the answer of a server running one request at a time; with 8,
  four wait for a free sequence; /health shows them running together;
- the same with the split in three processes (hot neurons in a gpu worker, cold ones in a
  cpu worker), and on the device path (whole layers in the gpu worker, --host-device, a KV
  cache per sequence there), each against the same setup run one at a time;
- a client dropping its stream frees its sequence (the next request runs beside the other);
- overload (-np 2 --max-queue 1): refusals (503), then every request is served again and
  nothing is left running.

Usage: batching_test.py BIN_DIR
"""

import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

PROMPTS = ["In the beginning God created", "And the earth was", "Blessed are the",
           "The LORD is my shepherd", "And it came to pass", "Hear, O Israel",
           "For God so loved", "Let there be light"]


def logprobs_of(address, body):
    """A whole completion's token_logprobs."""
    _, _, r = call(address, "POST", "/v1/completions", body)
    return r["choices"][0]["logprobs"]["token_logprobs"]


def complete(address, body, logprobs=False):
    """The text of a completion, streamed or not (with `logprobs`: its streamed
    token_logprobs instead); None on an error status."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps(body))
    r = conn.getresponse()
    if r.status != 200:
        r.read()
        conn.close()
        return None
    if not body.get("stream"):
        text = json.loads(r.read())["choices"][0]["text"]
    else:
        text, values = "", []
        for line in r.read().decode().split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                if choice.get("logprobs"):
                    values += choice["logprobs"]["token_logprobs"]
        if logprobs:
            text = values
    conn.close()
    return text


def body(i, n=None):
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": n or (8 + 5 * i),
            "temperature": 0, "stream": i % 2 == 1}


def concurrently(address, bodies, watch=None, logprobs=False):
    """The texts (or streamed logprobs) of the requests sent at once; `watch` runs meanwhile."""
    out = [None] * len(bodies)

    def one(i):
        out[i] = complete(address, bodies[i], logprobs)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    if watch:
        watch()
    for t in threads:
        t.join(timeout=600)
    return out


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        served = ["-m", demo_t, "--sparse", "oracle", "-t", "2", "-c", "2048", "-b", "8"]
        for setup, extra in (("one process", ["--cpu-workers", "0"]),
                             ("the split in three processes",
                              ["--vram-budget", "16M", "--ffn-backend", "host", "--cpu-workers",
                               "1"]),
                             # Whole layers in the gpu worker, a KV cache per sequence there (a
                             # budget that holds them all at -np 1 and 4 alike: the same plan).
                             ("the device path in a gpu worker",
                              ["--vram-budget", "64M", "--host-device", "--cpu-workers", "1"])):
            alone = launch(bin_dir, tmp, *served, *extra)
            together = launch(bin_dir, tmp, *served, *extra, "-np", "4")
            check(alone.http and together.http, f"{setup}: a server of -np 1 and one of -np 4")
            solo = {}
            for i in range(8):
                solo[i] = complete(alone.http, dict(body(i), stream=False))
            for c in (1, 2, 4, 8):
                got = concurrently(together.http, [body(i) for i in range(c)])
                check(got == [solo[i] for i in range(c)],
                      f"{setup}: {c} at once, each equals its answer alone")
            # Running together, seen without timing: four long streams, each past its
            # first token, hold their sequences until dropped.
            host, port = together.http.split(":")
            streams = []
            for i in range(4):
                conn = http.client.HTTPConnection(host, int(port), timeout=300)
                conn.request("POST", "/v1/completions", body=json.dumps(
                    {"prompt": PROMPTS[i], "max_tokens": 100000, "ignore_eos": True,
                     "temperature": 0, "stream": True}))
                r = conn.getresponse()
                r.readline()
                streams.append(conn)
            st, _, h = call(together.http, "GET", "/health")
            check(st == 200 and h["running"] == 4, f"{setup}: /health shows 4 running together "
                                                   f"({h.get('running')})")
            for conn in streams:
                conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
            # Streamed logprobs from four at once equal the ones-at-a-time server's.
            lp_bodies = [dict(body(i, 10), logprobs=2, stream=True) for i in range(4)]
            got = concurrently(together.http, lp_bodies, logprobs=True)
            want = [logprobs_of(alone.http, dict(b, stream=False)) for b in lp_bodies]
            check(got == want and all(len(w) == 10 for w in want),
                  f"{setup}: streamed logprobs of 4 at once equal their values alone "
                  f"({[len(g or []) for g in got]} {[len(w) for w in want]}; "
                  f"{[(a, b) for g, w in zip(got, want) for a, b in zip(g or [], w) if a != b][:3]})")
            if "--host-device" in extra:
                st, _, r = call(alone.http, "POST", "/v1/embeddings", {"input": "a"})
                check(st == 400 and "host path only" in r["error"]["message"],
                      f"{setup}: embeddings refused with a 400 saying why ({st})")
            check(alone.stop() == 0 and together.stop() == 0, f"{setup}: both stop cleanly")

        # A dropped stream frees its sequence: with -np 2, one long stream keeps going,
        # one is dropped, and a third request runs beside the first.
        s = launch(bin_dir, tmp, *served, "-np", "2", "--max-queue", "0")
        host, port = s.http.split(":")
        streams = []
        for _ in range(2):
            conn = http.client.HTTPConnection(host, int(port), timeout=300)
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": PROMPTS[0], "max_tokens": 400, "temperature": 0, "stream": True}))
            r = conn.getresponse()
            r.readline()
            streams.append((conn, r))
        check(complete(s.http, body(2)) is None, "both sequences busy (-np 2, --max-queue 0): 503")
        streams[1][0].sock.shutdown(socket.SHUT_RDWR)
        streams[1][0].close()
        deadline = time.monotonic() + 30
        text = None
        while time.monotonic() < deadline and text is None:
            text = complete(s.http, dict(body(2), stream=False))
            time.sleep(0.05)
        check(text is not None, "the dropped stream's sequence is free: the next request runs")
        rest = streams[0][1].read().decode()
        check("[DONE]" in rest, "the other stream ran on to its end")
        streams[0][0].close()
        check(s.stop() == 0, "pi-launch stops cleanly")

        # Overload: -np 2, one may wait; ten at once: some refused, then all served.
        s = launch(bin_dir, tmp, *served, "-np", "2", "--max-queue", "1")
        got = concurrently(s.http, [body(i, 24) for i in range(10)])
        refused = got.count(None)
        check(refused >= 1 and refused <= 7, f"overload: {refused} of 10 refused (503)")
        got = concurrently(s.http, [body(i, 24) for i in range(3)])
        check(None not in got, "then every request is served again")
        st, _, h = call(s.http, "GET", "/health")
        check(st == 200 and h["running"] == 0 and h["queued"] == 0, "nothing left running")
        check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

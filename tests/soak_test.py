#!/usr/bin/env python3
"""A bounded soak of the HTTP API: 200 requests from 8 clients at once, with random lengths,
streamed or not, some dropped mid-stream, against pi-launch with the split in three
processes (the device's layers in a gpu worker, --host-device; the cold neurons in a cpu
worker) and a short queue (--max-queue 4: some requests are refused with 503 and retried).

Afterwards: the server is up, nothing is running or queued (/metrics), the requests by
outcome add up to what the clients saw, and every completed response equals the answer
the same request gets alone (greedy: the same prompt and length give the same text).

Usage: soak_test.py BIN_DIR
"""

import http.client
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402
from metrics_test import parse_metrics, value  # noqa: E402

CLIENTS = 8
REQUESTS = 200
PROMPTS = ["In the beginning God created", "And the earth was", "Blessed are the",
           "The LORD is my shepherd", "And it came to pass"]

def request(address, body, drop_after=None):
    """("completed", text) | ("dropped", None) | ("refused", None) | ("error", why)."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body))
        r = conn.getresponse()
        if r.status == 503:
            r.read()
            return "refused", None
        if r.status != 200:
            return "error", f"{r.status} {r.read()[:200]!r}"
        if not body.get("stream"):
            return "completed", json.loads(r.read())["choices"][0]["text"]
        text, events = "", 0
        while True:
            line = r.readline().decode()
            if not line:
                return "error", "the stream ended without [DONE]"
            if not line.startswith("data: "):
                continue
            data = line[6:].strip()
            if data == "[DONE]":
                return "completed", text
            text += json.loads(data)["choices"][0]["text"]
            events += 1
            if drop_after is not None and events >= drop_after:
                conn.sock.shutdown(socket.SHUT_RDWR)
                return "dropped", None
    except OSError as e:
        return "error", str(e)
    finally:
        conn.close()


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        p = launch(bin_dir, tmp, "-m", demo_t, "--sparse", "oracle", "--vram-budget", "8M",
                   "--host-device", "--cpu-workers", "1", "--max-queue", "4")
        check(p.http is not None, "pi-launch --http with a gpu worker and a cpu worker")

        rng = random.Random(1234)
        plans = []  # (body, drop_after) for every request, drawn up front
        for i in range(REQUESTS):
            body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(1, 40),
                    "temperature": 0, "stream": rng.random() < 0.6}
            drop = rng.randint(1, 8) if body["stream"] and rng.random() < 0.25 else None
            plans.append((body, drop))
        results = [None] * REQUESTS
        refusals = [0] * REQUESTS
        next_index = [0]
        lock = threading.Lock()

        def rng_sleep(i):  # 20 to 120 ms, so the retries do not march in step
            return 0.02 + 0.1 * ((i * 7919) % 101) / 100

        def client():
            while True:
                with lock:
                    i = next_index[0]
                    next_index[0] += 1
                if i >= REQUESTS:
                    return
                body, drop = plans[i]
                give_up = time.monotonic() + 120  # refused while the queue is full: retry, bounded
                while True:
                    outcome = request(p.http, body, drop)
                    if outcome[0] != "refused" or time.monotonic() > give_up:
                        break
                    refusals[i] += 1
                    time.sleep(rng_sleep(i))
                results[i] = outcome

        t0 = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        elapsed = time.monotonic() - t0
        kinds = [r[0] if r else "unfinished" for r in results]
        counts = {k: kinds.count(k) for k in sorted(set(kinds))}
        print(f"{REQUESTS} requests from {CLIENTS} clients in {elapsed:.1f} s: {counts}, "
              f"{sum(refusals)} refusals retried", flush=True)
        errors = [r[1] for r in results if r and r[0] == "error"]
        check(not errors and "unfinished" not in counts,
              f"every request completed or was dropped by its client ({errors[:3]})")
        check(sum(refusals) > 0 and counts.get("dropped", 0) > 0,
              "the soak exercised refusals (queue full) and dropped streams")

        deadline = time.monotonic() + 30
        samples = {}
        total_seen = REQUESTS + sum(refusals)
        while time.monotonic() < deadline:
            samples, _ = parse_metrics(call(p.http, "GET", "/metrics")[2])
            outcomes = sum(value(samples, "pi_requests_total", outcome=o) or 0
                           for o in ("completed", "cancelled", "error", "rejected"))
            if outcomes == total_seen and value(samples, "pi_requests_running") == 0:
                break
            time.sleep(0.1)
        check(value(samples, "pi_requests_running") == 0 and value(samples, "pi_requests_queued") == 0,
              "nothing running or queued afterwards (no leaked slot)")
        # A stream dropped just as it ended may have completed on the server.
        served = {o: value(samples, "pi_requests_total", outcome=o) for o in
                  ("completed", "cancelled", "error", "rejected")}
        check(served["rejected"] == sum(refusals) + counts.get("refused", 0) and served["error"] == 0
              and served["completed"] + served["cancelled"]
              == counts.get("completed", 0) + counts.get("dropped", 0)
              and served["cancelled"] <= counts.get("dropped", 0),
              f"the server's requests by outcome match what the clients saw ({served})")

        # Every completed response equals the same request's answer alone.
        solo, wrong = {}, []
        for (body, _), r in zip(plans, results):
            if r[0] != "completed":
                continue
            key = (body["prompt"], body["max_tokens"])
            if key not in solo:
                st, _, j = call(p.http, "POST", "/v1/completions",
                                {"prompt": key[0], "max_tokens": key[1], "temperature": 0})
                solo[key] = j["choices"][0]["text"] if st == 200 else None
            if r[1] != solo[key]:
                wrong.append((key, r[1], solo[key]))
        check(not wrong, f"every completed response equals its answer alone ({len(solo)} distinct "
                         f"requests; wrong: {wrong[:2]})")
        check(call(p.http, "GET", "/health")[0] == 200, "the server is healthy afterwards")
        check(p.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

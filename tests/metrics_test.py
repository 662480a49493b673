#!/usr/bin/env python3
"""/metrics, read by us and scraped by a real Prometheus.

pi-launch --http with the split in three processes (the device's layers in a gpu worker,
--host-device; the cold neurons in a cpu worker) on the demo model stored with ffn_down_t:
- after a completed request, a streamed one the client drops, and a refused one (queue
  full), /metrics (Prometheus's text format) counts them by outcome, counts the prompt and
  generated tokens, and holds well-formed histograms (cumulative buckets, +Inf = count) for
  the time to first token, the per-token latency and each worker's step round trips, the
  FFN neurons computed per layer on each side, and the predictor threshold; running and
  queued are back to 0;
- Debian's prometheus, started on loopback with a config scraping the coordinator, shows
  the same series through its HTTP API (skipped, saying so, only where prometheus is not
  installed: exit 77).

Usage: metrics_test.py BIN_DIR
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import PROMPT, call, launch  # noqa: E402

def parse_metrics(text):
    """{(name, frozenset(labels)): value} and {name: type} of a text exposition."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        assert m, f"malformed sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                      m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples, types


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def histogram_ok(samples, name, **labels):
    """Buckets cumulative and ascending, +Inf equal to _count; returns the count."""
    buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in samples.items()
                      if k[0] == name + "_bucket" and
                      dict(k[1]).items() - {("le", dict(k[1])["le"])} == set(labels.items())),
                     key=lambda b: b[0])
    counts = [v for _, v in buckets]
    count = value(samples, name + "_count", **labels)
    ok = (len(buckets) > 1 and buckets[-1][0] == float("inf") and counts == sorted(counts)
          and counts[-1] == count and value(samples, name + "_sum", **labels) is not None)
    return count if ok else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_query(base, query):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        data = json.load(r)
    return data["data"]["result"] if data.get("status") == "success" else None


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        p = launch(bin_dir, tmp, "-m", demo_t, "--sparse", "oracle", "--vram-budget", "8M",
                   "--host-device", "--cpu-workers", "1", "--max-queue", "0")
        check(p.http is not None, "pi-launch --http with a gpu worker and a cpu worker")

        status, _, j = call(p.http, "POST", "/v1/completions",
                            {"prompt": PROMPT, "max_tokens": 16, "temperature": 0})
        check(status == 200 and j["usage"]["completion_tokens"] == 16, "a completed request")
        prompt_tokens = j["usage"]["prompt_tokens"]
        # A streamed request whose client goes away, and one refused meanwhile (--max-queue 0).
        host, port = p.http.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": PROMPT, "max_tokens": 100000, "temperature": 0, "stream": True}))
        r = conn.getresponse()
        r.readline()  # the first event: it is running
        status, headers, _ = call(p.http, "POST", "/v1/completions",
                                  {"prompt": PROMPT, "max_tokens": 4})
        check(status == 503, "a request beyond the queue is refused (503)")
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        deadline = time.monotonic() + 30
        samples = {}
        while time.monotonic() < deadline:
            status, headers, text = call(p.http, "GET", "/metrics")
            samples, types = parse_metrics(text)
            if value(samples, "pi_requests_total", outcome="cancelled") == 1:
                break
            time.sleep(0.1)
        check(status == 200 and headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
              "GET /metrics: Prometheus's text format")
        check(value(samples, "pi_requests_total", outcome="completed") == 1
              and value(samples, "pi_requests_total", outcome="cancelled") == 1
              and value(samples, "pi_requests_total", outcome="rejected") == 1
              and value(samples, "pi_requests_total", outcome="error") == 0,
              "requests by outcome: 1 completed, 1 cancelled (the client went away), 1 rejected")
        check(value(samples, "pi_requests_running") == 0 and value(samples, "pi_requests_queued") == 0,
              "nothing running or queued afterwards")
        generated = value(samples, "pi_generated_tokens_total")
        # (The second request's prompt is the first's: taken whole from the cache.)
        check(value(samples, "pi_prompt_tokens_total") == prompt_tokens and generated > 16,
              f"prompt tokens evaluated and generated tokens counted ({generated:.0f} generated)")
        first = histogram_ok(samples, "pi_time_to_first_token_seconds")
        per_token = histogram_ok(samples, "pi_token_seconds")
        check(types.get("pi_time_to_first_token_seconds") == "histogram" and first == 2
              and per_token == generated - 2,
              f"histograms: a first token per run request ({first}), a latency per later token "
              f"({per_token})")
        gpu = histogram_ok(samples, "pi_worker_step_seconds", worker="gpu", transport="shm")
        cpu = histogram_ok(samples, "pi_worker_step_seconds", worker="cpu 0", transport="shm")
        check(gpu and gpu > 0 and cpu and cpu > 0,
              f"step round trips of the gpu worker ({gpu:.0f}) and the cpu worker ({cpu:.0f})")
        hot = value(samples, "pi_ffn_neurons_computed_total", layer="device", side="hot")
        cold = sum(v for (n, l), v in samples.items()
                   if n == "pi_ffn_neurons_computed_total" and ("side", "cold") in l)
        check(hot > 0 and cold > 0, f"FFN neurons computed: {hot:.0f} hot, {cold:.0f} cold")
        check(value(samples, "pi_predictor_threshold") == 0, "the predictor threshold (none)")

        if shutil.which("prometheus") is None:
            print("SKIP the Prometheus scrape: prometheus is not installed "
                  "(scripts/install_deps.sh --tests installs it)")
            p.stop()
            finish(skipped=True)
        port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: pi\n    static_configs:\n"
                    f"      - targets: ['{p.http}']\n")
        with open(os.path.join(tmp, "prometheus.log"), "w") as log:
            prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                                     f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                     f"--web.listen-address=127.0.0.1:{port}"],
                                    stdout=log, stderr=log)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            got = None
            while time.monotonic() < deadline:
                try:
                    got = prometheus_query(base, "pi_generated_tokens_total")
                    if got:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            check(got and float(got[0]["value"][1]) == generated,
                  f"Prometheus scraped pi_generated_tokens_total ({got and got[0]['value'][1]})")
            up = prometheus_query(base, 'up{job="pi"}')
            check(up and up[0]["value"][1] == "1", "the coordinator target is up")
            q = prometheus_query(base, 'sum by (worker) (pi_worker_step_seconds_count)')
            workers = sorted(x["metric"].get("worker") for x in q or [])
            check(workers == ["cpu 0", "gpu"], f"per-worker step histograms arrive ({workers})")
            q = prometheus_query(base, "histogram_quantile(0.5, pi_token_seconds_bucket)")
            check(q and float(q[0]["value"][1]) > 0,
                  f"histogram_quantile over the token latency works ({q and q[0]['value'][1]})")
        finally:
            prom.terminate()
            prom.wait(timeout=30)
        check(p.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

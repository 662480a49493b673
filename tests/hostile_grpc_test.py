#!/usr/bin/env python3
"""pi-launch's gRPC client port and its failures, against hostile or broken clients (Python
gRPC stubs generated here from proto/pi.proto, and raw sockets), all on 127.0.0.1:

- one key for every client port: with --api-key-file, Generate, Tokenize and Models without
  the key are UNAUTHENTICATED (Health stays open), pi-client --api-key-file is served; an
  empty --api-key, a short one, and both flags at once are refused at start;
- Generates that are never read (a raw HTTP/2 client that grants no flow-control window
  past the first 64 KiB), one with -np 1 and two with -np 2: the engine finishes them while
  their clients read nothing (the engine never writes to a client; gRPC takes the replies
  into its buffers), and a normal request is served the golden text after them;
- 12 concurrent Tokenize calls of 0.9 MB: each served or refused RESOURCE_EXHAUSTED (a few
  tokenize at once), the server's memory bounded; 3.9 MB: INVALID_ARGUMENT;
- HTTP/2 rapid reset (a hand-written client: streams opened and reset at once, reconnecting
  when cut), 4 connections for 5 s: the guard cuts each connection past its reset budget,
  threads and memory stay bounded, Health answers at once after; connections beyond the
  per-client cap are closed at once;
- a generation that fails mid-stream (the gpu worker of the device path killed after its
  model file was deleted, so it cannot come back): the SSE stream ends with an error event
  in OpenAI's shape and no [DONE]; gRPC's Generate ends with INTERNAL naming the failure;
  /metrics counts the requests as errors.

Usage: hostile_grpc_test.py BIN_DIR PROTOC GRPC_PYTHON_PLUGIN
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import (ServerProcess, asan_memory_factor, check, child_pids,  # noqa: E402
                            demo_down_t, finish, import_stubs, launch_http, Peaks)
import h2_raw  # noqa: E402

GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"
KEY = "a-grpc-test-key-0123456789"

MEMORY = asan_memory_factor()  # memory bounds under AddressSanitizer


def launch(bin_dir, tmp, *args, http=False):
    log = os.path.join(tmp, f"launch-{time.monotonic_ns()}.log")
    if http:
        return launch_http(bin_dir, log, "--timeout", "3", *args)
    return ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0",
                          "--timeout", "3", *args], log)


def key_cases(bin_dir, tmp, grpc, pb, pb_grpc, golden):
    key_file = os.path.join(tmp, "key")
    with open(key_file, "w") as f:
        f.write(KEY + "\n")
    launcher = os.path.join(bin_dir, "pi-launch")
    for args, words in ((["--api-key", ""], "empty"), (["--api-key", "a"], "16 to 4096"),
                        (["--api-key", KEY, "--api-key-file", key_file], "give one")):
        p = subprocess.run([launcher, "--listen", "127.0.0.1:0", *args], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 2 and words in p.stderr,
              f"pi-launch {' '.join(args)[:40]!r}: refused ({p.stderr.strip()[-80:]!r})")
    s = launch(bin_dir, tmp, "--cpu-workers", "0", "--api-key-file", key_file)
    stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(s.address))
    req = pb.GenerateRequest(prompt=PROMPT, n_predict=4)
    for name, call in (("Generate", lambda md: list(stub.Generate(req, metadata=md, timeout=60))),
                       ("Tokenize", lambda md: stub.Tokenize(pb.TokenizeRequest(text="a"),
                                                             metadata=md, timeout=60)),
                       ("Models", lambda md: stub.Models(pb.ModelsRequest(), metadata=md,
                                                         timeout=60))):
        codes = []
        for md in ((), (("authorization", "Bearer wrong-key-0123456789"),),
                   (("authorization", "Bearer " + KEY),)):
            try:
                call(md)
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code().name)
        check(codes == ["UNAUTHENTICATED", "UNAUTHENTICATED", "OK"],
              f"{name}: no key, a wrong key, the key: {codes}")
    check(stub.Health(pb.HealthRequest(), timeout=30).status == "ok", "Health needs no key")
    client = os.path.join(bin_dir, "pi-client")
    n = len(golden["generated_tokens"])
    p = subprocess.run([client, "--server", s.address, "-p", PROMPT, "-n", str(n), "--temp", "0",
                        "--json", "--api-key-file", key_file], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0 and json.loads(p.stdout)["generated_tokens"] == golden["generated_tokens"],
          "pi-client --api-key-file: the golden greedy sequence")
    p = subprocess.run([client, "--server", s.address, "-p", PROMPT, "-n", "4"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "not allowed" in p.stderr,
          f"pi-client without the key: refused ({p.stderr.strip()[-80:]!r})")
    check(s.stop() == 0, "pi-launch stops cleanly")


def never_read_case(s, grpc, pb, pb_grpc, golden, n_seq):
    """n_seq Generate calls never read (a raw HTTP/2 client that grants no flow-control window
    past the first 64 KiB; their replies come to ~150 KB each), then a normal one: the engine
    must not wait on them."""
    stuck = []
    for _ in range(n_seq):
        a = h2_raw.Attacker(s.address, "/pi.v1.Coordinator/Generate", pb.GenerateRequest(
            prompt=PROMPT, n_predict=600, ignore_eos=True, logprobs=True,
            top_logprobs=20).SerializeToString())
        a.open()
        stuck.append(a)
    time.sleep(0.3)
    n = len(golden["generated_tokens"])
    other = pb_grpc.CoordinatorStub(grpc.insecure_channel(s.address))
    ids = [r.token.id for r in other.Generate(pb.GenerateRequest(
        prompt=PROMPT, n_predict=n, sampling=pb.SamplingParams(temperature=0)), timeout=300)
        if r.HasField("token") and r.token.id >= 0]
    # With -np 2 on a fast machine the next request can share the batch with the second stuck
    # one and end first; what matters is that every stuck one ends while its client reads
    # nothing, so wait for them (bounded) instead of racing them.
    deadline = time.time() + 120
    while True:
        log = s.stderr()
        finished = log.count("6 prompt + 600 tokens")
        if finished >= n_seq or time.time() > deadline:
            break
        time.sleep(0.2)
    check(finished == n_seq and f"request {n_seq + 1}:" in log,
          f"-np {n_seq}: {n_seq} Generate(s) never read: the engine finishes them while their "
          f"clients read nothing ({finished} logged), then serves the next")
    check(ids == golden["generated_tokens"], f"-np {n_seq}: the next is served the golden sequence")
    for a in stuck:
        a.sock.close()


def stuck_and_flood_cases(bin_dir, tmp, grpc, pb, pb_grpc, golden):
    s = launch(bin_dir, tmp, "--cpu-workers", "0", "-c", "4096")
    channel = grpc.insecure_channel(s.address)
    stub = pb_grpc.CoordinatorStub(channel)
    never_read_case(s, grpc, pb, pb_grpc, golden, 1)

    codes = []
    text = "And God said " * 70000  # 0.9 MB

    def tokenize():
        try:
            stub.Tokenize(pb.TokenizeRequest(text=text), timeout=120)
            codes.append("OK")
        except grpc.RpcError as e:
            codes.append(e.code().name)

    with Peaks(s.proc.pid) as peaks:
        threads = [threading.Thread(target=tokenize) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    check(len(codes) == 12 and set(codes) <= {"OK", "RESOURCE_EXHAUSTED"} and "OK" in codes,
          f"12 concurrent 0.9 MB Tokenize calls: served or refused ({sorted(codes)})")
    check(peaks.rss - peaks.base_rss < 600 * MEMORY, f"... the server's memory rose "
          f"{peaks.rss - peaks.base_rss:.0f} MB (from {peaks.base_rss:.0f} MB)")
    try:
        stub.Tokenize(pb.TokenizeRequest(text="x" * (3900 << 10)), timeout=60)
        code = "OK"
    except grpc.RpcError as e:
        code = e.code().name
    check(code == "INVALID_ARGUMENT", f"a 3.9 MB Tokenize: {code}")
    check(s.stop() == 0, "pi-launch stops cleanly")
    s = launch(bin_dir, tmp, "--cpu-workers", "0", "-c", "4096", "-np", "2")
    never_read_case(s, grpc, pb, pb_grpc, golden, 2)
    check(s.stop() == 0, "pi-launch -np 2 stops cleanly")


def rapid_reset_case(bin_dir, tmp, grpc, pb, pb_grpc):
    s = launch(bin_dir, tmp, "--cpu-workers", "0")
    stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(s.address))
    stub.Health(pb.HealthRequest(), timeout=30)
    message = pb.GenerateRequest(prompt=PROMPT, n_predict=8).SerializeToString()
    with Peaks(s.proc.pid) as peaks:
        streams, connections = h2_raw.attack(s.address, "/pi.v1.Coordinator/Generate", message,
                                             4, 5)
    # Calls the attack relayed before its connections were cut may still hold
    # the server's threads for a moment; meanwhile a new call is refused
    # (RESOURCE_EXHAUSTED, gRPC's code to retry later), never queued behind
    # them. Health must answer within 5 s.
    t0 = time.monotonic()
    health, refusals = None, 0
    while health is None and time.monotonic() - t0 < 5:
        try:
            health = stub.Health(pb.HealthRequest(), timeout=5).status
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            refusals += 1
            time.sleep(0.1)
    took = time.monotonic() - t0
    # 25 gRPC threads at most (-np 1 + --max-queue 8 + 16) and the process's own.
    check(peaks.threads - peaks.base_threads <= 40 and peaks.rss - peaks.base_rss < 200 * MEMORY,
          f"rapid reset, 4 connections x 5 s ({streams} streams, {connections} connections): "
          f"threads {peaks.base_threads} -> {peaks.threads}, RSS {peaks.base_rss:.0f} -> "
          f"{peaks.rss:.0f} MB (it was "
          f"6,793 threads without a cap, 3.5 GB queued with a cap alone)")
    check(health == "ok" and took < 5, f"... Health answers after it ({took:.2f} s, "
          f"{refusals} busy refusal(s) first)")
    check(s.stderr().count("reset streams faster than its budget") >= 4,
          "... the resetting connections were cut (logged)")
    # Connections over the per-client cap (32) are closed at once.
    host, port = s.address.split(":")
    held = [socket.create_connection((host, int(port))) for _ in range(40)]
    time.sleep(0.3)
    closed = 0
    for c in held:
        c.settimeout(0.5)
        try:
            closed += c.recv(1) == b""
        except socket.timeout:
            pass
        except OSError:
            closed += 1
    check(closed >= 8, f"40 connections from one address: {closed} beyond the cap closed at once")
    for c in held:
        c.close()
    check(s.stop() == 0, "pi-launch stops cleanly")


def mid_stream_failure_case(bin_dir, tmp, grpc, pb, pb_grpc):
    model = demo_down_t(bin_dir, tmp, profile=True)
    s = launch(bin_dir, tmp, "-m", model, "--sparse", "oracle", "--vram-budget", "20M",
               "--host-device", "--worker-timeout", "300", "--chat-template", "chatml", http=True)
    check(s.http is not None, "pi-launch --host-device --http serves")
    # The model's files gone (the coordinator keeps its mapping): a gpu worker that dies
    # cannot be brought back.
    for name in os.listdir(tmp):
        if name.startswith("demo-down-t"):
            os.remove(os.path.join(tmp, name))
    host, port = s.http.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/completions", json.dumps({
        "prompt": PROMPT, "max_tokens": 200, "ignore_eos": True, "stream": True,
        "temperature": 0}))
    r = conn.getresponse()
    events, killed = [], False
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        events.append(line[6:])
        if len(events) == 10 and not killed:
            for pid in child_pids(s.proc.pid, "pi-gpu-worker"):
                os.kill(pid, signal.SIGKILL)
            killed = True
    conn.close()
    last = json.loads(events[-1]) if events and events[-1] != "[DONE]" else {}
    check(killed and "error" in last and last["error"]["code"] == 500
          and "[DONE]" not in events
          and not any('"finish_reason":"stop"' in e or '"finish_reason": "stop"' in e
                      for e in events),
          f"SSE: a failure mid-stream ends with an error event, no [DONE] "
          f"({last.get('error', {}).get('message', events[-1] if events else '')[:100]!r})")
    stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(s.address))
    try:
        list(stub.Generate(pb.GenerateRequest(prompt=PROMPT, n_predict=20), timeout=120))
        code, details = "OK", ""
    except grpc.RpcError as e:
        code, details = e.code().name, e.details()
    check(code == "INTERNAL" and "failed" in details,
          f"gRPC: the failing generation ends with {code} ({details[:100]!r})")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    errors = [line for line in metrics.splitlines()
              if line.startswith('pi_requests_total{outcome="error"}')]
    check(errors and float(errors[0].split()[-1]) >= 2,
          f"/metrics counts them as errors ({errors})")
    s.stop()


def main():
    bin_dir, protoc, plugin = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(GOLDEN) as f:
        golden = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        stubs = os.path.join(tmp, "stubs")
        os.makedirs(stubs)
        pb, pb_grpc = import_stubs(protoc, plugin, stubs)
        import grpc
        key_cases(bin_dir, tmp, grpc, pb, pb_grpc, golden)
        stuck_and_flood_cases(bin_dir, tmp, grpc, pb, pb_grpc, golden)
        rapid_reset_case(bin_dir, tmp, grpc, pb, pb_grpc)
        mid_stream_failure_case(bin_dir, tmp, grpc, pb, pb_grpc)
    finish()


if __name__ == "__main__":
    main()

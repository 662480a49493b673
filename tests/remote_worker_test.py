#!/usr/bin/env python3
"""Remote cpu workers over gRPC (pi-cpu-worker --listen), end to end on 127.0.0.1.

On the demo model stored with ffn_down_t (--sparse oracle unless said):
- pi-run with the cold neurons on a remote worker, on one local and one remote worker,
  and with --sparse off, generates the golden greedy sequence (tests/data/demo_greedy.json,
  from the numpy reference); pi-launch with a local and a remote worker serves it to
  pi-client, and Models lists both with their transports.
- Security: a wrong token and a missing one are refused (UNAUTHENTICATED, logged by the
  worker); a coordinator with another model, a hello of another protocol version, and a
  shard that does not fit are refused with messages saying which; malformed step frames
  (sizes, layer, ids outside the shard, unsorted, duplicates) each get an error reply and
  the worker serves on. The Python side here is a client of its own, generated from
  proto/pi.proto, packing step frames by hand from the documented layout.
- Faults: the remote worker SIGKILLed mid-generation leaves the answer unchanged, and a
  worker started again on the same port is reconnected; a SIGSTOPped worker is lost at its
  step deadline (--worker-timeout), the answer unchanged; through the TCP fault proxy
  (pi-fault-proxy), a blackholed path mid-generation leaves the answer unchanged, a worker
  that does not come back costs nothing but time (the next request is served, Health says
  degraded), and once the path is back the worker is used again.
- TLS (certificates made here with openssl): the worker's certificate checked against the
  CA gives the golden sequence, plain text to a TLS worker fails; with a client certificate
  required, the coordinator that presents one is served and one without is refused.
- Shutdown: the Shutdown call and SIGTERM each end a worker with exit status 0.

Usage: remote_worker_test.py BIN_DIR PROTOC GRPC_PYTHON_PLUGIN
"""

import json
import os
import queue
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import (ServerProcess, asan_memory_factor, check, finish,  # noqa: E402
                            import_stubs, proc_status, rss_mb)
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"
TOKEN = "test-token-0123456789abcdef"

PROTOCOL = 7  # kStepProtocolVersion
KIND_FFN = 0  # StepKind::kFfn
STATUS_INVALID = 2  # Status::Code::kInvalid, an error reply's status


def step_request(step_id, layer, batch, n_embd, x, ids):
    """An FFN step's request bytes (common/transport/step_message.h): header (magic,
    version, step id, kind, layer, batch, n_embd, n_ids, seq, pos, out), x, then
    each row's count and the rows' ids (every row with `ids`; None: all owned)."""
    n_ids = -1 if ids is None else len(ids) * batch
    head = struct.pack("<IIQiiiiiiii", 0x54535049, PROTOCOL, step_id, KIND_FFN, layer, batch,
                       n_embd, n_ids, 0, 0, 0)
    body = struct.pack(f"<{len(x)}f", *x)
    if ids is not None:
        body += struct.pack(f"<{batch}i", *([len(ids)] * batch))
        body += struct.pack(f"<{len(ids) * batch}i", *(ids * batch))
    return head + body


def step_reply(data):
    """(status, step_id, fired, payload) of a step reply: header (magic, status, step id,
    kind, layer, fired, worker ns, mask words, out, payload bytes), payload."""
    fields = struct.unpack_from("<IIQiiqqIiQ", data)
    status, step_id, fired, payload_bytes = fields[1], fields[2], fields[5], fields[9]
    head = struct.calcsize("<IIQiiqqIiQ")
    return status, step_id, fired, data[head:head + payload_bytes]


def main():
    bin_dir, protoc, plugin = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(GOLDEN) as f:
        golden = json.load(f)
    greedy = ["-p", PROMPT, "-n", str(len(golden["generated_tokens"])), "--temp", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        pi_pb2, pi_pb2_grpc = import_stubs(protoc, plugin, tmp)
        import grpc  # noqa: E402

        demo_t = os.path.join(tmp, "demo-down-t.gguf")
        subprocess.run([os.path.join(bin_dir, "pi-quantize"), MODEL, demo_t, "f16", "--down-t"],
                       capture_output=True, check=True, timeout=300)
        other = os.path.join(tmp, "other.gguf")
        subprocess.run([os.path.join(bin_dir, "pi-synth"), "-o", other, "--activation", "relu",
                        "--down-t", "--tokenizer", "bytes", "--n-layer", "6", "--n-embd", "256", "--n-head", "4",
                        "--n-ff", "768"], capture_output=True, check=True, timeout=300)
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        wrong = os.path.join(tmp, "wrong")
        with open(wrong, "w") as f:
            f.write("not-the-token-0123456789\n")
        n_log = [0]

        def worker(*extra, listen="127.0.0.1:0"):
            n_log[0] += 1
            return ServerProcess([os.path.join(bin_dir, "pi-cpu-worker"), "-m", demo_t, "--listen", listen,
                         "--auth-token-file", token, *extra],
                        os.path.join(tmp, f"worker{n_log[0]}.log"))

        def pi_run(*args):
            p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", demo_t, *greedy, "--json",
                                *args], capture_output=True, text=True, timeout=300)
            return (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr

        w = worker()
        check(w.address is not None, "pi-cpu-worker --listen 127.0.0.1:0 serves")
        remote = ["--cpu-worker", w.address, "--auth-token-file", token]

        # Same greedy tokens as the golden sequence.
        for extra, what in ((["--sparse", "oracle"], "remote worker only"),
                            (["--sparse", "oracle", "--cpu-workers", "1"],
                             "one local (shm) + one remote (gRPC) worker"),
                            (["--sparse", "off"], "remote worker, --sparse off")):
            j, err = pi_run(*remote, *extra)
            check(j is not None and j["generated_tokens"] == golden["generated_tokens"]
                  and "(grpc): cpu backend" in err and "lost" not in err,
                  f"pi-run greedy, {what}: the golden sequence")

        # Security.
        j, err = pi_run("--sparse", "oracle", "--cpu-worker", w.address, "--auth-token-file",
                        wrong)
        check(j is None and "refused our token" in err and "wrong token" in err,
              "a wrong token is refused, naming the token file")
        check("refused Hello" in w.stderr() and "a wrong token" in w.stderr(),
              "the worker logs the refused call")
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", demo_t, "-p", "x",
                            "--cpu-worker", w.address], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and "--auth-token-file" in p.stderr,
              "--cpu-worker without --auth-token-file: a usage error")
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", other, "-p", "x", "-n", "2",
                            "--sparse", "oracle", *remote], capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 1 and "is not this worker's" in p.stderr,
              "a coordinator with another model is refused (fingerprints differ)")

        channel = grpc.insecure_channel(w.address)
        stub = pi_pb2_grpc.WorkerStub(channel)
        auth = (("authorization", "Bearer " + TOKEN),)
        try:
            stub.Health(pi_pb2.HealthRequest(), timeout=10)
            check(False, "a call without a token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED and "no token" in e.details(),
                  f"a call without a token: UNAUTHENTICATED ({e.details()!r})")
        n_layer, n_embd, n_ff = 6, 256, 768
        owned = [pi_pb2.TokenIds(ids=list(range(0, n_ff, 2))) for _ in range(n_layer)]

        def hello(**kw):
            req = pi_pb2.HelloRequest(protocol_version=kw.get("version", PROTOCOL),
                                      model_fingerprint=kw.get("fingerprint", 0),
                                      max_batch=1, owned=kw.get("owned", owned),
                                      gate_thresholds=kw.get("thresholds", []))
            return stub.Hello(req, metadata=auth, timeout=30)

        for kw, words in (({"version": 99}, "protocol version 99"),
                          ({}, "is not this worker's")):
            try:
                hello(**kw)
                check(False, f"hello refused: {words}")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.FAILED_PRECONDITION and words in e.details(),
                      f"hello refused with FAILED_PRECONDITION: {e.details()!r}")
        # The worker's fingerprint, from its refusal: "(fingerprint X) is not this worker's (Y)".
        try:
            hello()
        except grpc.RpcError as e:
            fingerprint = int(re.search(r"worker's \(([0-9a-f]{16})\)", e.details()).group(1), 16)
        for bad_owned, words in (([pi_pb2.TokenIds(ids=[n_ff])] * n_layer, "n_ff"),
                                 ([pi_pb2.TokenIds(ids=[3, 1])] * n_layer, "sorted"),
                                 (owned[:2], "2 layers")):
            try:
                hello(fingerprint=fingerprint, owned=bad_owned)
                check(False, f"a shard that does not fit is refused ({words})")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.FAILED_PRECONDITION,
                      f"a shard that does not fit is refused: {e.details()!r}")
        # --sparse cats' gate thresholds: one per layer, finite and >= 0.
        for thresholds, words in (([0.1] * 2, "2 gate thresholds"),
                                  ([0.1] * 5 + [-1.0], "gate threshold -1"),
                                  ([0.1] * 5 + [float("inf")], "gate threshold inf")):
            try:
                hello(fingerprint=fingerprint, thresholds=thresholds)
                check(False, f"gate thresholds refused ({words})")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.FAILED_PRECONDITION and words in e.details(),
                      f"gate thresholds refused: {e.details()!r}")
        check(hello(fingerprint=fingerprint, thresholds=[0.1] * n_layer).session > 0,
              "a hello with a gate threshold per layer opens a session")
        session = hello(fingerprint=fingerprint).session
        check(session > 0, "a hello with the right model, version and shard opens a session")

        # Malformed step frames: an error reply each, then a good step is answered.
        x = [0.01 * ((i * 7) % 13 - 6) for i in range(n_embd)]
        good = step_request(1, 0, 1, n_embd, x, [0, 2, 4])
        bad_frames = [
            (b"\x00" * 7, "header"),
            (good[:-4], "bytes"),
            (step_request(2, 99, 1, n_embd, x, [0]), "layer"),
            (step_request(3, 0, 1, n_embd, x, [1]), "shard"),
            (step_request(4, 0, 1, n_embd, x, [4, 2]), "sorted"),
            (step_request(5, 0, 1, n_embd, x, [2, 2]), "unique"),
            (step_request(6, 0, 2, n_embd, x * 2, [0]), "batch"),
            (step_request(7, 0, 1, 128, x[:128], [0]), "n_embd"),
        ]
        frames = [pi_pb2.StepFrame(message=b) for b, _ in bad_frames]
        frames.append(pi_pb2.StepFrame(message=good))
        replies = list(stub.Steps(iter(frames), metadata=auth + (("pi-session", str(session)),),
                                  timeout=60))
        check(len(replies) == len(frames), f"every frame answered ({len(replies)})")
        for (frame, words), reply in zip(bad_frames, replies):
            status, _, _, payload = step_reply(reply.message)
            check(status == STATUS_INVALID and len(payload) > 0,
                  f"malformed step ({words}): invalid, {payload.decode(errors='replace')!r}")
        status, step_id, fired, payload = step_reply(replies[-1].message)
        check(status == 0 and step_id == 1 and len(payload) == 4 * n_embd,
              "then a good step is answered (the worker served on)")
        try:
            list(stub.Steps(iter([pi_pb2.StepFrame(message=good)]),
                            metadata=auth + (("pi-session", "12345"),), timeout=30))
            check(False, "a stream naming another session is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION,
                  f"a stream naming another session is refused ({e.details()!r})")
        # One live stream per session: a second is refused while the first is answered; a
        # new hello ends the session and its stream.
        first = queue.Queue()
        session_md = auth + (("pi-session", str(session)),)
        replies_a = stub.Steps(iter(first.get, None), metadata=session_md, timeout=60)
        first.put(pi_pb2.StepFrame(message=good))
        got_a = next(replies_a)
        try:
            list(stub.Steps(iter([pi_pb2.StepFrame(message=good)] * 3), metadata=session_md,
                            timeout=30))
            second = "OK"
        except grpc.RpcError as e:
            second = f"{e.code().name}: {e.details()}"
        first.put(pi_pb2.StepFrame(message=good))
        got_a2 = next(replies_a)
        check(second.startswith("ALREADY_EXISTS") and step_reply(got_a.message)[0] == 0
              and step_reply(got_a2.message) == step_reply(got_a.message),
              f"a second stream for a live session is refused ({second!r}); the first is still "
              f"answered, the same")
        session = hello(fingerprint=fingerprint).session
        try:
            first.put(pi_pb2.StepFrame(message=good))
            next(replies_a)
            ended = "served on"
        except (grpc.RpcError, StopIteration) as e:
            ended = e.code().name if isinstance(e, grpc.RpcError) else "ended"
        first.put(None)
        check(ended in ("CANCELLED", "ABORTED", "ended"),
              f"a new hello ends the old session's stream ({ended})")
        replies = list(stub.Steps(iter([pi_pb2.StepFrame(message=good)]),
                                  metadata=auth + (("pi-session", str(session)),), timeout=60))
        check(len(replies) == 1 and step_reply(replies[0].message)[0] == 0,
              "the new session's stream is served")
        # Concurrent hellos: one at a time, each gets a session of its own; the last one is live.
        sessions = []

        def concurrent_hello():
            try:
                sessions.append(hello(fingerprint=fingerprint).session)
            except grpc.RpcError as e:
                sessions.append(e.code().name)

        threads = [threading.Thread(target=concurrent_hello) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(len(set(sessions)) == 4 and all(isinstance(x, int) for x in sessions),
              f"4 concurrent hellos: each its own session ({sorted(map(str, sessions))})")
        session = max(sessions)
        h = stub.Health(pi_pb2.HealthRequest(), metadata=auth, timeout=10)
        check(h.status == "serving" and h.session == session, "Health: serving the last session")
        # Unauthenticated bodies: gRPC takes a unary call's whole message before its handler
        # can refuse it, so the guard lets a connection carry at most one message's bytes
        # before the server answers any of them: three 30 MB calls at once are cut.
        junk = b"\x7a" + b"\xff\xff\xff\x0e" + b"\x00" * (30 << 20)  # field 15, 30 MB
        raw_hello = channel.unary_unary("/pi.v1.Worker/Hello", request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        rss0 = rss_mb(w.proc.pid)
        outcomes = []

        def big_hello():
            try:
                raw_hello(junk, timeout=60)
                outcomes.append("OK")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)

        calls = [threading.Thread(target=big_hello) for _ in range(3)]
        for t in calls:
            t.start()
        for t in calls:
            t.join()
        rss1 = rss_mb(w.proc.pid)
        check("OK" not in outcomes and "sent more bytes than a message before any answer"
              in w.stderr() and rss1 - rss0 < 200 * asan_memory_factor(),
              f"three unauthenticated 30 MB hellos on one connection: cut ({sorted(outcomes)}), "
              f"worker RSS {rss0:.0f} -> {rss1:.0f} MB")
        # Rapid reset on the worker's port (its H2Guard cuts each connection past its budget).
        sys.path.insert(0, HERE)
        import h2_raw
        before = proc_status(w.proc.pid, "Threads:")
        streams, conns = h2_raw.attack(w.address, "/pi.v1.Worker/Health", b"", 2, 4)
        after = proc_status(w.proc.pid, "Threads:")
        h = None
        deadline = time.monotonic() + 5  # the calls let through before each cut, drained
        while h is None and time.monotonic() < deadline:
            try:
                h = stub.Health(pi_pb2.HealthRequest(), metadata=auth, timeout=10)
            except grpc.RpcError:
                time.sleep(0.1)
        check(h is not None and h.status == "serving" and h.session == session
              and after <= before + 20
              and "reset streams faster than its budget" in w.stderr(),
              f"rapid reset on the worker ({streams} streams, {conns} connections): cut, threads "
              f"{before} -> {after}, the session still served")

        # pi-launch with a local and a remote worker, and faults.
        launch = ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0", "-m",
                       demo_t, "--sparse", "oracle", "-t", "2", "-c", "4096", "--cpu-workers", "1",
                       "--worker-timeout", "300", *remote], os.path.join(tmp, "launch.log"))
        check(launch.address is not None, "pi-launch with one local and one remote worker")
        cstub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        p = subprocess.run([os.path.join(bin_dir, "pi-client"), "--server", launch.address,
                            *greedy, "--json"], capture_output=True, text=True, timeout=120)
        j = json.loads(p.stdout) if p.returncode == 0 else None
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"],
              "pi-client through pi-launch (shm + gRPC workers): the golden sequence")
        models = cstub.Models(pi_pb2.ModelsRequest(), timeout=10)
        check(sorted(x.transport for x in models.workers) == ["grpc", "shm"]
              and sum(x.neurons for x in models.workers) == n_layer * n_ff,
              "Models: an shm and a grpc worker owning every neuron between them")

        long_req = pi_pb2.GenerateRequest(prompt=PROMPT, n_predict=200, ignore_eos=True,
                                          sampling=pi_pb2.SamplingParams(temperature=0))
        base = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]

        def generate_with(action, at=20):
            ids, acted = [], False
            for reply in cstub.Generate(long_req, timeout=300):
                if reply.HasField("token"):
                    if not acted and len(ids) == at:
                        action()
                        acted = True
                    if reply.token.id >= 0:
                        ids.append(reply.token.id)
            return ids

        # SIGSTOP: lost at the step deadline, the answer unchanged.
        ids = generate_with(lambda: w.proc.send_signal(signal.SIGSTOP))
        check(ids == list(base.generated_ids),
              "remote worker SIGSTOPped mid-generation: the same 200 tokens")
        w.proc.send_signal(signal.SIGCONT)
        # SIGKILL: the same; then a worker on the same port is reconnected.
        ids = generate_with(lambda: w.proc.send_signal(signal.SIGKILL))
        check(ids == list(base.generated_ids),
              "remote worker SIGKILLed mid-generation: the same 200 tokens")
        w.stop()
        ids = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]
        check(list(ids.generated_ids) == list(base.generated_ids),
              "with the remote worker gone, the next request is served (same tokens)")
        before = cstub.Models(pi_pb2.ModelsRequest(), timeout=10).shard_recoveries
        w = worker(listen=w.address)
        check(w.address is not None, "a worker started again on the same port")
        deadline = time.monotonic() + 30
        recovered = False
        while time.monotonic() < deadline and not recovered:
            done = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]
            check_same = list(done.generated_ids) == list(base.generated_ids)
            recovered = check_same and (cstub.Models(pi_pb2.ModelsRequest(), timeout=10)
                                        .shard_recoveries > before) and "session" in w.stderr()
        check(recovered, "the coordinator reconnects to the returned worker (same tokens)")
        check(launch.stop() == 0, "pi-launch stops cleanly")

        # Through the fault proxy: a blackhole (a host gone silent, its connection left
        # open) mid-generation, then the path back.
        proxy_log = os.path.join(tmp, "proxy.log")
        with open(proxy_log, "w") as log:
            proxy = subprocess.Popen([os.path.join(bin_dir, "pi-fault-proxy"), "--listen",
                                      "127.0.0.1:0", "--to", w.address], stdin=subprocess.PIPE,
                                     stderr=log, text=True)
        deadline = time.monotonic() + 30
        proxied = None
        while time.monotonic() < deadline and proxied is None:
            m = re.search(r" on (127\.0\.0\.1:\d+)", open(proxy_log).read())
            proxied = m.group(1) if m else None
            time.sleep(0.05)

        def tell_proxy(command):
            proxy.stdin.write(command + "\n")
            proxy.stdin.flush()

        launch = ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0",
                                "-m", demo_t, "--sparse", "oracle", "-t", "2", "-c", "4096",
                                "--worker-timeout", "300", "--cpu-worker", proxied,
                                "--auth-token-file", token], os.path.join(tmp, "launch2.log"))
        cstub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        t0 = time.monotonic()
        ids = generate_with(lambda: tell_proxy("blackhole"))
        check(ids == list(base.generated_ids),
              "the worker's path blackholed mid-generation: the same 200 tokens")
        h = cstub.Health(pi_pb2.HealthRequest(), timeout=10)
        check(h.status == "degraded", f"Health says degraded while the worker is cut off ({h.status})")
        done = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]
        check(list(done.generated_ids) == list(base.generated_ids) and time.monotonic() - t0 < 60
              and proxied in done.warning,
              "a worker that does not come back costs time only: the next request is served, "
              f"with a warning naming it ({done.warning!r})")
        tell_proxy("pass")
        deadline = time.monotonic() + 30
        recovered = False
        while time.monotonic() < deadline and not recovered:
            done = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]
            recovered = (list(done.generated_ids) == list(base.generated_ids) and
                         cstub.Models(pi_pb2.ModelsRequest(), timeout=10).shard_recoveries >= 1)
        check(recovered, "the path restored: the worker is used again (same tokens)")
        h = cstub.Health(pi_pb2.HealthRequest(), timeout=10)
        check(h.status == "ok", f"Health says ok again ({h.status})")
        check(launch.stop() == 0, "pi-launch stops cleanly")
        tell_proxy("quit")
        proxy.wait(timeout=10)

        # A remote gpu worker (pi-gpu-worker --listen; the host backend standing in for a
        # GPU): the device's layers, with their KV cache, over gRPC.
        p = subprocess.run([os.path.join(bin_dir, "pi-profile"), "-m", demo_t, "-f",
                            os.path.join(ROOT, "models", "kjv-valid.txt"), "--max-tokens", "1024"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "pi-profile of the ffn_down_t copy (for --vram-budget)")

        def gpu_worker(listen="127.0.0.1:0"):
            n_log[0] += 1
            return ServerProcess([os.path.join(bin_dir, "pi-gpu-worker"), "-m", demo_t, "--listen",
                                  listen, "--auth-token-file", token, "--ffn-backend", "host",
                                  "-t", "2"], os.path.join(tmp, f"worker{n_log[0]}.log"))

        g = gpu_worker()
        check(g.address is not None, "pi-gpu-worker --listen 127.0.0.1:0 serves")
        # A device hello's memory check counts every sequence's KV cache: 256 sequences of
        # 65536 positions (~100 GB) are refused, one is taken.
        gstub = pi_pb2_grpc.WorkerStub(grpc.insecure_channel(g.address))

        def device_hello(n_seq):
            plan = pi_pb2.DevicePlan(n_layers=n_layer, output=True, n_ctx=65536, cache_type_k=1,
                                     cache_type_v=1, mode=1, n_seq=n_seq)
            req = pi_pb2.HelloRequest(protocol_version=PROTOCOL, model_fingerprint=fingerprint_t,
                                      max_batch=1, device=plan,
                                      owned=[pi_pb2.TokenIds() for _ in range(n_layer)])
            try:
                device_session[0] = gstub.Hello(req, metadata=auth, timeout=60).session
                return "OK"
            except grpc.RpcError as e:
                return f"{e.code().name}: {e.details()}"

        device_session = [0]

        fingerprint_t = 0
        m = re.search(r"worker's \(([0-9a-f]{16})\)", device_hello(1))
        fingerprint_t = int(m.group(1), 16) if m else 0
        many = device_hello(256)
        check(many.startswith("FAILED_PRECONDITION") and "256 sequences" in many,
              f"a device hello of 256 x 65536 positions is refused by the memory check ({many!r})")
        one = device_hello(1)
        check(one == "OK", f"one sequence of 65536 positions is taken ({one!r})")
        # The gpu worker's session takes one live stream too.
        held = queue.Queue()
        md = auth + (("pi-session", str(device_session[0])),)
        first_stream = gstub.Steps(iter(held.get, None), metadata=md, timeout=60)
        time.sleep(0.3)  # (the first stream is live once its call reached the worker)
        try:
            list(gstub.Steps(iter([]), metadata=md, timeout=30))
            second = "OK"
        except grpc.RpcError as e:
            second = e.code().name
        held.put(None)
        try:
            list(first_stream)
        except grpc.RpcError:
            pass
        check(second == "ALREADY_EXISTS",
              f"a second stream for the gpu worker's session is refused ({second})")
        device = ["--sparse", "oracle", "--vram-budget", "20M", "--remote-gpu-worker", g.address,
                  "--auth-token-file", token]
        j, err = pi_run(*device)
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"]
              and f"gpu worker {g.address} (grpc): host backend" in err,
              "the device's layers on a remote gpu worker: the golden sequence")
        j, err = pi_run(*device, "--cpu-worker", w.address)
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"],
              "a remote gpu worker and a remote cpu worker: the golden sequence")
        # --sparse cats: the device's gate thresholds travel in the gRPC hello too; teal's
        # inputs' thresholds in its device plan (the worker makes the transposed copies its
        # layers' column-sparse products read).
        for mode, target in (("cats", "0.95"), ("teal", "0.5")):
            sparse = ["--sparse", mode, "--target-sparsity", target]
            here, _ = pi_run(*sparse)
            j, err = pi_run(*sparse, "--vram-budget", "20M", "--remote-gpu-worker", g.address,
                            "--auth-token-file", token)
            check(here is not None and j is not None
                  and j["generated_tokens"] == here["generated_tokens"]
                  and j["ffn_active"] == here["ffn_active"] and 0 < j["gpu_fired_share"] <= 1,
                  f"--sparse {mode} on a remote gpu worker: the tokens and neurons of one process "
                  f"({None if j is None else j['ffn_active']}; {err.strip().splitlines()[-1:]})")
        j, err = pi_run("--sparse", "oracle", "--vram-budget", "20M", "--remote-gpu-worker",
                        g.address, "--auth-token-file", wrong)
        check(j is None and "refused our token" in err, "a remote gpu worker refuses a wrong token")
        launch = ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0",
                                "-m", demo_t, "-t", "2", "-c", "4096", "--worker-timeout", "300",
                                *device], os.path.join(tmp, "launch3.log"))
        check(launch.address is not None, "pi-launch with a remote gpu worker")
        cstub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        models = cstub.Models(pi_pb2.ModelsRequest(), timeout=10)
        check(any(x.name == f"gpu worker {g.address}" and x.transport == "grpc"
                  and x.backend == "host" for x in models.workers),
              "Models lists the remote gpu worker (grpc, host backend)")

        def restart_gpu_worker():
            g.proc.send_signal(signal.SIGKILL)
            g.proc.wait(timeout=10)
            restarted.append(gpu_worker(listen=g.address))

        restarted = []
        done = None
        ids = []
        for reply in cstub.Generate(long_req, timeout=300):
            if reply.HasField("token"):
                if len(ids) == 20 and not restarted:
                    restart_gpu_worker()
                if reply.token.id >= 0:
                    ids.append(reply.token.id)
            else:
                done = reply.done
        check(ids == list(base.generated_ids) and "KV cache rebuilt" in done.warning
              and g.address in done.warning,
              "the remote gpu worker killed and started again mid-generation: the same 200 "
              f"tokens, a warning naming it ({done.warning!r})")
        g = restarted[0]
        # Stopped and never back within the deadline: the request fails, naming the
        # worker, within 5 s; once it is back the coordinator serves again.
        t0 = None
        code, details = "OK", ""
        try:
            for reply in cstub.Generate(long_req, timeout=300):
                if reply.HasField("token") and t0 is None:  # stopped after the first token
                    g.proc.send_signal(signal.SIGSTOP)
                    t0 = time.monotonic()
        except grpc.RpcError as e:
            code, details = e.code().name, e.details()
        elapsed = time.monotonic() - t0
        check(code == "INTERNAL" and g.address in details and elapsed < 5,
              f"a remote gpu worker that does not come back: the call fails (INTERNAL) naming "
              f"it within 5 s ({elapsed:.1f} s: {details!r})")
        g.proc.send_signal(signal.SIGCONT)
        done = [r.done for r in cstub.Generate(long_req, timeout=300) if r.HasField("done")][0]
        check(list(done.generated_ids) == list(base.generated_ids),
              "the gpu worker back: the next request is served (the same tokens)")
        check(launch.stop() == 0, "pi-launch with a remote gpu worker stops cleanly")
        check(g.stop() == 0, "the remote gpu worker stops cleanly")

        # TLS: a worker with a certificate (and one that requires a client certificate)
        # serves a coordinator that checks it against the CA; a plain-text coordinator fails.
        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=tmp, capture_output=True, check=True,
                           timeout=60)

        with open(os.path.join(tmp, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                "ca.crt", "-days", "1", "-subj", "/CN=pi-test-ca")
        for name in ("worker", "client"):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                    f"{name}.csr", "-subj", f"/CN={name}")
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", "san.ext")
        pem = lambda name: os.path.join(tmp, name)  # noqa: E731
        tls = worker("--tls-cert", pem("worker.crt"), "--tls-key", pem("worker.key"))
        check(tls.address is not None and "(TLS)" in tls.stderr(), "a TLS worker serves")
        tls_remote = ["--cpu-worker", tls.address, "--auth-token-file", token]
        j, err = pi_run(*tls_remote, "--tls-ca", pem("ca.crt"), "--sparse", "oracle")
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"],
              "over TLS (the worker's certificate checked): the golden sequence")
        j, err = pi_run(*tls_remote, "--sparse", "oracle", "--worker-timeout", "2000")
        check(j is None and "cpu worker" in err, "plain text to a TLS worker fails, naming it")
        tls.stop()
        mtls = worker("--tls-cert", pem("worker.crt"), "--tls-key", pem("worker.key"),
                      "--tls-ca", pem("ca.crt"))
        mtls_remote = ["--cpu-worker", mtls.address, "--auth-token-file", token, "--tls-ca",
                       pem("ca.crt")]
        j, err = pi_run(*mtls_remote, "--tls-cert", pem("client.crt"), "--tls-key",
                        pem("client.key"), "--sparse", "oracle")
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"],
              "mutual TLS (a client certificate required and given): the golden sequence")
        j, err = pi_run(*mtls_remote, "--sparse", "oracle")
        check(j is None and "cpu worker" in err, "mutual TLS without a client certificate fails")
        mtls.stop()

        # Shutdown and SIGTERM end a worker with status 0.
        stub = pi_pb2_grpc.WorkerStub(grpc.insecure_channel(w.address))
        stub.Shutdown(pi_pb2.ShutdownRequest(), metadata=auth, timeout=10)
        try:
            rc = w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 0 and "shutdown asked" in w.stderr(), "Shutdown: the worker exits 0")
        w.stop()
        w = worker()
        check(w.stop() == 0 and "stopped" in w.stderr(), "SIGTERM: the worker exits 0")

    finish()


if __name__ == "__main__":
    main()

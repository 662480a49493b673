#!/usr/bin/env python3
"""pi-launch served end to end: pi-client, and a second client of our own written in
Python against proto/pi.proto (stubs generated here by protoc and grpc_python_plugin), so
the client side has an implementation independent of the C++ one.

On the demo model stored with ffn_down_t (--sparse oracle, the cold neurons in a
pi-cpu-worker process over shared memory):
- pi-client --json generates the golden greedy sequence (tests/data/demo_greedy.json, from
  the numpy reference) and the text pi-run --json gives; its streamed text equals the JSON
  text; the Python client's streamed tokens equal it too.
- Tokenize equals python3-sentencepiece's encoding (with BOS); Health and Models say what
  is loaded (one shm worker with a cpu backend owning every neuron).
- Two clients at once both get the right answer (one waits for the other).
- With --max-queue 1 and a long request running, one more waits and the next is refused at
  once with RESOURCE_EXHAUSTED; cancelling the long request frees the engine.
- pi-client interrupted with SIGINT cancels its request on the server and exits 130.
- The cpu worker killed with SIGKILL mid-generation: the answer is unchanged.
- Bad requests (empty prompt, ids out of the vocabulary, bad sampling values) get
  INVALID_ARGUMENT naming the problem, and the server keeps serving.
- SIGTERM: pi-launch exits 0, its worker process is gone, nothing is left in /dev/shm.
All traffic is on 127.0.0.1 (port 0: the server picks a free port and prints it).

Usage: launch_test.py BIN_DIR PROTOC GRPC_PYTHON_PLUGIN
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import ServerProcess, check, child_pids, finish, import_stubs  # noqa: E402
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
TOKENIZER = os.path.join(ROOT, "models", "demo-tokenizer.model")
GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"

def launch_server(bin_dir, tmp, *args):
    """pi-launch on 127.0.0.1 with a free port."""
    return ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0", *args],
                         os.path.join(tmp, f"launch-{time.monotonic_ns()}.log"))


def client(bin_dir, address, *args, timeout=300):
    p = subprocess.run([os.path.join(bin_dir, "pi-client"), "--server", address, *args],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def generate_hitting_gpu_worker(stub, launch, request, sig, which=0):
    """Streams `request`, sending `sig` to pi-launch's gpu worker (the `which`th, by
    pid) after 20 tokens; returns (whether it was sent, the ids, the Done)."""
    # The current gpu worker (a restarted one has a new pid): pi-launch's child.
    pid = sorted(child_pids(launch.proc.pid, "pi-gpu-worker"))[which]
    ids, acted, done = [], False, None
    for reply in stub.Generate(request, timeout=300):
        if reply.HasField("token"):
            if not acted and len(ids) == 20:
                os.kill(pid, sig)
                acted = True
            if reply.token.id >= 0:
                ids.append(reply.token.id)
        else:
            done = reply.done
    return acted, ids, done


def main():
    bin_dir, protoc, plugin = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(GOLDEN) as f:
        golden = json.load(f)
    greedy = ["-p", PROMPT, "-n", str(len(golden["generated_tokens"])), "--temp", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        pi_pb2, pi_pb2_grpc = import_stubs(protoc, plugin, tmp)
        import grpc  # noqa: E402

        demo_t = os.path.join(tmp, "demo-down-t.gguf")
        p = subprocess.run([os.path.join(bin_dir, "pi-quantize"), MODEL, demo_t, "f16",
                            "--down-t"], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "pi-quantize --down-t")
        shm_before = set(os.listdir("/dev/shm"))

        served = ["-m", demo_t, "--sparse", "oracle", "-t", "2", "-c", "4096"]
        launch = launch_server(bin_dir, tmp, *served)
        check(launch.address is not None and "1 cpu worker(s)" in launch.stderr()
              and "cpu backend" in launch.stderr(),
              "pi-launch serves on 127.0.0.1 with one cpu worker (default --cpu-workers)")
        if launch.address is None:
            launch.stop()
            return
        addr = launch.address
        channel = grpc.insecure_channel(addr)
        stub = pi_pb2_grpc.CoordinatorStub(channel)

        # pi-client against pi-run and the golden sequence.
        rc, out, err = client(bin_dir, addr, *greedy, "--json")
        j = json.loads(out) if rc == 0 else None
        check(j is not None and j["generated_tokens"] == golden["generated_tokens"]
              and j["text"] == golden["text"] and j["stop_reason"] == "length",
              "pi-client --json: the golden greedy sequence")
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), "-m", demo_t, "--sparse", "oracle",
                            "-c", "4096", *greedy, "--json"], capture_output=True, text=True,
                           timeout=300)
        r = json.loads(p.stdout) if p.returncode == 0 else None
        check(r is not None and j is not None and r["generated_tokens"] == j["generated_tokens"]
              and r["prompt_tokens"] == j["prompt_tokens"], "pi-client == pi-run (same ids)")
        rc, out, err = client(bin_dir, addr, *greedy)
        check(rc == 0 and out == PROMPT + golden["text"] + "\n",
              "pi-client's streamed text == the JSON text")

        # The Python client: streamed tokens, Tokenize, Health, Models.
        req = pi_pb2.GenerateRequest(prompt=PROMPT, n_predict=len(golden["generated_tokens"]),
                                     sampling=pi_pb2.SamplingParams(temperature=0))
        ids, text, done = [], "", None
        for reply in stub.Generate(req, timeout=120):
            if reply.HasField("token"):
                if reply.token.id >= 0:
                    ids.append(reply.token.id)
                text += reply.token.text
            else:
                done = reply.done
        check(ids == golden["generated_tokens"] and text == golden["text"] and done is not None
              and list(done.generated_ids) == ids and done.text == text
              and done.timings.predicted_n == len(ids),
              "Python client: streamed tokens and text == the golden sequence, Done agrees")
        import sentencepiece as spm  # noqa: E402
        sp = spm.SentencePieceProcessor(model_file=TOKENIZER)
        tk = stub.Tokenize(pi_pb2.TokenizeRequest(text=PROMPT), timeout=30)
        check(list(tk.ids) == [sp.bos_id()] + sp.encode(PROMPT),
              "Tokenize == sentencepiece's encoding with BOS")
        h = stub.Health(pi_pb2.HealthRequest(), timeout=30)
        check(h.status == "ok" and h.running == 0 and h.queued == 0 and h.max_queue == 8,
              "Health: ok, idle, max queue 8")
        m = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        check(m.model_path == demo_t and m.sparse == "oracle" and m.n_ctx == 4096
              and len(m.workers) == 1 and m.workers[0].transport == "shm"
              and m.workers[0].backend == "cpu"
              and m.workers[0].neurons == m.n_layer * m.n_ff,
              "Models: the model, --sparse oracle, one shm cpu worker owning every neuron")
        rc, out, err = client(bin_dir, addr, "--models")
        check(rc == 0 and json.loads(out)["workers"][0]["transport"] == "shm",
              "pi-client --models")
        rc, out, err = client(bin_dir, addr, "--health")
        check(rc == 0 and json.loads(out)["status"] == "ok", "pi-client --health")

        # Bad requests: INVALID_ARGUMENT naming the problem; the server keeps serving.
        for bad, words in ((pi_pb2.GenerateRequest(), "no prompt"),
                           (pi_pb2.GenerateRequest(prompt_ids=pi_pb2.TokenIds(ids=[])), "empty"),
                           (pi_pb2.GenerateRequest(prompt_ids=pi_pb2.TokenIds(ids=[1, 999999])),
                            "outside the vocabulary"),
                           (pi_pb2.GenerateRequest(prompt="x", sampling=pi_pb2.SamplingParams(
                               top_p=2.0)), "top-p out of range"),
                           (pi_pb2.GenerateRequest(prompt="x", stop=[""]), "empty string"),
                           (pi_pb2.GenerateRequest(prompt="x", n_predict=-5), "n_predict")):
            try:
                list(stub.Generate(bad, timeout=30))
                check(False, f"bad request refused ({words})")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.details(),
                      f"bad request refused with INVALID_ARGUMENT: {e.details()!r}")

        # Two clients at once: both right.
        results = [None, None]

        def run_client(k):
            results[k] = client(bin_dir, addr, *greedy, "--json")

        threads = [threading.Thread(target=run_client, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok = all(rc == 0 and json.loads(out)["generated_tokens"] == golden["generated_tokens"]
                 for rc, out, _ in results)
        check(ok, "two pi-clients at once both get the golden sequence")

        # The cpu worker killed mid-generation: the answer does not change.
        worker_pid = int(m.workers[0].name.split()[-1])
        long_req = pi_pb2.GenerateRequest(prompt=PROMPT, n_predict=200, ignore_eos=True,
                                          sampling=pi_pb2.SamplingParams(temperature=0))
        base = [x.done for x in stub.Generate(long_req, timeout=300) if x.HasField("done")][0]
        lp_req = pi_pb2.GenerateRequest(prompt=PROMPT, n_predict=4, logprobs=True, top_logprobs=2,
                                        sampling=pi_pb2.SamplingParams(temperature=0))
        d = [x.done for x in stub.Generate(lp_req, timeout=300) if x.HasField("done")][0]
        check([x.id for x in d.logprobs] == list(d.generated_ids) and len(d.logprobs) == 4
              and all(len(x.top) == 2 and x.top[0].id == x.id and x.logprob <= 0
                      for x in d.logprobs),
              "gRPC Generate with logprobs: one per token, greedy = the most likely of 2")
        ids, killed = [], False
        for reply in stub.Generate(long_req, timeout=300):
            if reply.HasField("token") and not killed and len(ids) == 20:
                os.kill(worker_pid, signal.SIGKILL)
                killed = True
            if reply.HasField("token") and reply.token.id >= 0:
                ids.append(reply.token.id)
        check(killed and ids == list(base.generated_ids),
              "cpu worker SIGKILLed mid-generation: the same 200 tokens")
        m2 = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        check(m2.shard_failures >= 1, f"Models counts the failure ({m2.shard_failures})")

        # pi-client interrupted: the request is cancelled on the server.
        pc = subprocess.Popen([os.path.join(bin_dir, "pi-client"), "--server", addr, "-p", PROMPT,
                               "-n", "-1", "--ignore-eos", "--temp", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pc.stdout.read(len(PROMPT) + 8)  # the prompt echo and some generated text
        pc.send_signal(signal.SIGINT)
        out, err = pc.communicate(timeout=30)
        check(pc.returncode == 130 and "cancelled" in err, "pi-client SIGINT: exit 130, cancelled")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "cancelled" not in launch.stderr():
            time.sleep(0.05)
        check("cancelled" in launch.stderr(), "the server logs the request as cancelled")
        launch.stop()

        # Three processes: --vram-budget puts the hot neurons in a pi-gpu-worker (host
        # backend here), the cold ones in a pi-cpu-worker. Killing or stopping the gpu
        # worker mid-generation leaves the answer unchanged; it is restarted.
        p = subprocess.run([os.path.join(bin_dir, "pi-profile"), "-m", demo_t, "-f",
                            os.path.join(ROOT, "models", "kjv-valid.txt"), "--max-tokens", "1024"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "pi-profile of the ffn_down_t copy")
        launch = launch_server(bin_dir, tmp, *served, "--vram-budget", "20M", "--ffn-backend",
                               "host", "--worker-timeout", "300")
        log = launch.stderr()
        check(launch.address is not None and "gpu worker" in log and "host backend" in log
              and "cpu worker" in log, "pi-launch --vram-budget: a gpu worker and a cpu worker")
        stub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        m = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        gpu = [w for w in m.workers if w.name.startswith("gpu worker")]
        cpu = [w for w in m.workers if w.name.startswith("cpu worker")]
        check(len(gpu) == 1 and len(cpu) == 1 and m.hot_backend == "host"
              and gpu[0].neurons + cpu[0].neurons == m.n_layer * m.n_ff and gpu[0].neurons > 0,
              "Models: the gpu worker (host backend) and the cpu worker split every neuron")
        rc, out, err = client(bin_dir, launch.address, *greedy, "--json")
        check(rc == 0 and json.loads(out)["generated_tokens"] == golden["generated_tokens"],
              "three processes: the golden greedy sequence")
        for sig, what in ((signal.SIGKILL, "SIGKILLed"), (signal.SIGSTOP, "SIGSTOPped")):
            acted, ids, done = generate_hitting_gpu_worker(stub, launch, long_req, sig)
            check(acted and ids == list(base.generated_ids) and "gpu worker" in done.warning,
                  f"gpu worker {what} mid-generation: the same 200 tokens, and a warning naming "
                  f"it ({done.warning!r})")
        after = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        check(after.shard_failures >= 2, f"Models counts the failures ({after.shard_failures})")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
                stub.Health(pi_pb2.HealthRequest(), timeout=10).status != "ok"):
            list(stub.Generate(req, timeout=120))
        check(stub.Health(pi_pb2.HealthRequest(), timeout=10).status == "ok",
              "the gpu worker is restarted (Health ok again)")
        check(launch.stop() == 0, "pi-launch with three processes stops cleanly")

        # The device path (--host-device: the host backend standing in for a GPU): the
        # gpu worker runs whole layers with their KV cache. Killed or stopped
        # mid-generation it is restarted, its KV cache rebuilt from the tokens, and the
        # answer is unchanged.
        launch = launch_server(bin_dir, tmp, *served, "--vram-budget", "20M", "--host-device",
                               "--worker-timeout", "300")
        log = launch.stderr()
        check(launch.address is not None and "in the gpu worker process" in log
              and "of layers, KV cache and hot neurons" in log,
              "pi-launch --host-device: whole layers in the gpu worker")
        stub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        m = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        gpu = [w for w in m.workers if w.name.startswith("gpu worker")]
        check(len(gpu) == 1 and gpu[0].backend == "host" and m.hot_backend == "host",
              "Models: the gpu worker holding the layers (host backend)")
        rc, out, err = client(bin_dir, launch.address, *greedy, "--json")
        check(rc == 0 and json.loads(out)["generated_tokens"] == golden["generated_tokens"],
              "the device path in a gpu worker: the golden greedy sequence")
        for sig, what in ((signal.SIGKILL, "SIGKILLed"), (signal.SIGSTOP, "SIGSTOPped")):
            acted, ids, done = generate_hitting_gpu_worker(stub, launch, long_req, sig)
            check(acted and ids == list(base.generated_ids) and "gpu worker" in done.warning
                  and "KV cache rebuilt" in done.warning,
                  f"device gpu worker {what} mid-generation: the same 200 tokens, and a warning "
                  f"naming it ({done.warning!r})")
        check(stub.Health(pi_pb2.HealthRequest(), timeout=10).status == "ok",
              "the device gpu worker is back (Health ok)")
        check(launch.stop() == 0, "pi-launch with the device path stops cleanly")

        # Two devices chained by layer (--gpus host,host: two host-backend gpu workers,
        # each a range of layers with their KV cache and hot neurons): the golden greedy
        # sequence; the second killed mid-generation is restarted, the answer unchanged.
        launch = launch_server(bin_dir, tmp, *served, "--vram-budget", "10M", "--gpus",
                               "host,host", "--worker-timeout", "300")
        log = launch.stderr()
        check(launch.address is not None and "device 0 (host): layers 0.." in log
              and "device 1 (host): layers" in log and "2 gpu worker processes" in log,
              "pi-launch --gpus host,host: two gpu workers, a range of layers each")
        stub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        m = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        gpu = [w for w in m.workers if w.name.startswith("gpu worker")]
        check(len(gpu) == 2 and all(w.backend == "host" and w.neurons > 0 for w in gpu),
              f"Models: two gpu workers with hot neurons ({[(w.name, w.neurons) for w in gpu]})")
        rc, out, err = client(bin_dir, launch.address, *greedy, "--json")
        check(rc == 0 and json.loads(out)["generated_tokens"] == golden["generated_tokens"],
              "two chained gpu workers: the golden greedy sequence")
        acted, ids, done = generate_hitting_gpu_worker(stub, launch, long_req, signal.SIGKILL, 1)
        check(acted and ids == list(base.generated_ids) and "gpu worker" in done.warning,
              f"the second gpu worker SIGKILLed mid-generation: the same 200 tokens "
              f"({done.warning!r})")
        check(launch.stop() == 0, "pi-launch with two gpu workers stops cleanly")

        # Queue limits: one running, one waiting, the next refused at once.
        launch = launch_server(bin_dir, tmp, *served, "--max-queue", "1")
        check(launch.address is not None, "pi-launch --max-queue 1")
        stub = pi_pb2_grpc.CoordinatorStub(grpc.insecure_channel(launch.address))
        endless = pi_pb2.GenerateRequest(prompt=PROMPT, n_predict=-1, ignore_eos=True)
        a = stub.Generate(endless, timeout=300)
        next(a)  # A is running
        b_result = []
        b_thread = threading.Thread(target=lambda: b_result.append(
            [x for x in stub.Generate(req, timeout=300)]))
        b_thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stub.Health(pi_pb2.HealthRequest()).queued < 1:
            time.sleep(0.01)
        h = stub.Health(pi_pb2.HealthRequest(), timeout=30)
        check(h.running == 1 and h.queued == 1, f"Health: 1 running, 1 queued ({h.running}, {h.queued})")
        t0 = time.monotonic()
        try:
            list(stub.Generate(req, timeout=30))
            check(False, "a third request is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-queue" in e.details()
                  and time.monotonic() - t0 < 5,
                  f"a third request is refused at once with RESOURCE_EXHAUSTED: {e.details()!r}")
        a.cancel()  # frees the engine: the waiting request runs
        b_thread.join(timeout=120)
        done_b = [x.done for x in (b_result[0] if b_result else []) if x.HasField("done")]
        check(len(done_b) == 1 and list(done_b[0].generated_ids) == golden["generated_tokens"],
              "cancelling the running request lets the waiting one run (right answer)")
        h = stub.Health(pi_pb2.HealthRequest(), timeout=30)
        check(h.running == 0 and h.queued == 0, "then the server is idle")

        # SIGTERM: clean exit, no worker left, nothing in /dev/shm.
        m = stub.Models(pi_pb2.ModelsRequest(), timeout=30)
        worker_pid = int(m.workers[0].name.split()[-1])
        rc = launch.stop()
        check(rc == 0 and "stopped" in launch.stderr(), "SIGTERM: pi-launch exits 0")
        check(not os.path.exists(f"/proc/{worker_pid}"), "its cpu worker process is gone")
        check(set(os.listdir("/dev/shm")) <= shm_before, "nothing left in /dev/shm")

        # A port already taken: a clear error.
        launch = launch_server(bin_dir, tmp, *served)
        p = subprocess.run([os.path.join(bin_dir, "pi-launch"), "--listen", launch.address,
                            *served], capture_output=True, text=True, timeout=120)
        check(p.returncode == 1 and "cannot listen on" in p.stderr,
              "a second pi-launch on the same port: 'cannot listen on'")
        launch.stop()
        rc, out, err = client(bin_dir, launch.address, "--health", "--timeout", "1")
        check(rc == 1 and "no server answers" in err, "pi-client with no server: a clear error")

    finish()


if __name__ == "__main__":
    main()

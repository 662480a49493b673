#!/usr/bin/env python3
"""The process split never changes the answer: on the demo model (llama, ReLU) and on
synthetic falcon (ReLU) and llama dReLU models with planted sparsity, greedy tokens with
the cold neurons in worker processes equal the single-process run's, for

- a local worker over shared memory, a remote one over gRPC (pi-cpu-worker --listen on
  127.0.0.1), and one of each;
- --sparse oracle and --sparse off;
- --vram-budget holding only the dense blocks (no hot neuron), some hot neurons, and the
  whole model (no cold neuron left for the workers), hot neurons on the host backend in
  this process or in a pi-gpu-worker process;
- the device path (--host-device), whole layers with their KV cache in this process or in
  a pi-gpu-worker, for those budgets and one holding half the dense blocks (a prefix of
  the layers on the device);
- pi-launch serving pi-client with the split (hot neurons in its gpu worker) and both kinds
  of cpu worker.

The reference is pi-run in one process with no split; with --sparse oracle it equals the
dense result (tests/reference/check_pi_run.py checks that against numpy).

Usage: served_matrix_test.py BIN_DIR
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import ServerProcess, check, finish  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
CORPUS = os.path.join(ROOT, "models", "kjv-valid.txt")
PROMPT = "In the beginning God created"
TOKEN = "matrix-token-0123456789abcdef"

def tool(bin_dir, name, *args, timeout=300):
    return subprocess.run([os.path.join(bin_dir, name), *args], capture_output=True, text=True,
                          timeout=timeout)


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        models = {"demo (llama relu)": os.path.join(tmp, "demo.gguf"),
                  "falcon relu": os.path.join(tmp, "falcon.gguf"),
                  "llama drelu": os.path.join(tmp, "drelu.gguf")}
        tool(bin_dir, "pi-quantize", MODEL, models["demo (llama relu)"], "f16", "--down-t")
        shape = ["--n-layer", "3", "--n-embd", "128", "--n-head", "4", "--n-ff", "512",
                 "--type", "f16", "--down-t", "--tokenizer", "bytes", "--planted-sparsity", "0.8"]
        tool(bin_dir, "pi-synth", "-o", models["falcon relu"], "--arch", "falcon",
             "--activation", "relu", *shape)
        tool(bin_dir, "pi-synth", "-o", models["llama drelu"], "--activation", "drelu", *shape)
        for name, path in models.items():
            check(os.path.exists(path), f"{name}: model written")
            p = tool(bin_dir, "pi-profile", "-m", path, "-f", CORPUS, "--max-tokens", "1024")
            check(p.returncode == 0, f"{name}: pi-profile")
            run_model(bin_dir, tmp, name, path, token)
    finish()


def run_model(bin_dir, tmp, name, path, token):
    common = ["-m", path, "-p", PROMPT, "-n", "24", "--temp", "0", "--ignore-eos", "-c", "256"]

    def ids(*args):
        p = tool(bin_dir, "pi-run", *common, "--json", *args)
        if p.returncode != 0:
            print(p.stderr)
            return None
        return json.loads(p.stdout)["generated_tokens"]

    worker = ServerProcess([os.path.join(bin_dir, "pi-cpu-worker"), "-m", path, "--listen",
                            "127.0.0.1:0", "--auth-token-file", token],
                           os.path.join(tmp, f"worker-{os.path.basename(path)}.log"))
    remote = ["--cpu-worker", worker.address, "--auth-token-file", token]
    for sparse in ("oracle", "off"):
        ref = ids("--sparse", sparse)
        check(ref is not None and len(ref) == 24, f"{name} --sparse {sparse}: in-process")
        for extra, what in ((["--cpu-workers", "1"], "shm"), (remote, "grpc"),
                            (["--cpu-workers", "1", *remote], "shm + grpc"),
                            (["--cpu-workers", "1", "--coordinator-share", "0.5"],
                             "shm, half of them kept in the coordinator")):
            got = ids("--sparse", sparse, *extra)
            check(got == ref, f"{name} --sparse {sparse}, cold neurons on {what}: same tokens")

    # VRAM budgets: the dense blocks alone, some hot neurons, everything.
    p = tool(bin_dir, "pi-place", "-m", path, "--vram-budget", "1B", "-c", "256",
             "-o", os.path.join(tmp, "probe.plan.gguf"))
    dense = int(re.search(r"of the (\d+) bytes they need", p.stderr).group(1))
    size = os.path.getsize(path)
    ref = ids("--sparse", "oracle")
    for budget, what in ((dense, "the dense blocks only"), (dense + (size - dense) // 4, "some"),
                         (4 * size, "all")):
        split = ["--sparse", "oracle", "--vram-budget", f"{budget}B", "--ffn-backend", "host"]
        got = ids(*split)
        check(got == ref, f"{name} --vram-budget {budget} ({what}), in process: same tokens")
        got = ids(*split, "--cpu-workers", "1", *remote)
        check(got == ref,
              f"{name} --vram-budget {budget} ({what}), shm + grpc workers: same tokens")
        got = ids(*split, "--gpu-worker", "--cpu-workers", "1", *remote)
        check(got == ref, f"{name} --vram-budget {budget} ({what}), hot neurons in a gpu worker, "
              "cold in shm + grpc workers: same tokens")
    # The device path (--host-device: the host backend standing in for a GPU), whole
    # layers with their KV cache in this process or in a gpu worker; below the dense
    # blocks, a prefix of the layers (the rest, and maybe the head, here).
    for budget, what in ((dense // 2, "half the dense blocks"), (dense, "the dense blocks only"),
                         (dense + (size - dense) // 4, "some"), (4 * size, "all")):
        device = ["--sparse", "oracle", "--vram-budget", f"{budget}B", "--host-device"]
        got = ids(*device)
        check(got == ref, f"{name} --vram-budget {budget} ({what}) --host-device, in process: "
              "same tokens")
        got = ids(*device, "--gpu-worker", "--cpu-workers", "1", *remote)
        check(got == ref, f"{name} --vram-budget {budget} ({what}) --host-device, layers in a gpu "
              "worker, cold neurons in shm + grpc workers: same tokens")

    # Served: pi-launch with the split and both kinds of worker, asked by pi-client.
    launch = ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0",
                            "-m", path, "-c", "256", "--sparse", "oracle", "--vram-budget",
                            str(dense + (size - dense) // 4), "--ffn-backend", "host",
                            "--cpu-workers", "1", *remote],
                           os.path.join(tmp, f"launch-{os.path.basename(path)}.log"))
    p = tool(bin_dir, "pi-client", "--server", launch.address or "127.0.0.1:1", "-p", PROMPT,
             "-n", "24", "--temp", "0", "--ignore-eos", "--json")
    got = json.loads(p.stdout)["generated_tokens"] if p.returncode == 0 else None
    if got != ref:
        print(p.stderr, launch.stderr(), got, ref)
    check(got == ref, f"{name}: pi-launch (split, shm + grpc workers) to pi-client: same tokens")
    check(launch.stop() == 0, f"{name}: pi-launch stops cleanly")
    check(worker.stop() == 0, f"{name}: the remote worker stops cleanly")


if __name__ == "__main__":
    main()

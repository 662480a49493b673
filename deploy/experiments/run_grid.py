#!/usr/bin/python3
"""Runs a grid of pi-bench decode measurements and appends one CSV row per point.

The grid is models x VRAM budgets x GPU workers x sparse modes x threads. Each
point is one pi-bench process (-p 0, -o jsonl), so a crash or a failed
placement costs that point only. A point whose key already has an "ok" row in
the results file is skipped: an interrupted grid continues where it stopped.
A point that failed before is run again and its row replaced, so the file
keeps one row per point. See README.md in this folder.

Debian's python3 and its standard library only.
"""

import argparse
import csv
import datetime
import json
import os
import socket
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
from atomic_write import write_atomically  # noqa: E402

# The key of a grid point: rows with the same key measure the same thing.
KEY_COLUMNS = ["model", "budget", "gpus", "mode", "threads", "n_gen", "ffn_backend"]
RUN_COLUMNS = ["status", "hostname", "cpu_model", "gpu_name", "commit", "timestamp"]
# pi-bench's -o json fields, in its order (others it may add later are kept
# too: the header grows).
BENCH_FIELDS = [
    "model_filename", "model_type", "model_size", "model_n_params", "cpu_isa", "n_batch",
    "n_threads", "n_prompt", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
    "samples_ns", "samples_ts", "weight_bytes_per_token", "avg_gbs", "mem_bw_gbs", "sparse",
    "ffn_active", "bw_fraction", "backend", "vram_budget", "device_budgets", "plan_fingerprint",
    "gpu_fired_share", "gpu_bytes_per_token", "cpu_bytes_per_token", "xfer_bytes_per_token",
    "gpu_bw_gbs", "link_gbs", "bound_ms_per_token", "bound_fraction",
    "device_wait_us_per_token", "cold_us_per_token", "cold_parts_per_token", "cold_gbs",
    "ffn_prepare_us_per_token", "ffn_gate_us_per_token", "ffn_select_us_per_token",
    "ffn_up_down_us_per_token", "ffn_sum_us_per_token",
]
COLUMNS = KEY_COLUMNS + RUN_COLUMNS + BENCH_FIELDS


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-m", "--models", required=True, help="GGUF models, comma-separated")
    p.add_argument("--budgets", default="none",
                   help="VRAM budgets, comma-separated: none (CPU only, no --vram-budget), "
                        "or pi-bench sizes such as 0, 512M, 1536M, 8G (default none)")
    p.add_argument("--gpus", default="1", help="GPU worker counts, comma-separated (default 1)")
    p.add_argument("--modes", default="off", help="sparse modes: off,oracle,predictor")
    p.add_argument("-t", "--threads", default="1", help="thread counts, comma-separated")
    p.add_argument("-n", "--n-gen", type=int, default=64, help="tokens decoded per run")
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--text", help="decode this text's tokens (pi-bench --text)")
    p.add_argument("--ffn-backend", default="cuda", choices=["cuda", "host"],
                   help="where the hot neurons run (default cuda)")
    p.add_argument("--profile-text", default=os.path.join(REPO, "models", "kjv-valid.txt"),
                   help="corpus for pi-profile when a model has no stats (default: the "
                        "demo's validation text)")
    p.add_argument("--profile-tokens", type=int, default=0,
                   help="pi-profile --max-tokens (default: the whole corpus)")
    p.add_argument("--no-bw", action="store_true", help="pi-bench --no-bw (skip the probes)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per point")
    p.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                   help="folder of pi-bench and pi-profile (default build/bin)")
    p.add_argument("-o", "--output", required=True, help="results CSV (appended to)")
    args = p.parse_args(argv)
    args.models = split_list(args.models)
    args.budgets = split_list(args.budgets)
    args.modes = split_list(args.modes)
    try:
        args.gpus = [int(g) for g in split_list(args.gpus)]
        args.threads = [int(t) for t in split_list(args.threads)]
    except ValueError as e:
        p.error(str(e))
    if min(args.gpus, default=0) < 1 or min(args.threads, default=0) < 1:
        p.error("--gpus and --threads need counts >= 1")
    return args


def split_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def run_text(cmd):
    """stdout of cmd, stripped; "" when it cannot run or fails."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    # "GPU 0: NVIDIA H200 (UUID: GPU-...)" -> "NVIDIA H200"
    gpus = [line.split(":", 1)[1].split("(UUID")[0].strip()
            for line in run_text(["nvidia-smi", "-L"]).splitlines() if ":" in line]
    return {"hostname": socket.gethostname(), "cpu_model": cpu or "unknown",
            "gpu_name": "; ".join(gpus) if gpus else "none", "n_gpus": len(gpus)}


def commit():
    head = run_text(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    if not head:
        return "unknown"
    dirty = run_text(["git", "-C", REPO, "status", "--porcelain"])
    return head + ("-dirty" if dirty else "")


def stats_path(model):
    stem = model[:-5] if model.endswith(".gguf") else model
    return stem + ".stats.gguf"


def ensure_stats(args, model):
    """Runs pi-profile when the model has no stats file (--vram-budget needs one)."""
    path = stats_path(model)
    if os.path.exists(path):
        return
    # Threads change the profile's speed, not its counts (bit-identical for any -t).
    cmd = [os.path.join(args.bin, "pi-profile"), "-m", model, "-f", args.profile_text,
           "-t", str(os.cpu_count() or 1)]
    if args.profile_tokens > 0:
        cmd += ["--max-tokens", str(args.profile_tokens)]
    print(f"no {path}: profiling first: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(path):
        sys.exit(f"run_grid: pi-profile failed:\n{r.stderr.strip()}")


def grid(args):
    """Every grid point's key, in a fixed order."""
    for model in args.models:
        for budget in args.budgets:
            for gpus in args.gpus:
                for mode in args.modes:
                    for threads in args.threads:
                        yield {"model": model, "budget": budget, "gpus": str(gpus), "mode": mode,
                               "threads": str(threads), "n_gen": str(args.n_gen),
                               # A CPU-only point does not depend on the backend.
                               "ffn_backend": "none" if budget == "none" else args.ffn_backend}


def key_of(row):
    return tuple(row.get(c, "") for c in KEY_COLUMNS)


def device_list(n, ffn_backend, n_gpus):
    """pi-bench --gpus for n devices: host workers, or the machine's GPUs in turn (more
    workers than GPUs share them: two on one GPU test the path, they do not add VRAM)."""
    if ffn_backend == "host":
        return ",".join(["host"] * n)
    return ",".join(str(k % max(1, n_gpus)) for k in range(n))


def bench_command(args, point, n_gpus=1):
    cmd = [os.path.join(args.bin, "pi-bench"), "-m", point["model"], "-p", "0",
           "-n", point["n_gen"], "-r", str(args.repetitions), "-t", point["threads"],
           "--sparse", point["mode"], "-o", "jsonl"]
    if point["budget"] != "none":
        cmd += ["--vram-budget", point["budget"], "--ffn-backend", point["ffn_backend"]]
        n = int(point["gpus"])
        if n > 1:  # chained by layer; GPUs each in a gpu worker process, as pi-launch runs them
            cmd += ["--gpus", device_list(n, point["ffn_backend"], n_gpus)]
            if point["ffn_backend"] != "host":
                cmd += ["--transport", "gpu-shm"]
        elif point["ffn_backend"] == "host":  # whole layers on a host device, as with N > 1
            cmd.append("--host-device")
    if args.text:
        cmd += ["--text", args.text]
    if args.no_bw:
        cmd.append("--no-bw")
    return cmd


def error_message(stderr, returncode):
    """The error pi-bench printed: its last "pi-bench: ..." line, else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("pi-bench:") and "FFN split" not in line:
            return line
    return lines[-1] if lines else f"pi-bench exited with status {returncode}"


def measure(args, point, n_gpus=1):
    """(status, pi-bench's json row or {}) for one point."""
    cmd = bench_command(args, point, n_gpus)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return f"timeout after {args.timeout:g} s", {}
    except OSError as e:
        return f"cannot run {cmd[0]}: {e}", {}
    rows = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or len(rows) != 1:
        return error_message(r.stderr, r.returncode), {}
    return "ok", json.loads(rows[0])


def csv_value(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def read_rows(path):
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def write_rows(path, header, rows):
    """Writes the whole file atomically (a crash leaves the old file)."""
    def write(f):
        w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_atomically(path, write, text=True)


def record(path, row):
    """Adds `row`, replacing earlier rows of its key (only failed ones can exist)."""
    header, rows = read_rows(path)
    header = header or list(COLUMNS)
    header += [c for c in row if c not in header]
    rows = [r for r in rows if key_of(r) != key_of(row)]
    write_rows(path, header, rows + [row])


def label(point):
    return (f"{os.path.basename(point['model'])} budget={point['budget']} gpus={point['gpus']} "
            f"mode={point['mode']} t={point['threads']} n={point['n_gen']} "
            f"{point['ffn_backend']}")


def main(argv):
    args = parse_args(argv)
    for model in args.models:
        if not os.path.exists(model):
            sys.exit(f"run_grid: no model {model}")
        if any(b != "none" for b in args.budgets):
            ensure_stats(args, model)
    where = machine()
    n_gpus = where.pop("n_gpus")
    rev = commit()
    points = list(grid(args))
    done = {key_of(r) for r in read_rows(args.output)[1] if r.get("status") == "ok"}
    failed = 0
    for k, point in enumerate(points, 1):
        prefix = f"[{k}/{len(points)}] {label(point)}"
        if key_of(point) in done:
            print(f"{prefix}: done before, skipped", flush=True)
            continue
        status, bench = measure(args, point, n_gpus)
        row = dict(point, status=status, commit=rev,
                   timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(
                       timespec="seconds"), **where)
        for name, value in bench.items():
            if name not in row:
                row[name] = csv_value(value)
        record(args.output, row)
        if status == "ok":
            print(f"{prefix}: {bench['avg_ts']:.2f} t/s", flush=True)
        else:
            failed += 1
            print(f"{prefix}: {status}", flush=True)
    print(f"run_grid: {len(points)} points, {failed} not ok; results in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

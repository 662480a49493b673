#!/usr/bin/python3
"""ctest experiment_grid: run_grid.py and plot_grid.py end to end on the demo model.

    test_grid.py BIN_DIR

A down_t copy of the demo model in a temporary folder, no stats (run_grid must
profile it), budgets none,0,6M,20M x GPU workers 1,2 x modes off,oracle on the
host backend. What is checked, against what the demo's shape implies (6
layers, n_embd 256, n_ff 768, n_vocab 4096, f16 matrices; its dense blocks
take ~4.3 MiB, its FFN rows 7.1 MB):
  - one row per point with every column; status "ok" for the runnable points
    (none, 6M, 20M), and for budget 0 either ok or the error pi-bench printed
    (below the dense blocks, placement may refuse); two GPU workers are two
    host devices chained by layer (--gpus host,host), one a host device
    (--host-device: whole layers, the same path), each of the budget: the
    plan's budget n times it, at 20M every neuron hot, and at every budget a
    GPU share at least one device's;
  - ok rows: t/s > 0; GPU + CPU bytes = pi-bench's weight bytes per token;
    CPU only: backend none, no GPU bytes, no transfers, GPU share 0;
    6M: some neurons hot, so 0 < GPU share < 1, and every layer's attention
    on the GPU with a cold part: transfers = embedding up + 6 x (x down + y up)
    + logits down; 20M: every neuron hot: GPU share 1, the CPU reads only the
    embedding row, and only the embedding and the logits move;
  - running the same command again adds no row and leaves the ok rows as
    they were (resume);
  - the three PNGs exist and are PNG files.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import run_grid  # noqa: E402  (the column lists)

N_EMBD, N_VOCAB, N_LAYER = 256, 4096, 6
BUDGETS = ["none", "0", "6M", "20M"]
MODES = ["off", "oracle"]
GPUS = ["1", "2"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def close(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def read(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def check_row(r):
    point = f"{r['budget']}/{r['gpus']}/{r['mode']}"
    if r["budget"] == "0" and r["status"] != "ok":
        check(r["status"].startswith("pi-bench:"), f"{point}: status {r['status']!r}")
        return
    check(r["status"] == "ok", f"{point}: status {r['status']!r}")
    if r["status"] != "ok":
        return
    f = {k: float(r[k]) for k in ["avg_ts", "gpu_fired_share", "gpu_bytes_per_token",
                                  "cpu_bytes_per_token", "xfer_bytes_per_token",
                                  "weight_bytes_per_token", "vram_budget"]}
    check(f["avg_ts"] > 0, f"{point}: t/s {f['avg_ts']}")
    check(close(f["gpu_bytes_per_token"] + f["cpu_bytes_per_token"],
                f["weight_bytes_per_token"]), f"{point}: GPU + CPU bytes != weight bytes")
    check(r["n_threads"] == "1" and r["n_gen"] == "8", f"{point}: -t/-n not passed on")
    check(r["sparse"].startswith(r["mode"]), f"{point}: sparse {r['sparse']}")
    embedding_and_logits = 4 * N_EMBD + 4 * N_VOCAB
    if r["budget"] == "none":
        check(r["backend"] == "none" and f["vram_budget"] == -1 and r["plan_fingerprint"] == "",
              f"{point}: split fields {r['backend']} {r['vram_budget']} {r['plan_fingerprint']}")
        check(f["gpu_fired_share"] == 0 and f["gpu_bytes_per_token"] == 0 and
              f["xfer_bytes_per_token"] == 0, f"{point}: GPU share/bytes not 0")
        return
    # Devices of budget 0 hold nothing: no device is loaded.
    check(r["backend"] == "host" or (r["backend"] == "none" and r["budget"] == "0"),
          f"{point}: backend {r['backend']}")
    check(len(r["plan_fingerprint"]) == 16 and int(r["plan_fingerprint"], 16) >= 0,
          f"{point}: plan fingerprint {r['plan_fingerprint']!r}")
    # One host device (--host-device) or two chained (--gpus host,host), each of the budget.
    n = int(r["gpus"])
    budget = {"0": 0, "6M": 6 << 20, "20M": 20 << 20}[r["budget"]]
    check(f["vram_budget"] == n * budget, f"{point}: vram_budget {f['vram_budget']}")
    check(json.loads(r["device_budgets"]) == [budget] * n,
          f"{point}: device_budgets {r['device_budgets']}")
    # The device path's time split: waiting on the devices, and one cold part per
    # layer that has cold neurons (none when every neuron is on a device).
    wait, cold = float(r["device_wait_us_per_token"]), float(r["cold_us_per_token"])
    parts = float(r["cold_parts_per_token"])
    if budget > 0:
        check(wait > 0, f"{point}: device wait {wait} µs per token")
        check(0 <= parts <= N_LAYER and (parts > 0) == (cold > 0) and
              (parts > 0 or f["gpu_fired_share"] == 1),
              f"{point}: {parts} cold parts, {cold} µs, GPU share {f['gpu_fired_share']}")
    if r["budget"] == "20M":
        check(f["gpu_fired_share"] == 1, f"{point}: GPU share {f['gpu_fired_share']}")
    if n == 2:
        return
    if r["budget"] == "0":  # nothing fits: no neuron is hot
        check(f["gpu_fired_share"] == 0, f"{point}: GPU share {f['gpu_fired_share']}")
    elif r["budget"] == "6M":
        check(f["vram_budget"] == 6 << 20, f"{point}: vram_budget {f['vram_budget']}")
        check(0 < f["gpu_fired_share"] < 1, f"{point}: GPU share {f['gpu_fired_share']}")
        check(f["xfer_bytes_per_token"] == embedding_and_logits + N_LAYER * 2 * 4 * N_EMBD,
              f"{point}: transfers {f['xfer_bytes_per_token']}")
    elif r["budget"] == "20M":
        check(f["gpu_fired_share"] == 1, f"{point}: GPU share {f['gpu_fired_share']}")
        check(f["cpu_bytes_per_token"] == 2 * N_EMBD, f"{point}: CPU bytes (one f16 row)")
        check(f["xfer_bytes_per_token"] == embedding_and_logits,
              f"{point}: transfers {f['xfer_bytes_per_token']}")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="pi_grid_") as tmp:
        model = os.path.join(tmp, "demo.gguf")
        run([os.path.join(bin_dir, "pi-quantize"), os.path.join(REPO, "models", "demo-kjv-f16.gguf"),
             model, "f16", "--down-t"])
        results = os.path.join(tmp, "results.csv")
        cmd = [sys.executable, os.path.join(HERE, "run_grid.py"), "--bin", bin_dir, "-m", model,
               "--budgets", ",".join(BUDGETS), "--gpus", ",".join(GPUS), "--modes",
               ",".join(MODES), "-t", "1", "-n", "8", "-r", "1", "--ffn-backend", "host",
               "--profile-text", os.path.join(REPO, "models", "kjv-valid.txt"),
               "--profile-tokens", "1024", "-o", results]
        out = run(cmd)
        print(out)
        check("profiling first" in out and os.path.exists(os.path.join(tmp, "demo.stats.gguf")),
              "run_grid did not profile the model")
        n_points = len(BUDGETS) * len(MODES) * len(GPUS)
        check(f"[{n_points}/{n_points}]" in out, "no progress line for the last point")

        header, rows = read(results)
        missing = [c for c in run_grid.COLUMNS if c not in header]
        check(not missing, f"columns missing: {missing}")
        keys = {tuple(r[c] for c in run_grid.KEY_COLUMNS) for r in rows}
        check(len(rows) == n_points and len(keys) == n_points,
              f"{len(rows)} rows, {len(keys)} keys, want {n_points}")
        for r in rows:
            check(all(r[c] for c in ["hostname", "cpu_model", "gpu_name", "commit", "timestamp"]),
                  "machine/commit/timestamp empty")
            check_row(r)
        # Two devices of a budget serve at least the share one of them does.
        share = {(r["budget"], r["gpus"], r["mode"]): float(r["gpu_fired_share"])
                 for r in rows if r["status"] == "ok"}
        for (budget, gpus, mode), s in share.items():
            if gpus == "2" and budget != "none" and (budget, "1", mode) in share:
                check(s >= share[(budget, "1", mode)],
                      f"{budget}/{mode}: two devices' GPU share {s} below one's "
                      f"{share[(budget, '1', mode)]}")

        out = run(cmd)  # resume: the ok points are skipped
        header2, rows2 = read(results)
        check(len(rows2) == n_points, f"rerun: {len(rows2)} rows, want {n_points}")
        ok = [r for r in rows if r["status"] == "ok"]
        ok2 = [r for r in rows2 if r["status"] == "ok"]
        check(len(ok2) >= len(ok) and all(r in ok2 for r in ok), "rerun changed the ok rows")
        check(out.count("done before, skipped") == len(ok), "rerun did not skip the ok points")

        plots = os.path.join(tmp, "plots")
        run([sys.executable, os.path.join(HERE, "plot_grid.py"), results, "-o", plots])
        for kind in ["tokens_per_s", "gpu_fired_share", "bytes_per_token"]:
            png = os.path.join(plots, f"demo.{kind}.png")
            ok_png = os.path.exists(png) and os.path.getsize(png) > 1000
            if ok_png:
                with open(png, "rb") as f:
                    ok_png = f.read(8) == b"\x89PNG\r\n\x1a\n"
            check(ok_png, f"{png} missing, empty or not a PNG")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("experiment grid: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

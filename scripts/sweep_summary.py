#!/usr/bin/env python3
"""Summarizes device_checks.sh's decode sweeps as one markdown table.

Usage: scripts/sweep_summary.py OUT_DIR

Reads the pi-bench json rows OUT_DIR/sweep*.jsonl holds (sweep.jsonl,
sweep_random_ids.jsonl, sweep_gpus.jsonl, sweep_predictor.jsonl,
sweep_cats.jsonl: whichever exist) and prints, per tg row, what the GPU
hybrid's targets are stated in: the budget (per device for a --gpus chain),
tokens/s and its ratio to CPU-only dense decode at the same threads
(sweep.jsonl's `off` row — the predictor file's model has the same weights;
sweep_cats.jsonl's SiLU model its own; "-" when there is none), the
GPU's share of the fired neurons, the bytes per token by device, the share
of the time model's bound, where a token's time went (waiting on the device,
the cold parts and their GB/s) and the CPU's sparse FFN phases (input, gate
dots, select, up/down, sum; µs per token).
"""
import json
import os
import sys

FILES = ["sweep.jsonl", "sweep_random_ids.jsonl", "sweep_gpus.jsonl", "sweep_predictor.jsonl",
         "sweep_cats.jsonl"]
# Files of another model, whose CPU-only dense rows are their own baseline.
OWN_BASELINE = {"sweep_cats.jsonl"}


def read_rows(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{path}:{n}: not a json row ({e}); skipped", file=sys.stderr)
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                print(f"{path}:{n}: not a json object; skipped", file=sys.stderr)
    return rows


def budget(r):
    b = r.get("vram_budget", -1)
    if b is None or b < 0:
        return "CPU only"
    per_device = r.get("device_budgets") or []
    if len(per_device) > 1:  # a --gpus chain: each device's budget
        return "+".join(f"{d / 2**30:.2f}G" for d in per_device)
    return f"{b / 2**30:.2f}G"


def phases(r):
    keys = ["ffn_prepare_us_per_token", "ffn_gate_us_per_token", "ffn_select_us_per_token",
            "ffn_up_down_us_per_token", "ffn_sum_us_per_token"]
    v = [r.get(k, 0) or 0 for k in keys]
    return "/".join(f"{x:.0f}" for x in v) if any(v) else ""


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    dense = {}  # file -> n_threads -> CPU-only dense t/s (sweep.jsonl, or the file's own)
    tables = []
    for name in FILES:
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        rows = [r for r in read_rows(path) if r.get("n_gen", 0) > 0]
        base = name if name in OWN_BASELINE else "sweep.jsonl"
        for r in rows:
            if name == base and r.get("sparse") == "off" and budget(r) == "CPU only":
                dense.setdefault(base, {})[r.get("n_threads")] = r.get("avg_ts", 0)
        tables.append((name, rows))
    if not tables:
        print(f"sweep_summary: no sweep*.jsonl in {out}", file=sys.stderr)
        return 1
    print("| file | mode | budget | threads | t/s | x dense CPU | GPU fired | MB/token GPU / CPU "
          "| of bound | device wait µs | cold µs (GB/s) | CPU FFN µs in/gate/select/up-down/sum |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in tables:
        own = dense.get(name if name in OWN_BASELINE else "sweep.jsonl", {})
        for r in rows:
            ts = r.get("avg_ts", 0)
            base = own.get(r.get("n_threads"))
            ratio = f"{ts / base:.2f}" if base else "-"
            split = budget(r) != "CPU only"
            fired = f"{100 * r.get('gpu_fired_share', 0):.1f} %" if split else "-"
            mb = f"{r.get('gpu_bytes_per_token', 0) / 1e6:.0f} / {r.get('cpu_bytes_per_token', 0) / 1e6:.0f}"
            bound = r.get("bound_fraction", 0)
            bound_s = f"{100 * bound:.0f} %" if bound else "-"
            wait = r.get("device_wait_us_per_token", 0)
            cold = r.get("cold_us_per_token", 0)
            cold_s = f"{cold:.0f} ({r.get('cold_gbs', 0):.1f})" if cold else "-"
            print(f"| {name} | {r.get('sparse', '')} | {budget(r)} | {r.get('n_threads')} | "
                  f"{ts:.1f} | {ratio} | {fired} | {mb} | {bound_s} | "
                  f"{wait:.0f} | {cold_s} | {phases(r)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""Plots a run_grid.py results CSV: speed, the GPU's share of the fired neurons
and the bytes each device reads per token, against the VRAM budget.

    plot_grid.py results.csv -o plots/

Writes, per model (and machine, when the file holds several):
  <model>.tokens_per_s.png     t/s against the budget, one line per mode x GPU
                               count (x threads when several); the CPU-only
                               point ("none") a dashed horizontal line per mode
  <model>.gpu_fired_share.png  share of the fired FFN neurons the GPU served
  <model>.bytes_per_token.png  MB read per token by the GPU and the CPU, and
                               moved between them, stacked, per budget and mode
Only rows with status "ok" count; of several for one point, the latest.

Debian's python3 with python3-matplotlib.
"""

import argparse
import collections
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from atomic_write import save_png  # noqa: E402

KEY = ["model", "budget", "gpus", "mode", "threads", "n_gen", "ffn_backend"]



def load(path):
    """The latest ok row of every grid point, per (model, machine)."""
    latest = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("status") != "ok":
                continue
            k = tuple(row[c] for c in KEY) + (row["hostname"],)
            if k not in latest or row["timestamp"] > latest[k]["timestamp"]:
                latest[k] = row
    groups = collections.defaultdict(list)
    for row in latest.values():
        groups[(row["model"], row["hostname"])].append(row)
    return groups


def series_name(row, vary_threads, vary_backend):
    name = f"{row['mode']}, {row['gpus']} GPU"
    if vary_threads:
        name += f", t={row['threads']}"
    if vary_backend:
        name += f", {row['ffn_backend']}"
    return name


def budget_axis(rows):
    """(divisor, unit) for the budgets' bytes."""
    top = max([float(r["vram_budget"]) for r in rows] + [1.0])
    return (2.0**30, "GiB") if top >= 2 * 2.0**30 else (2.0**20, "MiB")


def title(ax, rows, what):
    r = rows[0]
    ax.set_title(f"{what}: {os.path.basename(r['model'])}, n_gen {r['n_gen']}\n"
                 f"{r['hostname']}: {r['cpu_model']}; GPU: {r['gpu_name']}", fontsize=9)


def split_rows(rows):
    """(rows with a budget, CPU-only rows)."""
    return ([r for r in rows if r["budget"] != "none"], [r for r in rows if r["budget"] == "none"])


def line_plot(rows, field, ylabel, what, path, cpu_line, ylim=None):
    split, cpu_only = split_rows(rows)
    vary_threads = len({r["threads"] for r in rows}) > 1
    vary_backend = len({r["ffn_backend"] for r in split}) > 1
    div, unit = budget_axis(split or rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = {}
    lines = collections.defaultdict(list)
    for r in split:
        lines[series_name(r, vary_threads, vary_backend)].append(r)
    for name in sorted(lines):
        pts = sorted(lines[name], key=lambda r: float(r["vram_budget"]))
        (h,) = ax.plot([float(r["vram_budget"]) / div for r in pts],
                       [float(r[field]) for r in pts], marker="o", label=name)
        colors.setdefault(pts[0]["mode"], h.get_color())
    if cpu_line:
        for r in sorted(cpu_only, key=lambda r: (r["mode"], int(r["threads"]))):
            extra = f", t={r['threads']}" if vary_threads else ""
            ax.axhline(float(r[field]), linestyle="--", color=colors.get(r["mode"], "gray"),
                       label=f"{r['mode']}, CPU only{extra}")
    ax.set_xlabel(f"VRAM budget ({unit})")
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    title(ax, rows, what)
    fig.tight_layout()
    save_png(fig, path, 110)
    plt.close(fig)


def bytes_plot(rows, path):
    # One stacked bar per (budget, mode): the bytes hardly depend on threads,
    # so each mode's lowest thread count stands for it.
    lowest = {}
    for r in rows:
        k = (r["budget"], r["mode"], r["gpus"])
        if k not in lowest or int(r["threads"]) < int(lowest[k]["threads"]):
            lowest[k] = r
    budgets = sorted({r["budget"] for r in lowest.values()},
                     key=lambda b: -1.0 if b == "none" else float(
                         next(r["vram_budget"] for r in lowest.values() if r["budget"] == b)))
    series = sorted({(r["mode"], r["gpus"]) for r in lowest.values()})
    width = 0.8 / max(1, len(series))
    parts = [("gpu_bytes_per_token", "GPU", "tab:green"), ("cpu_bytes_per_token", "CPU", "tab:blue"),
             ("xfer_bytes_per_token", "transfers", "tab:orange")]
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(budgets) * len(series)), 5))
    for si, (mode, gpus) in enumerate(series):
        xs, stacks = [], [[] for _ in parts]
        for bi, b in enumerate(budgets):
            r = lowest.get((b, mode, gpus))
            if r is None:
                continue
            xs.append(bi + (si - (len(series) - 1) / 2) * width)
            for pi, (field, _, _) in enumerate(parts):
                stacks[pi].append(float(r[field]) / 1e6)
        bottom = [0.0] * len(xs)
        for pi, (_, name, color) in enumerate(parts):
            ax.bar(xs, stacks[pi], width * 0.9, bottom=bottom, color=color,
                   label=name if si == 0 else None, edgecolor="black", linewidth=0.3)
            bottom = [a + b for a, b in zip(bottom, stacks[pi])]
        for x, top in zip(xs, bottom):
            ax.text(x, top, f"{mode}\n{gpus} GPU", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(budgets)))
    ax.set_xticklabels(budgets)
    ax.set_xlabel("VRAM budget")
    ax.set_ylabel("MB per token (1e6 bytes)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    title(ax, rows, "bytes read per token by device")
    fig.tight_layout()
    save_png(fig, path, 110)
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", help="results of run_grid.py")
    p.add_argument("-o", "--out-dir", required=True, help="folder for the PNGs")
    args = p.parse_args(argv)
    groups = load(args.csv)
    if not groups:
        sys.exit(f"plot_grid: no ok rows in {args.csv}")
    os.makedirs(args.out_dir, exist_ok=True)
    hosts_per_model = collections.Counter(model for model, _ in groups)
    for (model, host), rows in sorted(groups.items()):
        stem = os.path.basename(model)
        stem = stem[:-5] if stem.endswith(".gguf") else stem
        if hosts_per_model[model] > 1:
            stem += "-" + host
        out = os.path.join(args.out_dir, stem)
        line_plot(rows, "avg_ts", "tokens/s (decode)", "decode speed", out + ".tokens_per_s.png",
                  cpu_line=True)
        line_plot(rows, "gpu_fired_share", "share of fired FFN neurons on the GPU",
                  "GPU share of the fired neurons", out + ".gpu_fired_share.png", cpu_line=False,
                  ylim=(0, 1.05))
        bytes_plot(rows, out + ".bytes_per_token.png")
        print(f"plot_grid: {out}.{{tokens_per_s,gpu_fired_share,bytes_per_token}}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

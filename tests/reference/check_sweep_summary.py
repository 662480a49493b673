#!/usr/bin/python3
"""ctest sweep_summary: scripts/sweep_summary.py over pi-bench rows made here.

    check_sweep_summary.py BIN_DIR

A down_t copy of the demo model, profiled; pi-bench -o jsonl writes what
device_checks.sh's sweep writes (CPU-only dense and oracle rows, then the
host backend at a budget holding part of the neurons, decoding the profile's
text) into sweep.jsonl, and a predictor-less file's predictor sweep is left
out. Checked against the rows themselves (an independent read of the json):
one table line per tg row in file order, the dense row's ratio 1.00 and every
other row's its t/s over the dense t/s, the split row's GPU share and MB per
token as the row says, the CPU-only rows without a GPU share; a missing
folder is an error (exit 1), a line that is not json is skipped with a
message naming it.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SUMMARY = os.path.join(REPO, "scripts", "sweep_summary.py")
TEXT = os.path.join(REPO, "models", "kjv-valid.txt")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "demo.gguf")
        run([os.path.join(bin_dir, "pi-quantize"), os.path.join(REPO, "models", "demo-kjv-f16.gguf"),
             model, "f16", "--down-t"])
        run([os.path.join(bin_dir, "pi-profile"), "-m", model, "-f", TEXT, "--max-tokens", "512"])
        bench = [os.path.join(bin_dir, "pi-bench"), "-m", model, "-p", "0", "-n", "8", "-r", "1",
                 "-t", "2", "--no-bw", "--text", TEXT, "-o", "jsonl"]
        lines = run(bench + ["--sparse", "off,oracle"])
        lines += run(bench + ["--sparse", "oracle", "--vram-budget", "6M", "--host-device"])
        with open(os.path.join(tmp, "sweep.jsonl"), "w") as f:
            f.write(lines)
            f.write("not json: a stray line\n")
        rows = [json.loads(l) for l in lines.splitlines() if l.startswith("{")]
        if len(rows) != 3:
            sys.exit(f"FAILED: expected 3 pi-bench rows, got {len(rows)}")

        r = subprocess.run([sys.executable, SUMMARY, tmp], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAILED: sweep_summary exit {r.returncode}\n{r.stderr}")
        if "sweep.jsonl:" not in r.stderr or "not a json row" not in r.stderr:
            sys.exit(f"FAILED: the stray line was not reported: {r.stderr!r}")
        table = [l for l in r.stdout.splitlines() if l.startswith("| sweep")]
        if len(table) != len(rows):
            sys.exit(f"FAILED: {len(table)} table lines for {len(rows)} rows:\n{r.stdout}")
        dense = rows[0]["avg_ts"]
        if rows[0]["sparse"] != "off" or rows[0]["vram_budget"] >= 0:
            sys.exit("FAILED: the first row is not the CPU-only dense one")
        for row, line in zip(rows, table):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[1] != row["sparse"] or int(cells[3]) != row["n_threads"]:
                sys.exit(f"FAILED: {line} does not name {row['sparse']} -t {row['n_threads']}")
            if abs(float(cells[4]) - row["avg_ts"]) > 0.051:
                sys.exit(f"FAILED: t/s {cells[4]} against {row['avg_ts']}")
            if abs(float(cells[5]) - row["avg_ts"] / dense) > 0.0051:
                sys.exit(f"FAILED: ratio {cells[5]} against {row['avg_ts'] / dense:.4f}")
            split = row["vram_budget"] >= 0
            if split:
                share = float(cells[6].rstrip(" %")) / 100
                if abs(share - row["gpu_fired_share"]) > 0.0006 or not 0 < share < 1:
                    sys.exit(f"FAILED: GPU share {cells[6]} against {row['gpu_fired_share']}")
                gpu_mb, cpu_mb = (float(x) for x in cells[7].split("/"))
                if abs(gpu_mb - row["gpu_bytes_per_token"] / 1e6) > 0.51 or \
                        abs(cpu_mb - row["cpu_bytes_per_token"] / 1e6) > 0.51:
                    sys.exit(f"FAILED: MB per token {cells[7]}")
            elif cells[6] != "-":
                sys.exit(f"FAILED: a CPU-only row with a GPU share: {line}")
        if float(table[0].strip("|").split("|")[5]) != 1.0:
            sys.exit("FAILED: the dense row's ratio is not 1.00")

        r = subprocess.run([sys.executable, SUMMARY, os.path.join(tmp, "none")],
                           capture_output=True, text=True)
        if r.returncode != 1 or "no sweep" not in r.stderr:
            sys.exit(f"FAILED: a missing folder gave exit {r.returncode}: {r.stderr!r}")
    print("sweep_summary: ok")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""ctest device_checks_dry_run: scripts/device_checks.sh's sweeps without a GPU.

    check_device_checks_dry_run.py BIN_DIR

A GPU is lent to few sessions and for minutes: the script must not fail on its
own steps there. This runs it with DEVICE=host (every sweep on the host
backend: --host-device, --gpus host,host) on a small planted model (N_LAYER
etc.), skipping the GPU tests, sanitizers and CUDA benchmarks, and checks
what it leaves in OUT_DIR against the device run's plan: it exits 0 saying
all checks passed; each sweep file holds one json row per run it names
(CPU-only dense and oracle, seven budgets; 2G on random ids; one and two
workers at two budgets; predictor mode CPU only and at three budgets; a SiLU
model's CPU-only dense and cats and cats at four budgets), every
split row on the host backend (budget 0: none) with the budget asked for — the chained rows
with two devices of half — and q8_0 predictors trained (their calibration
table); summary.md has a line per row, naming each chain's per-device budgets.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "device_checks.sh")
GIB = 2**30
MIB = 2**20


def fail(msg):
    sys.exit(f"FAILED: {msg}")


def rows_of(path):
    if not os.path.exists(path):
        fail(f"{os.path.basename(path)} was not written")
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def check_budgets(name, rows, want):
    """want: per row, None (CPU only) or the list of per-device budgets."""
    if len(rows) != len(want):
        fail(f"{name}: {len(rows)} rows, expected {len(want)}")
    for i, (r, w) in enumerate(zip(rows, want)):
        if w is None:
            if r["vram_budget"] != -1 or r["device_budgets"]:
                fail(f"{name} row {i}: a CPU-only run with budget {r['vram_budget']}")
            continue
        if r["device_budgets"] != w or r["vram_budget"] != sum(w):
            fail(f"{name} row {i}: budgets {r['vram_budget']} {r['device_budgets']}, expected {w}")
        # A plan that gives the device nothing loads none: budget 0 runs here.
        if r["backend"] != ("none" if sum(w) == 0 else "host"):
            fail(f"{name} row {i}: backend {r['backend']} at budget {sum(w)}")
        if not r["avg_ts"] > 0:
            fail(f"{name} row {i}: no tokens/s")


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, DEVICE="host", SKIP_TESTS="1", SKIP_SANITIZER="1", SKIP_BENCH="1",
                   N_LAYER="2", N_EMBD="256", N_FF="1024", N_HEAD="4", N_VOCAB="512",
                   THREADS="2")
        r = subprocess.run(["bash", SCRIPT, bin_dir, out], capture_output=True, text=True,
                           env=env, timeout=600)
        if r.returncode != 0 or "device_checks: all checks passed" not in r.stdout:
            fail(f"device_checks.sh exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")

        sweep = rows_of(os.path.join(out, "sweep.jsonl"))
        if [x["sparse"] for x in sweep[:2]] != ["off", "oracle"]:
            fail("sweep.jsonl does not start with the CPU-only dense and oracle rows")
        budgets = [0, 512 * MIB, GIB, 1536 * MIB, 2 * GIB, 3 * GIB, 8 * GIB]
        check_budgets("sweep.jsonl", sweep, [None, None] + [[b] for b in budgets])
        check_budgets("sweep_random_ids.jsonl", rows_of(os.path.join(out, "sweep_random_ids.jsonl")),
                      [[2 * GIB]])
        gpus = rows_of(os.path.join(out, "sweep_gpus.jsonl"))
        check_budgets("sweep_gpus.jsonl", gpus, [[2 * GIB], [GIB, GIB], [8 * GIB], [4 * GIB, 4 * GIB]])
        # The SiLU model under --sparse cats: CPU-only dense and cats, then four budgets.
        cats = rows_of(os.path.join(out, "sweep_cats.jsonl"))
        check_budgets("sweep_cats.jsonl", cats,
                      [None, None] + [[b] for b in (GIB, 2 * GIB, 3 * GIB, 8 * GIB)])
        if [x["sparse"] for x in cats] != ["off", "cats@0.5"] + ["cats@0.5+gpu"] * 4:
            fail(f"sweep_cats.jsonl modes {[x['sparse'] for x in cats]}")
        pred = rows_of(os.path.join(out, "sweep_predictor.jsonl"))
        check_budgets("sweep_predictor.jsonl", pred, [None, [2 * GIB], [2256 * MIB], [2816 * MIB]])
        if any(not x["sparse"].startswith("predictor") for x in pred):
            fail("sweep_predictor.jsonl has a row that is not predictor mode")

        with open(os.path.join(out, "predictor_train.txt")) as f:
            train = f.read()
        if "(q8_0 predictors," not in train or "mean   recall" not in train:
            fail(f"no q8_0 predictors and their calibration table:\n{train}")
        with open(os.path.join(out, "summary.md")) as f:
            table = [l for l in f.read().splitlines() if l.startswith("| sweep")]
        n_rows = len(sweep) + 1 + len(gpus) + len(pred) + len(cats)
        if len(table) != n_rows:
            fail(f"summary.md: {len(table)} lines for {n_rows} rows")
        chains = [l for l in table if "| 1.00G+1.00G |" in l or "| 4.00G+4.00G |" in l]
        if len(chains) != 2:
            fail("summary.md does not name the two chains' per-device budgets:\n" + "\n".join(table))
    print(f"device_checks.sh DEVICE=host: {n_rows} rows, all checks passed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""--sparse cats' (or teal's) quality against its target: for each target, the share of FFN
neurons skipped on held-out text (teal: and of the thresholded inputs' entries), the
perplexity there (pi-perplexity) and how often the greedy token agrees with the dense (or,
ReLU, oracle) one at the same position of that text (pi-dump-logits, one token at a time).
Calibrates first (pi-profile on CALIB).

    scripts/cats_quality.py BIN_DIR MODEL CALIB.txt HELD.txt [--mode cats|teal]
                            [--allocation uniform|greedy] [TARGET ...]

Prints a Markdown table (docs/sparse-execution.md's)."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(*args):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(map(str, args)), p.stderr[-2000:]))
    return p


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    b, model, calib, held = sys.argv[1:5]
    rest = sys.argv[5:]
    mode, allocation = "cats", "uniform"
    while rest[:1] in (["--mode"], ["--allocation"]):
        if rest[0] == "--mode":
            mode = rest[1]
        else:
            allocation = rest[1]
        rest = rest[2:]
    targets = [float(t) for t in rest] or [0.25, 0.4, 0.5, 0.6]
    tool = lambda n: os.path.join(b, n)  # noqa: E731
    run(tool("pi-profile"), "-m", model, "-f", calib, "-t", "2", "--max-tokens", "20000")
    with open(held, encoding="utf-8") as f:
        text = f.read()[:4000]
    with tempfile.TemporaryDirectory() as tmp:
        lines = os.path.join(tmp, "text.jsonl")
        with open(lines, "w", encoding="utf-8") as f:
            f.write(json.dumps(text) + "\n")
        ids = json.loads(run(tool("pi-tokenize"), "-m", model, "--ids-jsonl", lines).stdout)[:256]
        tok_arg = ",".join(map(str, ids))

        def measure(mode, target):
            ppl = json.loads(run(tool("pi-perplexity"), "-m", model, "-f", held, "-c", "256",
                                 "--chunks", "8", "-t", "2", "--json", "--sparse", mode,
                                 "--target-sparsity", target, "--sparse-allocation",
                                 allocation).stdout)
            out = os.path.join(tmp, "%s-%s.f32" % (mode, target))
            run(tool("pi-dump-logits"), "-m", model, "--tokens", tok_arg, "--out", out,
                "--sparse", mode, "--target-sparsity", target, "--sparse-allocation", allocation,
                "-t", "2")
            top = np.fromfile(out, dtype="<f4").reshape(len(ids), -1).argmax(axis=1)
            return ppl["ffn_sparsity"], ppl.get("input_sparsity"), ppl["ppl"], top

        dense_mode = "oracle" if "relu" in run(tool("pi-run"), "-m", model, "-p", "x", "-n",
                                                 "1", "--sparse", "off").stderr else "off"
        base_sparsity, _, base_ppl, base_top = measure(dense_mode, 0.5)
        teal = mode == "teal"
        print("| target | skipped (held-out)%s | perplexity | vs %s | greedy agreement |"
              % (" | inputs dropped" if teal else "", dense_mode))
        print("|---:|---:|---:|---:|---:%s|" % ("|---:" if teal else ""))
        print("| %s | %.1f %%%s | %.3f | | 100 %% |"
              % (dense_mode, 100 * base_sparsity, " | 0 %" if teal else "", base_ppl))
        for t in targets:
            s, ins, ppl, top = measure(mode, t)
            print("| %.0f %% | %.1f %%%s | %.3f | %+.2f %% | %.1f %% |"
                  % (100 * t, 100 * s, " | %.1f %%" % (100 * ins) if teal else "", ppl,
                     100 * (ppl / base_ppl - 1), 100 * float(np.mean(top == base_top))))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots a pi-profile stats file: per layer, every neuron's firing frequency (count /
tokens profiled), neurons sorted from most to least frequent, log-scale y, one line per
layer. A steep curve means a few hot neurons do most of the work (good for a GPU/CPU
split); a flat one means little to gain from placement.

Needs numpy and matplotlib (Debian: python3-numpy python3-matplotlib).

Usage:  plot_activations.py MODEL.stats.gguf [-o activations.png] [--title TEXT]
"""

import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pigguf  # noqa: E402
from atomic_write import save_png  # noqa: E402

NAME = re.compile(r"^blk\.(0|[1-9][0-9]*)\.ffn_fire_count$")



def read_stats(path):
    """(metadata, [counts of layer 0, layer 1, ...]) with layers matched by the number in
    the tensor name, never by sorting names (blk.10 must not land before blk.2)."""
    r = pigguf.GGUFReader(path)
    md = r.metadata
    for key in ("pi.stats.n_layer", "pi.stats.n_ff", "pi.stats.n_tokens"):
        if key not in md:
            raise ValueError("%s: not a pi-profile stats file (no %s)" % (path, key))
    n_layer, n_ff = int(md["pi.stats.n_layer"]), int(md["pi.stats.n_ff"])
    layers = [None] * n_layer
    for name, t in r.tensors.items():
        m = NAME.match(name)
        if not m:
            continue
        il = int(m.group(1))
        if il >= n_layer:
            raise ValueError("%s: tensor %s is beyond pi.stats.n_layer = %d"
                             % (path, name, n_layer))
        if t.dtype != "i32" or t.ne[0] != n_ff:
            raise ValueError("%s: tensor %s is %s %s, expected i32 [%d]"
                             % (path, name, t.dtype, t.ne, n_ff))
        layers[il] = np.frombuffer(t.data, "<i4", count=n_ff).astype(np.int64)
    missing = [i for i, c in enumerate(layers) if c is None]
    if missing:
        raise ValueError("%s: no fire counts for layer(s) %s" % (path, missing))
    return md, layers


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stats", help="a stats file written by pi-profile")
    ap.add_argument("-o", "--output", help="PNG to write (default: STATS without .gguf + .png)")
    ap.add_argument("--title", help="plot title (default: model name, tokens)")
    a = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    try:
        md, layers = read_stats(a.stats)
    except (OSError, ValueError) as e:
        print("plot_activations: %s" % e, file=sys.stderr)
        return 1
    n_tokens = int(md["pi.stats.n_tokens"])
    n_ff = int(md["pi.stats.n_ff"])
    out = a.output or (a.stats[:-5] if a.stats.endswith(".gguf") else a.stats) + ".png"

    fig, ax = plt.subplots(figsize=(9, 5.5))
    cmap = plt.get_cmap("viridis")
    x = np.arange(1, n_ff + 1) / n_ff
    floor = None
    for il, counts in enumerate(layers):
        freq = np.sort(counts)[::-1] / max(n_tokens, 1)
        sparsity = 1.0 - freq.mean()
        # log scale: neurons that never fired are drawn at none (NaN), not at 0.
        y = np.where(freq > 0, freq, np.nan)
        if np.any(freq > 0):
            m = freq[freq > 0].min()
            floor = m if floor is None else min(floor, m)
        color = cmap(il / max(len(layers) - 1, 1))
        ax.plot(x, y, color=color, lw=1.2, label="layer %d (%.1f%% sparse)" % (il, 100 * sparsity))
    ax.set_yscale("log")
    ax.set_xlim(0, 1)
    if floor is not None:
        ax.set_ylim(floor / 2, 1.5)
    ax.set_xlabel("neurons, most frequent first (fraction of %d)" % n_ff)
    ax.set_ylabel("firing frequency (share of tokens)")
    name = md.get("pi.stats.model_name") or "model"
    act = md.get("pi.stats.activation", "?")
    ax.set_title(a.title or "%s (%s): FFN neuron firing frequency over %d tokens"
                 % (name, act, n_tokens))
    ax.grid(True, which="both", alpha=0.3)
    if len(layers) <= 16:
        ax.legend(fontsize=8, loc="lower left")
    else:
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, len(layers) - 1))
        fig.colorbar(sm, ax=ax, label="layer")
    fig.tight_layout()
    save_png(fig, out, 120)
    print("plot_activations: wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

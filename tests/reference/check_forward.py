#!/usr/bin/env python3
"""The C++ engine's logits vs the independent numpy reference (llama_ref.py).

For a matrix of small random llama and falcon models made by `pi-synth` (every FFN form,
every weight type, GQA, MHA and falcon's MQA, tied and untied output, ffn_down and
PowerInfer's ffn_down_t, falcon with and without attn_norm_2), runs
`pi-dump-logits` in decode mode (one token at a time, through the KV cache) and prompt mode
(all tokens at once), and compares every position's logits with llama_ref.py's.

Error measure: max |engine - reference| / max |reference logit|, over all positions.

Usage:
    check_forward.py [BIN_DIR]       # BIN_DIR holds pi-synth and pi-dump-logits;
                                     # default $PI_BIN_DIR, else ./build/bin
    check_forward.py BIN_DIR --keep DIR   # keep the models and logits in DIR
    check_forward.py BIN_DIR -k q4        # only cases whose name contains "q4"

Exit status: 0 when every case passes, 1 otherwise; the last line is "N passed, M failed".
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import LlamaRef  # noqa: E402
import pigguf  # noqa: E402  (llama_ref put tools/ on the path)

# Relative tolerances (error / max |logit|). f32/f16/bf16 weights: both sides compute the
# same products in f32 (the reference in f64), so only accumulation order differs. Q8_0/Q4_0
# (and a Q8_0 KV cache, with any weights):
# both sides round activations to Q8_0 blocks, so they agree as tightly -- except where an
# activation (or a block scale, on its way to f16) lies within a few ulps of a rounding
# boundary: the two sides may round it differently, a legitimate one-quantum difference
# that changes that position and, through the KV cache, every later one. So a quantized
# case may go beyond the tight bound only from a position where the reference saw such a
# value (closer than BOUNDARY quanta, or SCALE_BOUNDARY relative for a scale), and by at
# most LOOSE.
TOLERANCE = {"f32": 1e-4, "f16": 1e-4, "bf16": 1e-4, "q8_0": 1e-4, "q4_0": 1e-4}
# Types pi-synth does not write: an f32 model through `pi-quantize TYPE` (llama.cpp's
# block formats and its Q4_K_M / Q5_K_M mixes): case type -> (TYPE, the type its ffn_gate,
# or falcon's ffn_up, then has). K-quant rows are whole 256s: those cases widen the model,
# but for the "fallback" ones, whose 64-wide rows go to llama-quantize's fallback types.
QUANTIZE = {"q4_1": ("q4_1", "q4_1"), "q5_0": ("q5_0", "q5_0"), "q5_1": ("q5_1", "q5_1"),
            "q6_k": ("q6_k", "q6_K"), "q4_k_m": ("q4_k_m", "q4_K"),
            "q5_k_m": ("q5_k_m", "q5_K"), "q4_k_m-fallback": ("q4_k_m", "q5_0"),
            "q6_k-fallback": ("q6_k", "q8_0")}
WIDE = ["--n-embd", "256", "--n-ff", "512"]
for _t in QUANTIZE:
    TOLERANCE[_t] = 1e-4
ACT_QUANTIZED = ("q8_0", "q4_0") + tuple(QUANTIZE)
# A Q8_0 KV cache rounds K, V (and q) the same way, whatever the weights' type; its
# boundaries are in q8_boundary too (llama_ref.py). Cases with one: their dump flags.
# Those formats' dots subtract a min or offset term (d*sc*sum(q*x) - dmin*m*sum(x)) whose
# two sides are each larger than the dot: the f32 error, hence how near a boundary two
# implementations may round an activation differently, is some ten times larger.
BOUNDARY_FACTOR = {t: 10.0 for t in QUANTIZE}
# A Q8_0 cache beside an f16 one: f16 rows round V (or K) to 11 bits, and a value the two
# sides compute a few f32 ulps apart may round to neighbouring f16 values -- a 1e-3 relative
# step that moves the hidden state some 2e-5 relative (measured: f32/f16 cases). That moves
# the next q or K rows, which are rounded to Q8_0, by ~2.5e-3 quanta: near a Q8_0 boundary
# within that, the two sides may round differently (measured: silu-f32-gqa-kv_q8_0k_f16v,
# q rounded the other way at position 25 alone, 5.3e-4 quanta from the boundary). Such a q
# changes its own position only (q is not cached), so a mixed case may go beyond the tight
# bound at scattered positions only (measured: 11 of 64 there): at most MIXED_SPREAD of
# them, where a systematic error (a row read with the other row's type) shows at nearly all.
MIXED_CACHE_BOUNDARY_FACTOR = 100.0
MIXED_SPREAD = 0.5
BOUNDARY = 2e-5
SCALE_BOUNDARY = 3e-7
LOOSE = 3e-2

# name, activation, type, n_head_kv (of 4 heads), tied, down_t[, extra pi-synth flags]
CASES = [
    ("silu-f32-gqa", "silu", "f32", 2, False, False),
    ("silu-f16-mha-tied", "silu", "f16", 4, True, False),
    ("silu-bf16-gqa-downt", "silu", "bf16", 2, False, True),
    ("silu-q8_0-mha-tied-downt", "silu", "q8_0", 4, True, True),
    ("silu-q4_0-gqa", "silu", "q4_0", 2, False, False),
    ("relu-f32-mha-downt", "relu", "f32", 4, False, True),
    ("relu-f16-gqa", "relu", "f16", 2, False, False),
    ("relu-q8_0-gqa", "relu", "q8_0", 2, False, False),
    ("relu-q4_0-gqa-tied-downt", "relu", "q4_0", 2, True, True),
    ("drelu-f32-gqa-tied", "drelu", "f32", 2, True, False),
    ("drelu-f16-mha-downt", "drelu", "f16", 4, False, True),
    ("drelu-q8_0-mha", "drelu", "q8_0", 4, False, False),
    ("drelu-q4_0-mha-downt", "drelu", "q4_0", 4, False, True),
    # Falcon: LayerNorm + biases, fused QKV, NeoX RoPE, parallel residual, no gate.
    ("falcon-gelu-f32-mqa", "gelu", "f32", 1, False, False, ["--arch", "falcon"]),
    ("falcon-gelu-f16-gqa-norm2-tied", "gelu", "f16", 2, True, False,
     ["--arch", "falcon", "--attn-norm-2"]),
    ("falcon-relu-f32-gqa-norm2", "relu", "f32", 2, False, False,
     ["--arch", "falcon", "--attn-norm-2"]),
    ("falcon-relu-q8_0-mqa-norm2-downt", "relu", "q8_0", 1, False, True,
     ["--arch", "falcon", "--attn-norm-2"]),
    # PWRI magic and no pi.ffn_activation key: relu by the loaders' default rule.
    ("falcon-relu-bf16-mha-downt-nokey", "relu", "bf16", 4, False, True,
     ["--arch", "falcon", "--no-activation-key"]),
    ("falcon-gelu-q4_0-gqa-norm2", "gelu", "q4_0", 2, False, False,
     ["--arch", "falcon", "--attn-norm-2"]),
    # KV cache row types (pi-dump-logits flags, 8th field); q8_0 rows need head_dim 32.
    ("relu-f16-gqa-kv_f16", "relu", "f16", 2, False, True, [], ["-ctk", "f16", "-ctv", "f16"]),
    ("silu-f32-gqa-kv_q8_0", "silu", "f32", 1, False, False, ["--n-head", "2"],
     ["-ctk", "q8_0", "-ctv", "q8_0"]),
    ("falcon-relu-f32-mqa-kv_f16k_q8_0v", "relu", "f32", 1, False, True,
     ["--arch", "falcon", "--n-head", "2"], ["-ctk", "f16", "-ctv", "q8_0"]),
    # The other mixes of K and V row types (plain -ctk q8_0 leaves V at f16).
    ("silu-f32-gqa-kv_q8_0k_f16v", "silu", "f32", 1, False, False, ["--n-head", "2"],
     ["-ctk", "q8_0"]),
    ("falcon-gelu-f16-mqa-kv_q8_0k_f32v", "gelu", "f16", 1, False, False,
     ["--arch", "falcon", "--n-head", "2"], ["-ctk", "q8_0", "-ctv", "f32"]),
    ("relu-f32-gqa-kv_f32k_q8_0v", "relu", "f32", 1, False, True, ["--n-head", "2"],
     ["-ctk", "f32", "-ctv", "q8_0"]),
    ("silu-f16-gqa-kv_f32k_f16v", "silu", "f16", 2, False, False, [], ["-ctk", "f32", "-ctv", "f16"]),
    ("drelu-f32-mha-kv_f16k_f32v", "drelu", "f32", 4, False, True, [], ["-ctk", "f16", "-ctv", "f32"]),
    ("silu-f32-gqa-kv_f32", "silu", "f32", 2, False, False, [], ["-ctk", "f32", "-ctv", "f32"]),
    # RoPE frequency bases beyond LLaMA-2's 10000: LLaMA-3's 500000, and 1e6.
    ("silu-f32-gqa-theta500k", "silu", "f32", 2, False, False, ["--rope-theta", "500000"]),
    ("relu-f16-mha-theta1m-downt", "relu", "f16", 4, False, True, ["--rope-theta", "1000000"]),
    ("falcon-gelu-f32-mqa-theta1m", "gelu", "f32", 1, False, False,
     ["--arch", "falcon", "--rope-theta", "1000000"]),
    # RoPE scaling as llama.cpp's files carry it: Llama 3.1's rope_freqs.weight (its original
    # context shrunk to 64 so that the 64 positions reach every branch of the factors: 1,
    # smoothed, and the full factor) and linear scaling (rope.scaling.type, .factor).
    ("silu-f32-gqa-llama3rope", "silu", "f32", 2, False, False,
     ["--rope-scaling", "llama3", "--rope-scale", "8", "--rope-orig-ctx", "64"]),
    ("relu-q8_0-gqa-llama3rope-downt", "relu", "q8_0", 2, False, True,
     ["--rope-scaling", "llama3", "--rope-scale", "32", "--rope-orig-ctx", "64",
      "--rope-theta", "500000"]),
    ("silu-f16-mha-ropelinear4", "silu", "f16", 4, False, False,
     ["--rope-scaling", "linear", "--rope-scale", "4"]),
    # qwen2: Q/K/V biases and NeoX RoPE (tied, as Qwen2's small models).
    ("qwen2-silu-f32-gqa", "silu", "f32", 2, False, False, ["--arch", "qwen2"]),
    ("qwen2-silu-q8_0-gqa-tied", "silu", "q8_0", 2, True, False, ["--arch", "qwen2"]),
    ("qwen2-relu-f16-mha-downt", "relu", "f16", 4, False, True,
     ["--arch", "qwen2", "--rope-theta", "1000000"]),
    # qwen3: Q and K heads RMS-normed before NeoX RoPE.
    ("qwen3-silu-f32-gqa", "silu", "f32", 2, False, False, ["--arch", "qwen3"]),
    ("qwen3-silu-q4_0-gqa-tied", "silu", "q4_0", 2, True, False, ["--arch", "qwen3"]),
    # llama.cpp's formats, by pi-quantize (QUANTIZE): layer 1's attn_v and ffn_down and
    # output.weight are Q6_K in the mixes.
    ("silu-q4_k_m-gqa", "silu", "q4_k_m", 2, False, False, WIDE),
    ("relu-q5_k_m-mha-downt", "relu", "q5_k_m", 4, False, True, WIDE),
    ("silu-q5_k_m-mha-downt", "silu", "q5_k_m", 4, False, True, WIDE),
    ("relu-q5_k_m-mha", "relu", "q5_k_m", 4, False, False, WIDE),
    ("relu-q4_k_m-mha-downt", "relu", "q4_k_m", 4, False, True, WIDE),
    ("drelu-q6_k-gqa-tied", "drelu", "q6_k", 2, True, False, WIDE),
    ("falcon-gelu-q4_k_m-mqa", "gelu", "q4_k_m", 1, False, False, ["--arch", "falcon"] + WIDE),
    ("silu-q4_1-gqa", "silu", "q4_1", 2, False, False),
    ("relu-q5_0-mha-downt", "relu", "q5_0", 4, False, True),
    ("silu-q5_1-gqa-tied", "silu", "q5_1", 2, True, False),
    ("silu-q4_k_m-fallback-gqa", "silu", "q4_k_m-fallback", 2, False, False),
    ("relu-q6_k-fallback-mha-downt", "relu", "q6_k-fallback", 4, False, True),
    # gemma2: post-norms, GeGLU, soft-caps (small ones, so they bite), a sliding window
    # on even layers shorter than the tokens; gemma3: head norms, 5 of 6 layers slide with
    # their own RoPE base; phi3: fused QKV and gate+up, every layer slides.
    ("gemma2-gelu-f32-gqa-tied", "gelu", "f32", 2, True, False,
     ["--arch", "gemma2", "--sliding-window", "5", "--softcap", "1.5,4"]),
    ("gemma2-gelu-q8_0-mha", "gelu", "q8_0", 4, False, False,
     ["--arch", "gemma2", "--sliding-window", "9", "--softcap", "2,6"]),
    ("gemma3-gelu-f32-gqa-tied", "gelu", "f32", 2, True, False,
     ["--arch", "gemma3", "--sliding-window", "6", "--n-layer", "7", "--rope-theta", "1000000"]),
    ("gemma3-gelu-q4_0-mha-downt", "gelu", "q4_0", 4, False, True,
     ["--arch", "gemma3", "--sliding-window", "11", "--n-layer", "6", "--rope-theta", "1000000"]),
    ("phi3-silu-f32-gqa", "silu", "f32", 2, False, False, ["--arch", "phi3", "--sliding-window", "7"]),
    ("phi3-silu-q4_0-mha-downt", "silu", "q4_0", 4, False, True,
     ["--arch", "phi3", "--sliding-window", "13"]),
    # --sparse cats (decode steps only; prompt batches run dense): thresholds from the
    # quantiles pi-profile writes beside the model (a byte tokenizer, to profile text).
    ("cats40-silu-f32-gqa-downt", "silu", "f32", 2, False, True, ["--tokenizer", "bytes"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.4"]),
    ("cats60-silu-q8_0-mha-downt", "silu", "q8_0", 4, False, True, ["--tokenizer", "bytes"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.6"]),
    ("cats50-silu-q4_0-gqa-downt-qwen3", "silu", "q4_0", 2, False, True,
     ["--tokenizer", "bytes", "--arch", "qwen3"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.5"]),
    ("cats70-relu-f16-gqa-downt", "relu", "f16", 2, False, True, ["--tokenizer", "bytes"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.7"]),
    ("cats50-falcon-gelu-f32-mqa-downt", "gelu", "f32", 1, False, True,
     ["--tokenizer", "bytes", "--arch", "falcon"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.5"]),
    ("cats50-gemma2-gelu-f32-gqa-downt", "gelu", "f32", 2, True, True,
     ["--tokenizer", "bytes", "--arch", "gemma2", "--sliding-window", "5", "--softcap", "2,6"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.5"]),
    ("cats40-phi3-silu-q8_0-gqa-downt", "silu", "q8_0", 2, False, True,
     ["--tokenizer", "bytes", "--arch", "phi3", "--sliding-window", "7"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "cats", "--target-sparsity", "0.4"]),
    # --sparse teal: cats, and the inputs of q, k, v (the attention's normed input), o (its
    # heads' output) and the gate (the FFN's normed input) thresholded, each product over the
    # kept entries' columns (transposed copies: exact for f32 and f16 weights).
    ("teal50-silu-f32-gqa-downt", "silu", "f32", 2, False, True, ["--tokenizer", "bytes"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "teal", "--target-sparsity", "0.5"]),
    ("teal30-silu-f16-mha-downt-tied", "silu", "f16", 4, True, True, ["--tokenizer", "bytes"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "teal", "--target-sparsity", "0.3"]),
    ("teal40-gemma2-gelu-f32-gqa-downt", "gelu", "f32", 2, True, True,
     ["--tokenizer", "bytes", "--arch", "gemma2", "--sliding-window", "5", "--softcap", "2,6"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "teal", "--target-sparsity", "0.4"]),
    ("teal50-phi3-silu-f16-gqa-downt", "silu", "f16", 2, False, True,
     ["--tokenizer", "bytes", "--arch", "phi3", "--sliding-window", "7"],
     ["-ctk", "f32", "-ctv", "f32", "--sparse", "teal", "--target-sparsity", "0.5"]),
]
# A cats or teal case may part from the reference only from a position where a neuron's
# |act(gate)| (teal: also an input entry's |x|) came within this (relative) of its layer's
# threshold: the two sides' rounding may put it on either side.
GATE_BOUNDARY = 1e-4
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                      "kjv-valid.txt")


def common_level(zero, target):
    """The s with mean(max(zero[l], s)) = target: every layer skips s of its neurons, or its
    own exact zeros where they are more (0 when the zeros alone reach the target)."""
    if not any(z > target for z in zero):
        return target
    z = sorted(zero)
    n = len(z)
    rest = sum(z)
    for j in range(1, n + 1):
        rest -= z[j - 1]
        s = (n * target - rest) / j
        if s >= z[j - 1] and (j == n or s <= z[j]):
            return max(0.0, s)
    return 0.0


def cats_thresholds(bin_dir, model, dump_flags):
    """Profiles `model` (pi-profile writes MODEL.stats.gguf) and returns the per-layer gate
    thresholds --sparse cats takes from it for the case's --target-sparsity: each layer's
    |act(gate)| quantile (float32, 0 %..100 %) at the common level, interpolated in float64;
    and, for --sparse teal, the three input thresholds per layer the same way."""
    run([os.path.join(bin_dir, "pi-profile"), "-m", model, "-f", CORPUS, "-c", "64",
         "--max-tokens", "1500", "-t", "2"])
    stats = pigguf.GGUFReader(model[:-len(".gguf")] + ".stats.gguf")
    target = float(dump_flags[dump_flags.index("--target-sparsity") + 1])
    gate = level_thresholds(stats, "ffn_gate_quantiles", target)
    if "teal" not in dump_flags:
        return gate, None
    return gate, [level_thresholds(stats, name, target)
                  for name in ("attn_in_quantiles", "attn_out_quantiles", "ffn_in_quantiles")]


def level_thresholds(stats, name, target):
    """Each layer's threshold from the quantile tensors blk.N.<name> at the common level."""
    qs = [stats.tensors["blk.%d.%s" % (il, name)].to_f32().astype(np.float32)
          for il in range(stats.metadata["pi.stats.n_layer"])]
    zero = []
    for q in qs:
        k = 0  # the last point still 0; the zero share is taken mid-way to the next
        while k + 1 < len(q) and q[k + 1] == 0:
            k += 1
        zero.append(0.0 if k == 0 else min(1.0, (k + 0.5) / 100))
    pos = common_level(zero, target) * 100
    k = min(int(pos), 99)
    return [np.float32(float(q[k]) + (pos - k) * float(np.float32(q[k + 1] - q[k])))
            for q in qs]

SHAPE = dict(n_vocab=320, n_embd=64, n_layer=2, n_head=4, n_ff=160, n_ctx=64)
# 64 tokens (the synthetic models' context): prompt mode evaluates them as one batch, long
# enough for the matrix-matrix kernels of every weight type (parallel_matmul.h's GemmMinRun).
TOKENS = [1, 5, 9, 200, 17, 3, 319, 42, 42, 0, 128, 64, 7, 250] + \
    [(i * 37 + 11) % SHAPE["n_vocab"] for i in range(50)]


def rope_scaling_problems(ref, extra):
    """What the reference saw of a case's RoPE scaling that differs from what it asked for,
    and whether the scaling moves these logits far beyond the tolerance (so an engine that
    ignored it would fail the case)."""
    scaling = extra[extra.index("--rope-scaling") + 1] if "--rope-scaling" in extra else None
    factors = ref.rope_factors
    if (scaling == "llama3") != (factors is not None):
        return ["rope_freqs.weight %s" % ("absent" if factors is None else "present")]
    if scaling == "linear" and ref.pos_scale == 1.0:
        return ["no linear scaling"]
    if scaling is None:
        return [] if ref.pos_scale == 1.0 else ["position scale %g" % ref.pos_scale]
    if scaling == "llama3":
        full = float(extra[extra.index("--rope-scale") + 1])
        ones, full_n = int(np.sum(factors == 1.0)), int(np.sum(np.isclose(factors, full)))
        if ones == 0 or full_n == 0 or ones + full_n == len(factors):
            return ["rope factors %s do not reach 1, smoothed and %g" % (factors, full)]
    expect = ref.forward(TOKENS)
    saved = ref.rope_factors, ref.pos_scale
    ref.rope_factors, ref.pos_scale = None, 1.0
    unscaled = ref.forward(TOKENS)
    ref.rope_factors, ref.pos_scale = saved
    moved = float(np.abs(unscaled - expect).max() / np.abs(expect).max())
    return [] if moved > 1e-2 else ["the scaling moves the logits by %.1e only" % moved]


def arch_problems(ref, extra):
    """What the reference saw of a case's architecture that differs from what it asked for,
    and whether each of its features (window, caps, post-norms, gemma3's local RoPE) moves
    these logits far beyond the tolerance, so an engine that left one out would fail."""
    arch = extra[extra.index("--arch") + 1] if "--arch" in extra else "llama"
    problems = []
    if ref.arch != arch:
        return ["arch %s" % ref.arch]
    if ref.neox != (arch != "llama"):
        problems.append("NeoX RoPE mismatch")
    if ("attn_q_b" in ref.layers[0]) != (arch == "qwen2"):
        problems.append("Q/K/V biases mismatch")
    if ("q_norm" in ref.layers[0]) != (arch in ("qwen3", "gemma3")):
        problems.append("Q/K head norms mismatch")
    if ("attn_post_norm" in ref.layers[0]) != (arch in ("gemma2", "gemma3")):
        problems.append("post-norms mismatch")
    if "--sliding-window" in extra and ref.window != int(extra[extra.index("--sliding-window") + 1]):
        problems.append("window %d" % ref.window)
    if problems or arch not in ("gemma2", "gemma3", "phi3"):
        return problems
    expect = ref.forward(TOKENS)

    def moved_without(attr, off):
        saved = getattr(ref, attr)
        setattr(ref, attr, off)
        try:
            return float(np.abs(ref.forward(TOKENS) - expect).max() / np.abs(expect).max())
        finally:
            setattr(ref, attr, saved)
    features = [("window", 0)]
    if arch == "gemma2":
        features += [("attn_softcap", 0.0), ("final_softcap", 0.0)]
    if arch == "gemma3":
        features += [("local_base", None)]
    for attr, off in features:
        moved = moved_without(attr, off)
        if moved < 1e-2:
            problems.append("the %s moves the logits by %.1e only" % (attr, moved))
    return problems


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s%s" % (" ".join(cmd), p.returncode,
                                                           p.stdout[-2000:], p.stderr[-2000:]))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir", nargs="?",
                    default=os.environ.get("PI_BIN_DIR", os.path.join("build", "bin")))
    ap.add_argument("--keep", help="write models and logits here (kept)")
    ap.add_argument("-k", dest="filter", default="", help="only cases whose name has this")
    args = ap.parse_args()

    synth = os.path.join(args.bin_dir, "pi-synth")
    dump = os.path.join(args.bin_dir, "pi-dump-logits")
    quantize = os.path.join(args.bin_dir, "pi-quantize")
    for exe in (synth, dump, quantize, os.path.join(args.bin_dir, "pi-profile")):
        if not os.access(exe, os.X_OK):
            print("missing executable %s" % exe)
            print("0 passed, 1 failed")
            return 1

    work = args.keep or tempfile.mkdtemp(prefix="pi-check-forward-")
    os.makedirs(work, exist_ok=True)
    passed = failed = 0
    tok_arg = ",".join(str(t) for t in TOKENS)
    for seed, case in enumerate(CASES, start=1):
        name, act, wtype, n_head_kv, tied, down_t = case[:6]
        extra = case[6] if len(case) > 6 else []
        # Without a case's own cache types, an exact f32 cache (the engine's default is f16).
        dump_flags = case[7] if len(case) > 7 else ["-ctk", "f32", "-ctv", "f32"]
        # A type a case does not name is the engine's default, f16 (llama.cpp's).
        cache_k = dump_flags[dump_flags.index("-ctk") + 1] if "-ctk" in dump_flags else "f16"
        cache_v = dump_flags[dump_flags.index("-ctv") + 1] if "-ctv" in dump_flags else "f16"
        falcon = "falcon" in extra
        if args.filter not in name:
            continue
        model = os.path.join(work, name + ".gguf")
        synth_model = model + ".f32.gguf" if wtype in QUANTIZE else model
        cmd = [synth, "-o", synth_model, "--type", "f32" if wtype in QUANTIZE else wtype,
               "--activation", act,
               "--n-head-kv", str(n_head_kv), "--seed", str(seed)]
        for k, v in SHAPE.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        cmd += extra  # after SHAPE: a case's own flags win
        if tied:
            cmd.append("--tied")
        if down_t:
            cmd.append("--down-t")
        try:
            run(cmd)
            if wtype in QUANTIZE:
                run([quantize, synth_model, model, QUANTIZE[wtype][0]])
                os.remove(synth_model)
            ref = LlamaRef(model, cache_k, cache_v)
            expect = ref.forward(TOKENS)
            # The reference must see the model the case asked for; otherwise the case would
            # silently test something else.
            problems = []
            if ref.activation != act:
                problems.append("activation %s" % ref.activation)
            if ref.tied != tied:
                problems.append("tied=%s" % ref.tied)
            if ref.n_head_kv != n_head_kv:
                problems.append("n_head_kv=%d" % ref.n_head_kv)
            if ("ffn_down_t" in ref.layers[0]) != down_t:
                problems.append("down_t mismatch")
            if ref.falcon != falcon:
                problems.append("falcon=%s" % ref.falcon)
            if not falcon:
                problems += arch_problems(ref, extra)
            if ("attn_norm_2" in ref.layers[0]) != ("--attn-norm-2" in extra):
                problems.append("attn_norm_2 mismatch")
            first = "ffn_up" if falcon else "ffn_gate"
            if ref.layers[0][first].dtype != QUANTIZE.get(wtype, (wtype, wtype))[1]:
                problems.append("%s type %s" % (first, ref.layers[0][first].dtype))
            theta = float(extra[extra.index("--rope-theta") + 1]) if "--rope-theta" in extra \
                else 10000.0
            if ref.freq_base != theta:
                problems.append("rope.freq_base %g" % ref.freq_base)
            if "--no-activation-key" in extra and "pi.ffn_activation" in ref.reader.metadata:
                problems.append("pi.ffn_activation present")
            problems += rope_scaling_problems(ref, extra)
            if problems:
                raise RuntimeError("pi-synth model differs from the case: " + ", ".join(problems))
            # Per mode: the logits and the reference's boundary distances for them.
            expects = {m: (expect, ref.q8_boundary, ref.q8_scale_boundary, None)
                       for m in ("decode", "prompt")}
            if "cats" in dump_flags or "teal" in dump_flags:
                thresholds, inputs = cats_thresholds(args.bin_dir, model, dump_flags)
                sparse = ref.forward(TOKENS, gate_thresholds=thresholds, input_thresholds=inputs)
                expects["decode"] = (sparse, ref.q8_boundary, ref.q8_scale_boundary,
                                     ref.gate_margin)
                moved = float(np.abs(sparse - expect).max() / np.abs(expect).max())
                if moved < 10 * TOLERANCE[wtype]:  # else a dense engine would pass too
                    raise RuntimeError("the thresholds move the logits by %.1e only" % moved)
                for k in range(3 if inputs else 0):  # each input's own threshold bites
                    partial = [t if j != k else [0.0] * len(t) for j, t in enumerate(inputs)]
                    alone = ref.forward(TOKENS, gate_thresholds=thresholds,
                                        input_thresholds=partial)
                    moved = float(np.abs(sparse - alone).max() / np.abs(expect).max())
                    if moved < 10 * TOLERANCE[wtype]:
                        raise RuntimeError("input %d's thresholds move the logits by %.1e only"
                                           % (k, moved))
            for mode in ("decode", "prompt"):
                expect, q8_boundary, q8_scale_boundary, gate_margin = expects[mode]
                scale = float(np.abs(expect).max())
                out = os.path.join(work, "%s.%s.f32" % (name, mode))
                run([dump, "-m", model, "--tokens", tok_arg, "--out", out, "--mode", mode] +
                    dump_flags)
                got = np.fromfile(out, dtype="<f4")
                if got.size != expect.size:
                    raise RuntimeError("%s: %s logits have %d floats, expected %d x %d"
                                       % (name, mode, got.size, len(TOKENS), ref.n_vocab))
                got = got.reshape(expect.shape)
                err = np.abs(got - expect).max(axis=1) / scale
                tol = TOLERANCE[wtype]
                bad = np.nonzero(~(err <= tol))[0]  # also catches NaN
                ok = len(bad) == 0
                note = ""
                if not ok:
                    p0 = int(bad[0])
                    near = q8_boundary[p0]
                    near_scale = q8_scale_boundary[p0]
                    rest = float(np.max(err[p0:]))
                    factor = BOUNDARY_FACTOR.get(wtype, 1.0)
                    q8_cache = "q8_0" in (cache_k, cache_v)
                    mixed = q8_cache and "f16" in (cache_k, cache_v)
                    if mixed:
                        factor = max(factor, MIXED_CACHE_BOUNDARY_FACTOR)
                    if (wtype in ACT_QUANTIZED or q8_cache) and (near < BOUNDARY * factor
                                                   or near_scale < SCALE_BOUNDARY * factor):
                        ok = rest <= LOOSE and (not mixed or np.mean(err > tol) <= MIXED_SPREAD)
                        note = ("  [diverges from pos %d, where an activation is %.1e quanta "
                                "(a scale %.1e relative) from a Q8_0 rounding boundary; rel "
                                "err from there %.2e, tol %.0e]"
                                % (p0, near, near_scale, rest, LOOSE))
                    elif gate_margin is not None and gate_margin[p0] < GATE_BOUNDARY:
                        ok = rest <= LOOSE
                        note = ("  [diverges from pos %d, where a neuron's |act(gate)| is %.1e "
                                "(relative) from its threshold; rel err from there %.2e, tol "
                                "%.0e]" % (p0, gate_margin[p0], rest, LOOSE))
                    else:
                        note = "  [first over tolerance at pos %d]" % p0
                argmax_agree = float(np.mean(got.argmax(1) == expect.argmax(1)))
                print("%-4s %-26s %-6s rel err %.2e (tol %.0e)  argmax agree %.0f%%  "
                      "max|logit| %.2f%s"
                      % ("ok" if ok else "FAIL", name, mode, float(np.max(err)), tol,
                         100 * argmax_agree, scale, note), flush=True)
                passed += ok
                failed += not ok
        except Exception as e:  # a case that cannot run is a failure, not a crash
            print("FAIL %-26s %s" % (name, e), flush=True)
            failed += 1
    if not args.keep:
        for f in os.listdir(work):
            os.remove(os.path.join(work, f))
        os.rmdir(work)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""pi-perplexity against an independent numpy computation of the same chunked perplexity.

- Small random llama models from `pi-synth --tokenizer bytes` (a byte-level SPM vocabulary):
  the text is tokenized here by hand (BOS, then SPM's space prefix and U+2581 for spaces,
  every other byte as its <0xNN> token), each chunk's logits come from llama_ref.py (numpy,
  float64 accumulation), and the perplexity follows llama-perplexity: chunks of n_ctx
  tokens, the first replaced by BOS, the second half's predictions scored, PPL = exp(mean
  nll), error = PPL * stderr(nll). pi-perplexity --json must agree within REL_TOL (2e-6), with
  the default -c, an odd -c with a batch that does not divide it, --chunks and -t 2.
- The text output: one running "[i]ppl" per chunk and "Final estimate: PPL = X +/- Y".
- The bundled demo model over models/kjv-valid.txt with -c 256: the token count equals
  python3-sentencepiece's, the first two chunks agree with llama_ref.py, and the PPL over
  the whole file is docs/tools.md's 23.74 +/- 0.63 to the digits given.
- Bad input: a text shorter than one chunk, no -f, a missing file, a bad --chunks.

Usage: check_perplexity.py BIN_DIR      (BIN_DIR holds pi-perplexity and pi-synth)
Prints "N passed, M failed" last; exit status 1 on any failure.
"""

import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from llama_ref import LlamaRef  # noqa: E402

DEMO_MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
DEMO_TOKENIZER = os.path.join(ROOT, "models", "demo-tokenizer.model")
DEMO_TEXT = os.path.join(ROOT, "models", "kjv-valid.txt")
# docs/tools.md's claim: pi-perplexity and the numpy computation agree within 2e-6 (the
# largest difference seen is 1.4e-6, from float32 logits).
REL_TOL = 2e-6
# docs/tools.md's figure for the bundled demo model over kjv-valid.txt at -c 256: PPL 23.74
# +/- 0.63. The run must print that, to the digits given.
DEMO_PPL, DEMO_STDERR = 23.74, 0.63

# Byte-level SPM vocabulary written by pi-synth --tokenizer bytes.
BOS = 1
BYTE0 = 3  # <0x00>
SPACE_PIECE = 3 + 256  # U+2581

SYNTH = dict(n_vocab=320, n_embd=64, n_layer=2, n_head=4, n_ff=160, n_ctx=64)

TEXT = ("In the beginning was the Word, and the Word was with God, and the Word was God. "
        "The same was in the beginning with God. All things were made by him; and without "
        "him was not any thing made that was made. In him was life; and the life was the "
        "light of men. Caf\u00e9 na\u00efve \u2014 r\u00e9sum\u00e9.\n"
        "And the light shineth in darkness; and the darkness comprehended it not.\n")

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)


def byte_tokens(text):
    """BOS + the byte-level SPM encoding: one space prepended (add_space_prefix), spaces as
    the U+2581 piece, every other character as the byte tokens of its UTF-8."""
    ids = [BOS]
    for ch in " " + text:
        if ch == " ":
            ids.append(SPACE_PIECE)
        else:
            ids.extend(BYTE0 + b for b in ch.encode("utf-8"))
    return ids


def reference_ppl(ref, tokens, n_ctx, max_chunks=None):
    """llama-perplexity's estimate, computed with llama_ref.py logits."""
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first = n_ctx // 2
    nll = []
    running = []
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        chunk[0] = BOS
        logits = ref.forward(chunk).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        for j in range(first, n_ctx - 1):
            nll.append(-logp[j, chunk[j + 1]])
        running.append(math.exp(np.mean(nll)))
    nll = np.array(nll)
    ppl = math.exp(nll.mean())
    stderr = nll.std(ddof=1) / math.sqrt(len(nll))
    return dict(ppl=ppl, ppl_stderr=ppl * stderr, nll_mean=float(nll.mean()),
                n_chunks=n_chunks, n_ctx=n_ctx, n_tokens_scored=len(nll), running=running)


def run(bin_dir, *args, timeout=600):
    p = subprocess.run([os.path.join(bin_dir, "pi-perplexity"), *args], capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_json(bin_dir, *args):
    # An exact f32 KV cache, as the numpy reference computes (the default is f16).
    rc, out, err = run(bin_dir, "--json", "-ctk", "f32", "-ctv", "f32", *args)
    if rc != 0:
        print(err)
        return None
    try:
        return json.loads(out)
    except ValueError:
        print("not JSON: %r" % out[:500])
        return None


def rel(a, b):
    return abs(a - b) / abs(b)


def compare(name, got, want):
    if got is None:
        check(False, f"{name}: pi-perplexity failed")
        return
    exact = all(got[k] == want[k] for k in ("n_chunks", "n_ctx", "n_tokens_scored"))
    check(exact, "%s: n_chunks %s n_ctx %s n_tokens_scored %s (expected %d %d %d)"
          % (name, got["n_chunks"], got["n_ctx"], got["n_tokens_scored"],
             want["n_chunks"], want["n_ctx"], want["n_tokens_scored"]))
    for k in ("ppl", "ppl_stderr", "nll_mean"):
        v = got[k]
        d = rel(v, want[k]) if isinstance(v, (int, float)) else float("nan")
        check(d < REL_TOL, "%s: %s %s vs reference %.6g (rel diff %.1e, tol %.0e)"
              % (name, k, v, want[k], d, REL_TOL))


def synthetic_checks(bin_dir, work):
    synth = os.path.join(bin_dir, "pi-synth")
    cases = [("silu-f32", ["--type", "f32", "--activation", "silu", "--seed", "3"]),
             ("relu-f16-gqa", ["--type", "f16", "--activation", "relu", "--n-head-kv", "2",
                               "--seed", "4"])]
    text_path = os.path.join(work, "text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(TEXT)
    tokens = byte_tokens(TEXT)
    for name, extra in cases:
        model = os.path.join(work, name + ".gguf")
        cmd = [synth, "-o", model, "--tokenizer", "bytes", *extra]
        for k, v in SYNTH.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            check(False, f"{name}: pi-synth failed: {p.stderr.strip()}")
            continue
        ref = LlamaRef(model)

        # Default -c: min(model context 64, 512) = 64.
        got = run_json(bin_dir, "-m", model, "-f", text_path, "-t", "1")
        if got is not None:
            check(got["n_tokens"] == len(tokens),
                  f"{name}: text is {got['n_tokens']} tokens, byte-level encoding "
                  f"{len(tokens)}")
        compare(f"{name} -c default", got, reference_ppl(ref, tokens, SYNTH["n_ctx"]))

        # Odd context, a batch that does not divide it, a chunk limit, two threads.
        got = run_json(bin_dir, "-m", model, "-f", text_path, "-c", "37", "-b", "5",
                       "--chunks", "3", "-t", "2")
        compare(f"{name} -c 37 -b 5 --chunks 3 -t 2", got, reference_ppl(ref, tokens, 37, 3))

        # Text mode: running values per chunk, then the final estimate.
        want = reference_ppl(ref, tokens, 24)
        rc, out, err = run(bin_dir, "-m", model, "-f", text_path, "-c", "24", "-t", "1",
                           "-ctk", "f32", "-ctv", "f32")
        running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
        final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
        check(rc == 0 and len(running) == want["n_chunks"]
              and all(rel(a, b) < REL_TOL for a, b in zip(running, want["running"])),
              f"{name} -c 24 text: {len(running)} running values match the reference's "
              f"{want['n_chunks']}")
        check(final is not None and rel(float(final.group(1)), want["ppl"]) < REL_TOL
              and rel(float(final.group(2)), want["ppl_stderr"]) < 1e-3,
              f"{name} -c 24 text: 'Final estimate: PPL = {want['ppl']:.4f} +/- "
              f"{want['ppl_stderr']:.5f}' (got {final.group(0) if final else out[-200:]!r})")

    # Bad input, on the last model.
    rc, out, err = run(bin_dir, "-m", model, "-f", text_path, "-c", str(len(tokens) + 1))
    check(rc != 0 and "fewer than one chunk" in err and "Traceback" not in err,
          "text shorter than one chunk: " + err.strip().splitlines()[-1][:120])
    rc, out, err = run(bin_dir, "-m", model)
    check(rc != 0 and "-f" in err, "no -f: " + err.strip()[:120])
    rc, out, err = run(bin_dir, "-m", model, "-f", os.path.join(work, "missing.txt"))
    check(rc != 0 and "missing.txt" in err, "missing text file is named")
    rc, out, err = run(bin_dir, "-m", model, "-f", text_path, "--chunks", "0")
    check(rc != 0 and "--chunks" in err, "--chunks 0 is rejected")
    rc, out, err = run(bin_dir, "-m", model, "-f", text_path, "-c", "abc")
    check(rc != 0 and "-c expects an integer" in err, "malformed -c")


def demo_checks(bin_dir):
    with open(DEMO_TEXT, encoding="utf-8") as f:
        text = f.read()
    import sentencepiece as spm  # a missing reference fails the run (python3-sentencepiece)
    sp = spm.SentencePieceProcessor(model_file=DEMO_TOKENIZER)
    n_expect = 1 + len(sp.encode(text))

    # Two chunks against the numpy reference.
    got = run_json(bin_dir, "-f", DEMO_TEXT, "-c", "256", "--chunks", "2", "-t", "2")
    if got is not None:
        check(got["n_tokens"] == n_expect,
              f"demo: kjv-valid.txt is {got['n_tokens']} tokens, sentencepiece {n_expect}")
        tokens = [sp.bos_id()] + sp.encode(text)
        compare("demo -c 256 --chunks 2", got,
                reference_ppl(LlamaRef(DEMO_MODEL), tokens, 256, 2))

    # The whole file.
    got = run_json(bin_dir, "-f", DEMO_TEXT, "-c", "256", "-t", "2")
    if got is None:
        check(False, "demo: whole-file run failed")
        return
    ppl = got["ppl"]
    ok = (isinstance(ppl, (int, float)) and math.isfinite(ppl)
          and round(ppl, 2) == DEMO_PPL
          and isinstance(got["ppl_stderr"], (int, float))
          and round(got["ppl_stderr"], 2) == DEMO_STDERR)
    check(ok, "demo: kjv-valid.txt -c 256: PPL = %s +/- %s over %s chunks, %s tokens scored "
          "(docs/tools.md's %.2f +/- %.2f), %.0f tokens/s"
          % (ppl, got["ppl_stderr"], got["n_chunks"], got["n_tokens_scored"], DEMO_PPL,
             DEMO_STDERR, got.get("tokens_per_second") or 0))
    if n_expect is not None:
        check(got["n_chunks"] == n_expect // 256
              and got["n_tokens_scored"] == got["n_chunks"] * (256 - 1 - 128),
              "demo: %d chunks of 256, 127 scored each" % (n_expect // 256))


def sparse_checks(bin_dir, work):
    """--sparse oracle computes only the neurons that fire: its perplexity equals dense (to
    float rounding) on the demo model stored with ffn_down_t (pi-quantize --down-t)."""
    demo_t = os.path.join(work, "demo-down-t.gguf")
    p = subprocess.run([os.path.join(bin_dir, "pi-quantize"), DEMO_MODEL, demo_t, "f16",
                        "--down-t"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        check(False, "pi-quantize --down-t failed: " + p.stderr.strip()[-200:])
        return
    args = ["-m", demo_t, "-f", DEMO_TEXT, "-c", "256", "--chunks", "6", "-t", "2"]
    dense = run_json(bin_dir, *args, "--sparse", "off")
    oracle = run_json(bin_dir, *args, "--sparse", "oracle")
    if dense is None or oracle is None:
        check(False, "demo --sparse off/oracle runs")
        return
    check(oracle["sparse"] == "oracle" and dense["sparse"] == "off", "sparse mode is reported")
    check(rel(oracle["ppl"], dense["ppl"]) < 1e-4,
          "demo (ffn_down_t): --sparse oracle PPL %.6f == dense %.6f (rel diff %.1e)"
          % (oracle["ppl"], dense["ppl"], rel(oracle["ppl"], dense["ppl"])))
    plain = run_json(bin_dir, "-f", DEMO_TEXT, "-c", "256", "--chunks", "6", "-t", "2")
    check(plain is not None and rel(dense["ppl"], plain["ppl"]) < 1e-4,
          "demo: ffn_down_t copy scores as the ffn_down original")
    # A model without ffn_down_t (a ReLU llama with the plain layout) runs dense and says so.
    plain_model = os.path.join(work, "relu-ffn-down.gguf")
    p = subprocess.run([os.path.join(bin_dir, "pi-synth"), "-o", plain_model, "--activation",
                        "relu", "--tokenizer", "bytes", "--n-ctx", "256"],
                       capture_output=True, text=True, timeout=300)
    rc, out, err = run(bin_dir, "-m", plain_model, "-f", DEMO_TEXT, "-c", "256", "--chunks", "1",
                       "--sparse", "oracle")
    check(p.returncode == 0 and rc == 0 and "runs dense" in err and "ffn_down_t" in err,
          "oracle on an ffn_down model: notes that it runs dense")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bin_dir = sys.argv[1]
    for exe in ("pi-perplexity", "pi-synth", "pi-quantize"):
        if not os.access(os.path.join(bin_dir, exe), os.X_OK):
            print(f"missing executable {os.path.join(bin_dir, exe)}")
            print("0 passed, 1 failed")
            return 1
    with tempfile.TemporaryDirectory(prefix="pi-check-ppl-") as work:
        synthetic_checks(bin_dir, work)
        sparse_checks(bin_dir, work)
    demo_checks(bin_dir)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""--sparse cats as a user meets it, on a small SiLU model (pi-synth, byte tokenizer):

- pi-profile writes the gate quantiles beside the model; the per-layer thresholds it
  prints for a target are the ones the run tools then take;
- calibrated on one part of a text, the share of FFN neurons skipped on another part (what
  pi-perplexity reports) is the target within 2 points, at 25, 40, 50 and 60 %; at 0 % the
  perplexity is dense's within rounding;
- the SiLU demo: 40 % skipped costs at most 3 % perplexity on 4 chunks, 60 % more;
- a ReLU model (the demo): a target below its own zeros skips just those; above them, the
  model-wide share is the target;
- pi-run's tokens with --sparse cats equal pi-dump-logits' greedy choice under the same
  thresholds (the reference check of those logits is check_forward.py's cats cases);
- through cpu workers, the hot/cold split in this process and in a gpu worker process (on
  gemma2 and phi3 files too), and
  pi-launch: the same tokens and the same neurons computed as in one process;
- --sparse teal on the SiLU demo: the inputs' entries and the neurons skipped on held-out text
  are the target within 2 points; through the split, the workers and the device path (the
  host backend, here and in a gpu worker) as cats; refused with statistics without input
  quantiles; below AVX-512 a note for Q4_0
  transposed copies (compare with cats), none for F16;
- pi-launch serving teal on the device path: the completion of one process;
- what cannot run is refused by name: no statistics (names pi-profile), statistics without
  gate quantiles, a model without ffn_down_t (names pi-quantize --down-t), a target outside
  [0, 1).

Usage: cats_test.py BIN_DIR
"""

import http.client
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import ROOT, check, demo_down_t, finish, launch_http  # noqa: E402

TEXT = os.path.join(ROOT, "models", "kjv-valid.txt")


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)


def last_line(p):
    lines = (p.stderr or p.stdout).strip().splitlines()
    return lines[-1] if lines else ""


def write_stats_subset(pigguf, r, path, suffixes):
    """The statistics file `r` (a GGUFReader) written again with only the tensors whose names
    end with one of `suffixes`: what an older pi-profile wrote."""
    w = pigguf.GGUFWriter(path, "pi-stats")
    md = r.metadata
    for key in ("pi.stats.version", "pi.stats.n_layer", "pi.stats.n_ff", "pi.stats.n_ctx"):
        w.add_u32(key, md[key])
    w.add_u64("pi.stats.n_tokens", md["pi.stats.n_tokens"])
    for key in ("pi.stats.model_name", "pi.stats.model_fingerprint", "pi.stats.shape_fingerprint",
                "pi.stats.weight_signs", "pi.stats.activation", "pi.stats.corpus"):
        w.add_string(key, md[key])
    for name, t in r.tensors.items():
        if name.endswith(suffixes):
            w.add_tensor_raw(name, t.ne, t.type_id, bytes(t.data))
    w.write()


def serve_completion(b, log_path, *args):
    """pi-launch with `args`: the greedy completion of "In the beginning" (16 tokens), the
    launch's log and its exit status once stopped."""
    p = launch_http(b, log_path, *args)
    body = b""
    if p.http:
        host, port = p.http.split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=120)
        c.request("POST", "/v1/completions", json.dumps(
            {"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}),
            {"Content-Type": "application/json"})
        body = c.getresponse().read()
    log = p.stderr()
    stopped = p.stop()
    text = json.loads(body)["choices"][0]["text"] if body.startswith(b"{") else None
    return text, log, stopped


def check_split_configurations(tool, model, label, budget="900K", every=True, mode="cats"):
    """pi-run --sparse cats in one process, through cpu workers, with the hot neurons in this
    process and in a gpu worker process, and on the device path (the GPU's whole layers, the
    host backend standing in for it) here and in a gpu worker process with a cpu worker: the
    same tokens and the same neurons computed (every=False: one process against the worker
    processes only)."""
    base = ["-m", model, "-p", "In the beginning", "-n", "16", "--temp", "0", "--sparse",
            mode, "--json", "-t", "2", "-c", "128"]
    runs = {}
    configurations = (("in process", []), ("cpu workers", ["--cpu-workers", "2"]),
                      ("hot neurons in this process", ["--vram-budget", budget,
                                                       "--ffn-backend", "host"]),
                      ("gpu and cpu worker processes", ["--vram-budget", budget,
                                                        "--ffn-backend", "host",
                                                        "--gpu-worker", "--cpu-workers",
                                                        "1"]),
                      ("the device path", ["--vram-budget", budget, "--host-device"]),
                      ("the device path in a gpu worker, a cpu worker",
                       ["--vram-budget", budget, "--host-device", "--gpu-worker",
                        "--cpu-workers", "1"]))
    if mode == "teal":  # the worker processes and the device path (the rest: cats_split_test)
        chosen = [configurations[i] for i in (0, 3, 4, 5)]
    else:
        chosen = configurations if every else [configurations[i] for i in (0, 3, 5)]
    for name, extra in chosen:
        p = run(tool("pi-run"), *base, *extra)
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        runs[name] = (r.get("generated_tokens"), r.get("ffn_active"), r.get("gpu_fired_share"))
        # Each layer's share, except on the device path (its hot neurons are counted
        # over its layers together).
        device = "--host-device" in extra
        check(p.returncode != 0 or (r.get("ffn_layer_active") is None) == device,
              f"{label}, {name}: per-layer shares {'absent' if device else 'reported'}")
        if name == "in process":
            check(p.returncode == 0, f"{label}: pi-run --sparse {mode} in process "
                                     f"({last_line(p)!r})")
            continue
        check(p.returncode == 0 and runs[name][:2] == runs["in process"][:2]
              and (0 < runs[name][2] < 1) == ("--vram-budget" in extra),
              f"{label}, {name}: the same tokens and neurons ({runs[name][1]}), hot share "
              f"{runs[name][2]} ({last_line(p)!r})")


def main():
    b = sys.argv[1]
    tool = lambda name: os.path.join(b, name)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        with open(TEXT, encoding="utf-8") as f:
            text = f.read()
        calib, held = os.path.join(tmp, "calib.txt"), os.path.join(tmp, "held.txt")
        with open(calib, "w", encoding="utf-8") as f:
            f.write(text[:40000])
        with open(held, "w", encoding="utf-8") as f:
            f.write(text[-30000:])
        model = os.path.join(tmp, "silu.gguf")
        p = run(tool("pi-synth"), "-o", model, "--n-layer", "4", "--n-embd", "128", "--n-ff",
                "512", "--type", "q8_0", "--down-t", "--tokenizer", "bytes", "--seed", "5")
        check(p.returncode == 0, "pi-synth: a SiLU model with ffn_down_t")

        # Before profiling: refused, naming the tool that makes the statistics.
        p = run(tool("pi-run"), "-m", model, "-p", "In", "-n", "2", "--sparse", "cats")
        check(p.returncode != 0 and "pi-profile -m" in p.stderr and "stats.gguf" in p.stderr,
              f"no statistics: refused, naming pi-profile ({last_line(p)!r})")

        p = run(tool("pi-profile"), "-m", model, "-f", calib, "-c", "256", "--max-tokens",
                "12000", "-t", "2", "--target-sparsity", "0.4")
        printed = re.search(r"--target-sparsity 0\.40: \|act\(gate\)\| thresholds per layer:(.*)",
                            p.stdout)
        check(p.returncode == 0 and printed and len(printed.group(1).split()) == 4
              and os.path.exists(os.path.join(tmp, "silu.stats.gguf")),
              "pi-profile writes the statistics and prints 4 layers' thresholds")

        # The achieved share on text it was not calibrated on, and the quality it costs.
        ppl = {}
        for target in (0.0, 0.25, 0.4, 0.5, 0.6):
            p = run(tool("pi-perplexity"), "-m", model, "-f", held, "-c", "128", "--chunks", "6",
                    "-t", "2", "--json", "--sparse", "cats", "--target-sparsity", target)
            r = json.loads(p.stdout) if p.returncode == 0 else {}
            got = r.get("ffn_sparsity", -1)
            layers = r.get("ffn_layer_sparsity", [])
            ppl[target] = r.get("ppl", float("nan"))
            check(p.returncode == 0 and abs(got - target) <= 0.02 and len(layers) == 4
                  and abs(sum(layers) / 4 - got) < 1e-5,
                  f"target {target:.0%}: {got:.1%} of the neurons skipped on held-out text "
                  f"(layers {', '.join(f'{x:.1%}' for x in layers)}), ppl {ppl[target]:.3f}")
            if target == 0.4:
                m = re.search(r"gate thresholds ([\d.e+-]+) to ([\d.e+-]+)", p.stderr)
                first = float(printed.group(1).split()[0]) if printed else -1
                check(m and 0.995 * float(m.group(1)) <= first <= 1.005 * float(m.group(2)),
                      "pi-perplexity takes pi-profile's thresholds for the target")
        p = run(tool("pi-perplexity"), "-m", model, "-f", held, "-c", "128", "--chunks", "6",
                "-t", "2", "--json", "--sparse", "off", "-b", "1")
        dense = json.loads(p.stdout)["ppl"] if p.returncode == 0 else float("nan")
        # (The sparse and dense kernels sum in other orders: 1.01e-4 apart on an AVX2-only
        # EPYC, 881.8170 against 881.9060; under 1e-4 on AVX-512 machines.)
        check(abs(ppl[0.0] - dense) <= 2e-4 * dense,
              f"0 %: the dense perplexity, one token at a time ({ppl[0.0]:.4f} against "
              f"{dense:.4f})")
        # (A random model's perplexity says nothing of quality: docs/sparsity.md measures it
        # on the trained demo.)
        check(abs(ppl[0.5] - dense) > 1e-3 * dense, "50 %: another perplexity than dense")

        # A trained SiLU model (the SiLU demo): 40 % skipped costs little (1.4 % on these 4
        # chunks, 0.2 % on the 8 of docs/sparse-execution.md), 60 % more.
        silu_demo = os.path.join(tmp, "silu-demo-t.gguf")
        p = run(tool("pi-quantize"), os.path.join(ROOT, "models", "demo-silu-kjv-f16.gguf"),
                silu_demo, "f16", "--down-t")
        q = run(tool("pi-profile"), "-m", silu_demo, "-f", calib, "--max-tokens", "8000", "-t", "2")
        check(p.returncode == 0 and q.returncode == 0, "the SiLU demo: --down-t, profiled")
        quality = {}
        for mode, target in (("off", 0.5), ("cats", 0.4), ("cats", 0.6)):
            p = run(tool("pi-perplexity"), "-m", silu_demo, "-f", held, "-c", "256", "--chunks",
                    "4", "-t", "2", "--json", "--sparse", mode, "--target-sparsity", target)
            r = json.loads(p.stdout) if p.returncode == 0 else {}
            quality[mode, target] = (r.get("ffn_sparsity", -1), r.get("ppl", float("nan")))
        (_, off), (s40, p40), (s60, p60) = quality.values()
        check(abs(s40 - 0.4) <= 0.02 and abs(s60 - 0.6) <= 0.02 and off <= p40 <= 1.03 * off
              and p60 > p40,
              f"the SiLU demo: 40 % ({s40:.1%}) ppl {p40:.3f}, 60 % ({s60:.1%}) ppl {p60:.3f}, "
              f"dense {off:.3f}")

        # --sparse teal on the SiLU demo (f16: its transposed copies are exact): the share of
        # the thresholded inputs' entries dropped and of the neurons skipped on held-out text,
        # and what it costs beside cats alone.
        p = run(tool("pi-perplexity"), "-m", silu_demo, "-f", held, "-c", "256", "--chunks",
                "4", "-t", "2", "--json", "--sparse", "teal", "--target-sparsity", "0.4")
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        ins, ffn, p_teal = r.get("input_sparsity", -1), r.get("ffn_sparsity", -1), r.get("ppl")
        check(p.returncode == 0 and abs(ins - 0.4) <= 0.02 and abs(ffn - 0.4) <= 0.02
              and p40 < p_teal <= 1.06 * off,
              f"--sparse teal 40 %: {ins:.1%} of the inputs' entries and {ffn:.1%} of the neurons "
              f"skipped, ppl {p_teal} (cats {p40:.3f}, dense {off:.3f}) ({last_line(p)!r})")
        # Through the split and the workers: the host computes every neuron's gate from the
        # thresholded input and the shards take their neurons' dots, so each configuration
        # computes the neurons and tokens of one process; on the device path the device
        # thresholds its own layers' inputs (a gpu worker making its own transposed copies).
        check_split_configurations(tool, silu_demo, "teal, the SiLU demo", budget="2M",
                                   mode="teal")
        # pi-launch serving teal on the device path (a gpu worker holding the layers, a cpu
        # worker the cold neurons): the completion one process generates.
        teal = ["--sparse", "teal", "-c", "128", "-t", "2", "--temp", "0"]
        p = run(tool("pi-run"), "-m", silu_demo, "-p", "In the beginning", "-n", "16", "--json",
                *teal)
        here = json.loads(p.stdout)["text"] if p.returncode == 0 else None
        text, log, stopped = serve_completion(b, os.path.join(tmp, "launch-teal.log"), "-m",
                                              silu_demo, *teal[:-2], "--vram-budget", "2M",
                                              "--host-device")
        check(here is not None and text == here and "gpu worker" in log and "cpu worker" in log
              and "--sparse teal: transposed copies" in log and stopped == 0,
              f"pi-launch --sparse teal on the device path: one process's completion ({text!r}, "
              f"{here!r})")
        # Below AVX-512 the tools say that Q4_0 copies run slowly and to compare with cats;
        # F16 copies (which stream at the memory's pace) get no such note.
        silu_q4 = os.path.join(tmp, "silu-demo-q4.gguf")
        p = run(tool("pi-quantize"), os.path.join(ROOT, "models", "demo-silu-kjv-f16.gguf"),
                silu_q4, "q4_0", "--down-t")
        notes = {}
        for copies in (silu_demo, silu_q4):
            q = subprocess.run(
                [tool("pi-run"), "-m", copies, "-p", "In", "-n", "2", "--sparse", "teal",
                 "--stats", silu_demo[:-len(".gguf")] + ".stats.gguf"],
                capture_output=True, text=True, timeout=300,
                env={**os.environ, "PI_CPU_ISA": "avx2"})
            notes[copies] = (q.returncode, "pi-bench --sparse cats,teal" in q.stderr)
        check(p.returncode == 0 and notes[silu_q4] == (0, True) and notes[silu_demo] == (0, False),
              f"--sparse teal below AVX-512: a note for Q4_0 copies, none for F16 ({notes})")

        # A ReLU model (the demo, ~91 % silent, its layers from 73 to 99 %): a target below
        # its own zeros skips just those (oracle's share); above them, the layers short of it
        # make it up, model-wide.
        demo = demo_down_t(b, tmp)
        p = run(tool("pi-profile"), "-m", demo, "-f", calib, "--max-tokens", "8000", "-t", "2")
        check(p.returncode == 0, "pi-profile: the demo")
        shares = {}
        for mode, target in (("oracle", 0.5), ("cats", 0.5), ("cats", 0.95)):
            p = run(tool("pi-perplexity"), "-m", demo, "-f", held, "-c", "256", "--chunks", "4",
                    "-t", "2", "--json", "--sparse", mode, "--target-sparsity", target)
            r = json.loads(p.stdout) if p.returncode == 0 else {}
            shares[(mode, target)] = (r.get("ffn_sparsity", -1), r.get("ppl", -1))
        (oracle, oracle_ppl), (low, low_ppl), (high, high_ppl) = shares.values()
        check(low == oracle and low_ppl == oracle_ppl,
              f"demo, target 50 %: its own zeros only, as oracle ({low:.1%}, ppl {low_ppl:.3f})")
        check(abs(high - 0.95) <= 0.02 and high_ppl > oracle_ppl,
              f"demo, target 95 %: {high:.1%} skipped on held-out text (ppl {high_ppl:.3f}, "
              f"oracle {oracle_ppl:.3f})")

        # pi-run's greedy tokens are those of the thresholded forward pass (-b 1: the prompt
        # too one token at a time, each step sparse, as pi-dump-logits' decode mode).
        p = run(tool("pi-run"), "-m", model, "-p", "In the beginning", "-n", "12", "--temp", "0",
                "--sparse", "cats", "--target-sparsity", "0.5", "--json", "-t", "2", "-b", "1")
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        ids = r.get("prompt_tokens", []) + r.get("generated_tokens", [])
        layers = r.get("ffn_layer_active") or []
        check(p.returncode == 0 and len(r.get("generated_tokens", [])) == 12
              and 0.45 <= 1 - r.get("ffn_active", 1) <= 0.55 and len(layers) == 4
              and abs(sum(layers) / 4 - r.get("ffn_active", 1)) < 1e-5,
              f"pi-run --sparse cats: 12 tokens, {1 - r.get('ffn_active', 1):.1%} skipped "
              f"(per layer: {', '.join(f'{1 - x:.1%}' for x in layers)})")
        if ids:
            out = os.path.join(tmp, "logits.f32")
            q = run(tool("pi-dump-logits"), "-m", model, "--tokens", ",".join(map(str, ids[:-1])),
                    "--out", out, "--sparse", "cats", "--target-sparsity", "0.5", "-t", "2")
            import numpy as np
            n_prompt = len(r["prompt_tokens"])
            logits = np.fromfile(out, dtype="<f4").reshape(len(ids) - 1, -1) if q.returncode == 0 \
                else np.zeros((len(ids) - 1, 1))
            greedy = [int(x) for x in logits[n_prompt - 1:].argmax(axis=1)]
            check(greedy == r["generated_tokens"],
                  "... the same tokens as pi-dump-logits' greedy choice under the thresholds")

        # Refusals, each naming what is missing.
        p = run(tool("pi-run"), "-m", model, "-p", "In", "-n", "2", "--sparse", "cats",
                "--target-sparsity", "1.5")
        check(p.returncode == 2 and "--target-sparsity" in p.stderr,
              f"--target-sparsity 1.5: refused ({last_line(p)!r})")
        # Through the split and the workers: the thresholds travel in their hellos, so every
        # configuration computes the same neurons (the logits: cats_split_test) — on gemma2's
        # post-norms and phi3's fused gate+up too.
        check_split_configurations(tool, model, "silu")
        for arch in ("gemma2", "phi3"):
            other = os.path.join(tmp, arch + ".gguf")
            p = run(tool("pi-synth"), "-o", other, "--arch", arch, "--n-layer", "2", "--n-embd",
                    "128", "--n-ff", "512", "--type", "q8_0", "--down-t", "--tokenizer", "bytes",
                    "--sliding-window", "8")
            q = run(tool("pi-profile"), "-m", other, "-f", calib, "-c", "128", "--max-tokens",
                    "3000", "-t", "2")
            check(p.returncode == 0 and q.returncode == 0, f"{arch}: written and profiled")
            check_split_configurations(tool, other, arch, "450K", every=False)
        text, log, stopped = serve_completion(b, os.path.join(tmp, "launch.log"), "-m", model,
                                              "--sparse", "cats", "-c", "128", "-t", "2",
                                              "--vram-budget", "900K", "--ffn-backend", "host")
        check(text is not None and "gpu worker" in log and "cpu worker" in log
              and "target sparsity 50%" in log and stopped == 0,
              f"pi-launch --sparse cats --vram-budget: a gpu and a cpu worker, served "
              f"({text!r})")
        dense_file = os.path.join(tmp, "dense.gguf")
        run(tool("pi-synth"), "-o", dense_file, "--n-layer", "2", "--tokenizer", "bytes")
        p = run(tool("pi-run"), "-m", dense_file, "-p", "In", "-n", "2", "--sparse", "cats")
        check(p.returncode != 0 and "ffn_down_t" in p.stderr and "--down-t" in p.stderr,
              f"no ffn_down_t: refused, naming pi-quantize --down-t ({last_line(p)!r})")
        # Statistics from before the gate quantiles (the fire counts alone).
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import pigguf
        r = pigguf.GGUFReader(os.path.join(tmp, "silu.stats.gguf"))
        old = os.path.join(tmp, "old.stats.gguf")
        write_stats_subset(pigguf, r, old, (".ffn_fire_count",))
        # ... and from before the input quantiles (--sparse teal's).
        no_inputs = os.path.join(tmp, "no-inputs.stats.gguf")
        write_stats_subset(pigguf, r, no_inputs, (".ffn_fire_count", ".ffn_gate_quantiles"))
        p = run(tool("pi-run"), "-m", model, "-p", "In", "-n", "2", "--sparse", "teal",
                "--stats", no_inputs)
        check(p.returncode != 0 and "no attention input quantiles" in p.stderr
              and "pi-profile" in p.stderr,
              f"statistics without input quantiles: --sparse teal refused ({last_line(p)!r})")
        p = run(tool("pi-run"), "-m", model, "-p", "In", "-n", "2", "--sparse", "cats",
                "--stats", old)
        check(p.returncode != 0 and "no gate quantiles" in p.stderr and "pi-profile" in p.stderr,
              f"statistics without gate quantiles: refused ({last_line(p)!r})")
    finish()


if __name__ == "__main__":
    main()

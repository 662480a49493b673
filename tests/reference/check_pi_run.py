#!/usr/bin/env python3
"""pi-run end to end on the bundled demo model, checked with independent tools.
- Greedy output equals the numpy forward pass's (tests/reference/llama_ref.py, f16 KV
  cache like pi-run's default): the same tokens every run, for -t 1 and -t 2, and the
  committed tests/data/demo_greedy.json, which is written from the numpy reference
  (--update, after retraining the demo model), never from the code under test.
- Seeded sampling with pi-run's defaults (top-k 40, top-p 0.95, min-p 0.05, temp 0.8) and
  a repetition penalty gives the tokens of an independent sampler (sampler_ref.py: its own
  MT19937, llama.cpp's order) over the numpy reference's logits.
- The --json fields agree with each other and with python3-sentencepiece: prompt_tokens is
  BOS + sentencepiece's encoding of the prompt, the text decodes from the ids, the counts
  match the timings, and stop_reason says why generation ended (length, context, stop
  with --stop).
- Bad input exits 1 (bad input) or 2 (bad flag) with a message naming the problem: a
  missing model, a prompt longer than the context, an unsupported architecture, a
  truncated model, a malformed flag. A crash (a signal) is a failure, not an error exit.
Usage: check_pi_run.py BIN_DIR [--update]
Prints "N passed, M failed" last; exit status 1 on any failure.
"""

import json
import pty
import termios
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))

sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import pigguf  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402
from sampler_ref import Mt19937, sample  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
TOKENIZER = os.path.join(ROOT, "models", "demo-tokenizer.model")
GOLDEN = os.path.join(ROOT, "tests", "data", "demo_greedy.json")
PROMPT = "In the beginning God created"
N_GEN = 32

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")


def run(bin_dir, *args):
    # The references are dense forwards: a run is dense unless its case names a --sparse
    # mode (pi-run's default, auto, takes the demo file's predictors: auto_cases checks it).
    if "--sparse" not in args and "--version" not in args:
        args = (*args, "--sparse", "off")
    p = subprocess.run([os.path.join(bin_dir, "pi-run"), *args], capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def run_json(bin_dir, *args):
    rc, out, err = run(bin_dir, "--json", *args)
    if rc != 0:
        print(err)
        return None
    return json.loads(out)


def auto_cases(bin_dir, tmp, greedy):
    """--sparse auto, pi-run's default: the mode the file allows, said at start — predictor
    for the demo (ffn_down_t and predictors), oracle for a ReLU file with ffn_down_t and no
    predictors, off for the plain layout, each with its reason."""
    def synth(name, *flags):
        path = os.path.join(tmp, name)
        p = subprocess.run([os.path.join(bin_dir, "pi-synth"), "-o", path, "--activation", "relu",
                            "--tokenizer", "bytes", "--n-ctx", "256", *flags],
                           capture_output=True, text=True, timeout=300)
        return path if p.returncode == 0 else None
    for model, mode, why in ((MODEL, "predictor", "trained predictors"),
                             (synth("relu-down-t.gguf", "--down-t"), "oracle", "no predictors"),
                             (synth("relu-plain.gguf"), "off", "no ffn_down_t")):
        args = ("-m", model) if model else ()
        default = run_json(bin_dir, *args, *greedy, "--sparse", "auto") if model else None
        p = subprocess.run([os.path.join(bin_dir, "pi-run"), *args, *greedy], capture_output=True,
                           text=True, timeout=300) if model else None
        said = [line for line in (p.stderr if p else "").splitlines() if "--sparse auto" in line]
        check(default is not None and default["sparse"] == mode and p.returncode == 0
              and len(said) == 1 and f"auto: {mode}" in said[0] and why in said[0],
              f"--sparse auto (the default) on {os.path.basename(model or '?')}: {mode}, said "
              f"at start ({said})")
    d = run_json(bin_dir, *greedy, "--sparse", "auto")
    check(d is not None and 0 < d["ffn_active"] < 0.2,
          f"the demo's default run computes a fraction of its FFN neurons "
          f"({d and d['ffn_active']})")


def reference_tokens(ref, prompt_ids, n, eos, sampling):
    """n tokens continuing prompt_ids with the numpy reference's logits: greedy (argmax,
    lowest id on a tie) when sampling is None, else sampler_ref.sample with
    (rng, params, repeat_last_n). Stops before eos when eos is not None."""
    tokens, out = list(prompt_ids), []
    for _ in range(n):
        logits = ref.forward(tokens)[-1]
        if sampling is None:
            t = int(np.argmax(logits))
        else:
            rng, params, last_n = sampling
            t = sample(logits, tokens[-last_n:], rng, **params)
        if eos is not None and t == eos:
            break
        out.append(t)
        tokens.append(t)
    return out


def interactive(bin_dir, args, lines):
    """pi-run's stdout in a pseudo-terminal (echo off) given `lines` then end of input."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # lflag: the terminal does not echo the lines
    attrs[1] &= ~termios.OPOST  # oflag: no \r added to \n
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    p = subprocess.Popen([os.path.join(bin_dir, "pi-run"), *args], stdin=slave, stdout=slave,
                         stderr=subprocess.DEVNULL)
    os.close(slave)
    os.write(master, ("".join(line + "\n" for line in lines)).encode() + b"\x04")
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    os.close(master)
    return out.decode("utf-8", "replace")


def reference_shifted(ref, prompt_ids, n, n_ctx, keep):
    """Greedy tokens with llama-cli's context shift as pi-run --keep does it: when the
    context holds n_ctx tokens, BOS and `keep` prompt tokens stay, half of the rest goes, and
    the model sees the kept tokens at positions 0.. again."""
    context, out = list(prompt_ids), []
    for _ in range(n):
        t = int(np.argmax(ref.forward(context)[-1]))
        out.append(t)
        if len(context) >= n_ctx:
            k = min(len(prompt_ids), 1 + keep, len(context) - 2)
            discard = (len(context) - k) // 2
            context = context[:k] + context[k + discard:]
        context.append(t)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bin_dir = sys.argv[1]
    update = "--update" in sys.argv[2:]
    sp = spm.SentencePieceProcessor(model_file=TOKENIZER)

    greedy = ["-p", PROMPT, "-n", str(N_GEN), "--temp", "0"]
    a = run_json(bin_dir, *greedy, "-t", "1")
    b = run_json(bin_dir, *greedy, "-t", "1")
    c = run_json(bin_dir, *greedy, "-t", "2")
    check(a is not None and b is not None and c is not None, "greedy runs succeed")
    if a is None or b is None or c is None:
        print(f"{passed} passed, {failed + 1} failed")
        return 1
    check(a["generated_tokens"] == b["generated_tokens"], "greedy: same tokens twice")
    check(a["generated_tokens"] == c["generated_tokens"], "greedy: same tokens for -t 1 and -t 2")

    # llama-cli's flags: -f - reads stdin; --no-mmap and --mlock change nothing in the
    # answer; -ngl is accepted with a note; --version says what it is.
    p = subprocess.run([os.path.join(bin_dir, "pi-run"), "--json", "-f", "-",
                        *greedy[2:], "-t", "1", "--sparse", "off"], input=PROMPT, capture_output=True, text=True,
                       timeout=300)
    check(p.returncode == 0 and json.loads(p.stdout)["generated_tokens"] == a["generated_tokens"],
          "-f - reads the prompt from standard input")
    d = run_json(bin_dir, *greedy, "-t", "1", "--no-mmap", "--mlock")
    check(d is not None and d["generated_tokens"] == a["generated_tokens"],
          "--no-mmap --mlock: the same tokens")
    rc, out, err = run(bin_dir, *greedy, "-ngl", "99")
    check(rc == 0 and "--vram-budget" in err and "ignored" in err,
          "-ngl 99 is accepted with a note pointing at --vram-budget")
    rc, out, err = run(bin_dir, "--version")
    check(rc == 0 and out.startswith("pi-run (pi) ") and "commit " in out, f"--version ({out!r})")

    # The numpy reference's greedy continuation: the golden sequence comes from it.
    ref = LlamaRef(MODEL, "f16", "f16")
    expect_prompt = [sp.bos_id()] + sp.encode(PROMPT)
    ref_greedy = reference_tokens(ref, expect_prompt, N_GEN, sp.eos_id(), None)
    if update:
        with open(GOLDEN, "w") as f:
            json.dump({"prompt": PROMPT, "n_predict": N_GEN, "generated_tokens": ref_greedy,
                       "text": sp.decode(expect_prompt[1:] + ref_greedy)[len(PROMPT):],
                       "source": "tests/reference/llama_ref.py (numpy), f16 KV cache"}, f,
                      indent=1)
            f.write("\n")
        print(f"wrote {GOLDEN} from the numpy reference")
    with open(GOLDEN) as f:
        golden = json.load(f)
    check(golden["prompt"] == PROMPT and ref_greedy == golden["generated_tokens"],
          "greedy: the numpy reference still generates the golden sequence")
    check(a["generated_tokens"] == golden["generated_tokens"],
          f"greedy: pi-run generates the golden sequence ({golden['text']!r})")
    check(a["stop_reason"] == "length", "greedy: stop_reason length after -n tokens")

    # The JSON fields against sentencepiece and each other.
    check(a["prompt_tokens"] == expect_prompt, "prompt_tokens == BOS + sentencepiece(prompt)")
    gen = a["generated_tokens"]
    check(len(gen) == N_GEN or (len(gen) < N_GEN and sp.eos_id() not in gen),
          "generated count is -n (or stopped at end of text)")
    check(sp.eos_id() not in gen, "no end-of-text token in the output")
    # sentencepiece decodes the whole sequence, dropping only the dummy prefix space.
    check(sp.decode(expect_prompt[1:] + gen) == PROMPT + a["text"],
          "prompt + text == sentencepiece.decode(prompt ids + generated ids)")
    t = a["timings"]
    check(t["prompt_n"] == len(a["prompt_tokens"]), "timings.prompt_n == len(prompt_tokens)")
    check(t["predicted_n"] == len(gen), "timings.predicted_n == len(generated_tokens)")
    check(t["eval_n"] == max(0, len(gen) - 1), "timings.eval_n == generated - 1")
    check(t["prompt_ms"] > 0 and t["predicted_ms"] >= 0 and t["load_ms"] > 0,
          "timings are positive")
    check(a["prompt"] == PROMPT, "prompt echoed")

    # Plain (non-JSON) output streams prompt + the same text.
    rc, out, err = run(bin_dir, *greedy)
    check(rc == 0 and out == PROMPT + a["text"] + "\n", "text mode prints prompt + text")
    check("prompt eval time" in err and "eval time" in err and "load time" in err,
          "llama.cpp-style timings on stderr")

    # Seeded sampling with pi-run's default filters and a repetition penalty, against the
    # independent sampler over the numpy logits.
    params = dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1)
    for seed in (42, 1234):
        got = run_json(bin_dir, "-p", PROMPT, "-n", "24", "--seed", str(seed),
                       "--repeat-penalty", "1.1", "--repeat-last-n", "64", "--ignore-eos")
        want = reference_tokens(ref, expect_prompt, 24, None, (Mt19937(seed), params, 64))
        check(got is not None and got["generated_tokens"] == want,
              f"seed {seed}: sampled tokens equal the reference sampler's "
              f"({got['generated_tokens'][:8] if got else None}... vs {want[:8]}...)")

    # OpenAI's penalties and a logit bias (--frequency-penalty, --presence-penalty,
    # --logit-bias), greedy and seeded, against the same reference.
    bias_id = expect_prompt[-1]
    for seed, temp in ((None, 0.0), (7, 0.8)):
        params = dict(temp=temp, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                      frequency_penalty=0.7, presence_penalty=0.4, logit_bias={bias_id: 1.5})
        args = ["-p", PROMPT, "-n", "24", "--ignore-eos", "--repeat-last-n", "64",
                "--frequency-penalty", "0.7", "--presence-penalty", "0.4",
                "--logit-bias", f"{bias_id}+1.5", "--temp", str(temp)]
        got = run_json(bin_dir, *args, *(["--seed", str(seed)] if seed is not None else []))
        want = reference_tokens(ref, expect_prompt, 24, None,
                                (Mt19937(seed if seed is not None else 0), params, 64))
        check(got is not None and got["generated_tokens"] == want,
              f"penalties and a logit bias at temp {temp}: the reference sampler's tokens "
              f"({got['generated_tokens'][:8] if got else None}... vs {want[:8]}...)")

    # Why generation stopped.
    st = run_json(bin_dir, "-p", PROMPT, "-n", "200", "-c", "16", "--temp", "0", "--ignore-eos",
                  "--no-context-shift")
    check(st is not None and st["stop_reason"] == "context"
          and len(st["prompt_tokens"]) + len(st["generated_tokens"]) == 16 + 1,
          "stop_reason context when the context fills (16 evaluated, one more sampled)")
    # Context shift (the default): past -c, with --keep, the tokens the numpy reference
    # gives under the same shift.
    for keep in (0, 2):
        st = run_json(bin_dir, "-p", PROMPT, "-n", "30", "-c", "16", "--temp", "0", "--ignore-eos",
                      "--keep", str(keep), "-ctk", "f32", "-ctv", "f32")
        want = reference_shifted(LlamaRef(MODEL, "f32", "f32"), expect_prompt, 30, 16, keep)
        check(st is not None and st["generated_tokens"] == want and st["stop_reason"] == "length",
              f"--keep {keep}: 30 tokens past -c 16, as the reference shifts "
              f"({st['generated_tokens'][:12] if st else None} vs {want[:12]})")
    # Interactive mode through a pseudo-terminal: two turns of the user's, the model's
    # turns ending at "." or 24 tokens, each as the numpy reference continues the tokens.
    lines = ["And the earth was without form", "Let there be light"]
    got = interactive(bin_dir, ["-p", PROMPT, "-i", "-r", ".", "-n", "24", "--temp", "0",
                                "--in-prefix", "[", "--in-suffix", "]", "--sparse", "off"], lines)
    ref16 = LlamaRef(MODEL, "f16", "f16")
    tokens = list(expect_prompt)
    want = PROMPT
    for turn in range(3):
        start = sp.decode(tokens[1:])
        for _ in range(24):
            t = int(np.argmax(ref16.forward(tokens)[-1]))
            if t == sp.eos_id():
                break
            tokens.append(t)
            if sp.decode(tokens[1:]).endswith("."):
                break
        want += sp.decode(tokens[1:])[len(start):] + "["
        if turn < 2:
            want += "]"
            tokens += sp.encode("[" + lines[turn] + "\n" + "]")
    want += "\n"
    check(got == want, f"-i: two turns in a terminal as the reference continues them "
                       f"({got[-80:]!r} vs {want[-80:]!r})")
    words = golden["text"].split()
    stop_word = words[1] if len(words) > 1 else "the"
    st = run_json(bin_dir, *greedy, "--stop", stop_word)
    check(st is not None and st["stop_reason"] == "stop" and stop_word not in st["text"]
          and golden["text"].startswith(st["text"]),
          f"stop_reason stop at --stop {stop_word!r}, the text cut before it "
          f"({st['text'] if st else None!r})")

    # Sampling: a seed reproduces, another seed differs.
    s1 = run_json(bin_dir, "-p", PROMPT, "-n", "24", "--temp", "1.0", "--seed", "42")
    s2 = run_json(bin_dir, "-p", PROMPT, "-n", "24", "--temp", "1.0", "--seed", "42")
    s3 = run_json(bin_dir, "-p", PROMPT, "-n", "24", "--temp", "1.0", "--seed", "7")
    check(s1 is not None and s1 == {**s2, "timings": s1["timings"]} and s1["seed"] == 42,
          "sampling: same seed, same tokens")
    check(s3 is not None and s3["generated_tokens"] != s1["generated_tokens"],
          "sampling: another seed, other tokens")

    # Sparse execution: on the demo model stored with ffn_down_t, --sparse oracle (up and down
    # only for the neurons that fire) gives the same greedy tokens as dense.
    with tempfile.TemporaryDirectory() as tmp:
        demo_t = os.path.join(tmp, "demo-down-t.gguf")
        p = subprocess.run([os.path.join(bin_dir, "pi-quantize"), MODEL, demo_t, "f16",
                            "--down-t"], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "pi-quantize --down-t")
        d = run_json(bin_dir, "-m", demo_t, *greedy, "--sparse", "off")
        o = run_json(bin_dir, "-m", demo_t, *greedy, "--sparse", "oracle")
        check(d is not None and o is not None and d["generated_tokens"] == o["generated_tokens"]
              and o["sparse"] == "oracle", "greedy: --sparse oracle == dense (ffn_down_t copy)")
        check(d is not None and d["generated_tokens"] == golden["generated_tokens"],
              "greedy: the ffn_down_t copy generates the golden sequence")
        # The cold neurons in pi-cpu-worker processes over shared memory.
        for n in (1, 2):
            rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--json", "--sparse", "oracle",
                               "--cpu-workers", str(n))
            w = json.loads(out) if rc == 0 else None
            check(w is not None and w["generated_tokens"] == golden["generated_tokens"]
                  and err.count("cpu backend") == n and "lost" not in err,
                  f"greedy: --cpu-workers {n} (shared memory) generates the golden sequence")

        # The hot/cold split from a placement: profile, then --vram-budget.
        p = subprocess.run([os.path.join(bin_dir, "pi-profile"), "-m", demo_t, "-f",
                            os.path.join(ROOT, "models", "kjv-valid.txt"), "--max-tokens", "2048"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "pi-profile of the ffn_down_t copy")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--json", "--vram-budget", "8M")
        sp_ = json.loads(out) if rc == 0 else None
        check(sp_ is not None and d is not None
              and sp_["generated_tokens"] == d["generated_tokens"]
              and "FFN split" in err and ("'host' backend" in err or "'cuda' backend" in err) and "plan" in err,
              "--vram-budget 8M: hot/cold split on the host backend, same greedy tokens")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--json", "--vram-budget", "8M",
                           "--cpu-workers", "2")
        w = json.loads(out) if rc == 0 else None
        check(w is not None and w["generated_tokens"] == golden["generated_tokens"]
              and err.count("cpu backend") == 2,
              "greedy: hot neurons on the host backend, cold ones in 2 cpu workers")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M")
        check(rc == 0 and "reused" in err, "the cached plan is reused for the same budget")
        # The header and --json say the sparse mode, the hot backend and the decode FFN.
        j = run_json(bin_dir, "-m", demo_t, *greedy, "--sparse", "oracle", "--vram-budget", "8M",
                     "--ffn-backend", "host")
        check(j is not None and j["sparse"] == "oracle" and j["hot_backend"] == "host"
              and 0 < j["ffn_active"] < 0.5 and 0 < j["gpu_fired_share"] <= 1,
              f"--json: sparse mode, hot backend, FFN active and the hot share "
              f"({ {k: j.get(k) for k in ('hot_backend', 'ffn_active', 'gpu_fired_share')} if j else None})")
        j = run_json(bin_dir, "-m", demo_t, *greedy, "--sparse", "off")
        check(j is not None and j["hot_backend"] == "none" and j["ffn_active"] == 1,
              "--json --sparse off without a split: every neuron computed, no hot backend")
        auto_cases(bin_dir, tmp, greedy)
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M",
                           "--reset-gpu-index")
        check(rc == 0 and "written" in err, "--reset-gpu-index recomputes the plan")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M",
                           "--disable-gpu-index")
        check(rc == 0 and "no FFN split" in err, "--disable-gpu-index runs every neuron on the CPU")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "1M")
        check(rc == 0 and "holds the dense blocks of" in err and "no FFN neuron" in err,
              "a budget below the dense blocks offloads what fits and says so (as the original)")
        rc, out, err = run(bin_dir, *greedy, "--vram-budget", "8M", "--stats", "/nonexistent.gguf")
        check(rc != 0 and "pi-profile" in err, "missing statistics: the error says how to make them")

    # Errors.
    rc, out, err = run(bin_dir, "-m", "/nonexistent/model.gguf", "-p", "x")
    check(rc == 1 and "/nonexistent/model.gguf" in err, "missing model: exit 1, error names the file")
    rc, out, err = run(bin_dir, "-p", PROMPT * 20, "-c", "16", "-n", "4")
    check(rc == 1 and "longer than the context" in err, "prompt longer than the context: exit 1")
    rc, out, err = run(bin_dir, "-n", "abc")
    check(rc == 2 and "-n expects an integer" in err, "malformed flag value: exit 2")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gptneox.gguf")
        w = pigguf.GGUFWriter(path, "gptneox")
        w.add_u32("gptneox.block_count", 1)
        w.write()
        rc, out, err = run(bin_dir, "-m", path, "-p", "x")
        check(rc == 1 and "unsupported architecture 'gptneox'" in err,
              "unsupported architecture is named, exit 1")
        trunc = os.path.join(tmp, "truncated.gguf")
        with open(MODEL, "rb") as f:
            data = f.read(1 << 20)
        with open(trunc, "wb") as f:
            f.write(data)
        rc, out, err = run(bin_dir, "-m", trunc, "-p", "x")
        last = err.strip().splitlines()[-1][:160] if err.strip() else "(no message)"
        check(rc == 1 and ("pi-run: " + trunc) in err and "out of file bounds" in err,
              f"truncated model: exit 1 (got {rc}), the file named: {last}")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

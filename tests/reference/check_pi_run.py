#!/usr/bin/env python3
"""pi-run end to end on the bundled demo model, checked with independent tools.

- Greedy output is stable: the same tokens every run, for -t 1 and -t 2, and equal to the
  committed golden sequence (tests/data/demo_greedy.json; regenerate it with --update after
  retraining the demo model).
- The --json fields agree with each other and with python3-sentencepiece: prompt_tokens is
  BOS + sentencepiece's encoding of the prompt, the text decodes from the ids, the counts
  match the timings.
- Sampling with a fixed seed is reproducible.
- Bad input gets a clear error and a non-zero exit: a missing model, a prompt longer than
  the context, an unsupported architecture, a malformed flag.

Usage: check_pi_run.py BIN_DIR [--update]
Prints "N passed, M failed" last; exit status 1 on any failure.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import sentencepiece as spm  # noqa: E402

import pigguf  # noqa: E402

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
    p = subprocess.run([os.path.join(bin_dir, "pi-run"), *args], capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def run_json(bin_dir, *args):
    rc, out, err = run(bin_dir, "--json", *args)
    if rc != 0:
        print(err)
        return None
    return json.loads(out)


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

    if update:
        with open(GOLDEN, "w") as f:
            json.dump({"prompt": PROMPT, "n_predict": N_GEN,
                       "generated_tokens": a["generated_tokens"], "text": a["text"]}, f,
                      indent=1)
            f.write("\n")
        print(f"wrote {GOLDEN}")
    with open(GOLDEN) as f:
        golden = json.load(f)
    check(golden["prompt"] == PROMPT and a["generated_tokens"] == golden["generated_tokens"],
          f"greedy: matches the golden sequence ({golden['text']!r})")

    # The JSON fields against sentencepiece and each other.
    expect_prompt = [sp.bos_id()] + sp.encode(PROMPT)
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
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M")
        check(rc == 0 and "reused" in err, "the cached plan is reused for the same budget")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M",
                           "--reset-gpu-index")
        check(rc == 0 and "written" in err, "--reset-gpu-index recomputes the plan")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "8M",
                           "--disable-gpu-index")
        check(rc == 0 and "no FFN split" in err, "--disable-gpu-index runs every neuron on the CPU")
        rc, out, err = run(bin_dir, "-m", demo_t, *greedy, "--vram-budget", "1M")
        check(rc != 0 and "too small for the dense blocks" in err,
              "a budget below the dense blocks is a clear error")
        rc, out, err = run(bin_dir, *greedy, "--vram-budget", "8M", "--stats", "/nonexistent.gguf")
        check(rc != 0 and "pi-profile" in err, "missing statistics: the error says how to make them")

    # Errors.
    rc, out, err = run(bin_dir, "-m", "/nonexistent/model.gguf", "-p", "x")
    check(rc != 0 and "/nonexistent/model.gguf" in err, "missing model: error names the file")
    rc, out, err = run(bin_dir, "-p", PROMPT * 20, "-c", "16", "-n", "4")
    check(rc != 0 and "longer than the context" in err, "prompt longer than the context")
    rc, out, err = run(bin_dir, "-n", "abc")
    check(rc != 0 and "-n expects an integer" in err, "malformed flag value")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gptneox.gguf")
        w = pigguf.GGUFWriter(path, "gptneox")
        w.add_u32("gptneox.block_count", 1)
        w.write()
        rc, out, err = run(bin_dir, "-m", path, "-p", "x")
        check(rc != 0 and "unsupported architecture 'gptneox'" in err,
              "unsupported architecture is named")
        trunc = os.path.join(tmp, "truncated.gguf")
        with open(MODEL, "rb") as f:
            data = f.read(1 << 20)
        with open(trunc, "wb") as f:
            f.write(data)
        rc, out, err = run(bin_dir, "-m", trunc, "-p", "x")
        check(rc != 0 and "pi-run:" in err and "Traceback" not in err,
              "truncated model: clean error, " + err.strip().splitlines()[-1][:100])

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every tool, run with bad arguments and inputs, must fail cleanly.

A table of a few hundred cases: missing values, unknown flags, negative,
zero, huge and non-finite numbers, empty, huge, binary and invalid UTF-8
prompts, directories, FIFOs, /dev/zero, unwritable and special output paths,
files from another model, truncated models, stats and plans. Each runs under
a memory limit and a time limit, and must:
  - end by exiting, not by a signal (no crash, no abort, no OOM kill);
  - end within the time limit (a FIFO or a huge value must not hang it);
  - exit with the status the case expects (2 for a bad flag, 1 for bad input,
    0 where the input is unusual but valid);
  - print a message that says what was wrong (the case's substring), never a
    sanitizer report or an uncaught exception;
  - leave no file behind in its scratch folder (only the outputs a success
    was asked for).

    tests/bad_input_matrix.py BIN_DIR [--sanitized]

--sanitized (the ASan/UBSan build): the memory limit comes from ASan's
hard_rss_limit_mb instead of an address-space rlimit, which ASan's shadow
memory cannot live under.
"""
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
CORPUS = os.path.join(ROOT, "models", "kjv-valid.txt")
MEMORY_LIMIT = 4 << 30  # bytes: far above what any case needs when it behaves
TIME_LIMIT = 60  # seconds per case (sanitized builds are several times slower)
BAD_SIGNS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "terminate called",
             "Segmentation fault", "core dumped", "Aborted", "Bus error")


class Case:
    def __init__(self, tool, args, rc, message, stdin=None, outputs=()):
        self.tool, self.args, self.rc, self.message = tool, list(args), rc, message
        self.stdin, self.outputs = stdin, set(outputs)

    def name(self):
        shown = " ".join(a if len(a) < 40 else a[:37] + "..." for a in self.args)
        return f"{self.tool} {shown}"


def usage(tool, args, message):
    """A bad flag or value: exit 2 and a message naming it."""
    return Case(tool, args, 2, message)


def bad_input(tool, args, message):
    """Input that cannot be used: exit 1 and a message saying why."""
    return Case(tool, args, 1, message)


def make_scratch(bin_dir, tmp):
    """The files the cases read: bad ones made here, good ones from the demo."""
    p = lambda name: os.path.join(tmp, name)
    os.mkfifo(p("fifo"))
    os.mkdir(p("dir"))
    os.mkdir(p("readonly"))
    with open(p("empty.txt"), "w"):
        pass
    with open(p("empty.gguf"), "w"):
        pass
    with open(p("text.gguf"), "w") as f:
        f.write("this is not a model\n" * 100)
    with open(p("binary.txt"), "wb") as f:
        f.write(bytes(range(256)))
    with open(p("invalid_utf8.txt"), "wb") as f:
        f.write(b"In the \xff\xfe beginning \xc3\x28 \xe2\x82 God\x00created")
    with open(p("huge_prompt.txt"), "w") as f:
        f.write("And God said, Let there be light: and there was light. " * 4000)
    with open(p("token.txt"), "w") as f:
        f.write("a-token-of-enough-length\n")
    with open(p("short_token.txt"), "w") as f:
        f.write("short\n")
    with open(p("short.txt"), "w") as f:
        f.write("In the beginning God created the heaven and the earth.\n")
    with open(p("bad_lines.jsonl"), "w") as f:
        f.write('"fine"\n{not json\n')
    with open(p("bad_ids.jsonl"), "w") as f:
        f.write("[1, 2, 99999999]\n")
    with open(p("negative_ids.jsonl"), "w") as f:
        f.write("[1, -5]\n")
    with open(p("not_array.jsonl"), "w") as f:
        f.write('{"ids": [1]}\n')
    shutil.copy(DEMO, p("demo.gguf"))
    shutil.copy(DEMO, p("copy.gguf"))
    data = open(DEMO, "rb").read()
    with open(p("truncated.gguf"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(p("header_only.gguf"), "wb") as f:
        f.write(data[:24])
    # NaNs (f16 0x7e00) in the last 32 elements of the demo's f16 output.weight.
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import pigguf
    demo = pigguf.GGUFReader(DEMO)
    out = demo.tensors["output.weight"]
    end = demo.data_offset + out.offset + out.nbytes
    with open(p("nan.gguf"), "wb") as f:
        f.write(data[:end - 64] + b"\x00\x7e" * 32 + data[end:])
    # Statistics and a plan of the demo model, then truncated copies and a
    # model whose shapes differ ("another model").
    run = lambda *a: subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    check=True, timeout=300)
    run(os.path.join(bin_dir, "pi-profile"), "-m", p("demo.gguf"), "-f", CORPUS,
        "--max-tokens", "256", "-t", "1")
    run(os.path.join(bin_dir, "pi-place"), "-m", p("demo.gguf"), "--vram-budget", "64M",
        "-o", p("demo.plan.gguf"))
    run(os.path.join(bin_dir, "pi-synth"), "-o", p("other.gguf"), "--n-embd", "64",
        "--n-layer", "1", "--n-head", "2", "--n-ff", "128", "--tokenizer", "bytes")
    # A ReLU model in the plain layout (ffn_down, no predictors): the demo is sparse-ready.
    run(os.path.join(bin_dir, "pi-synth"), "-o", p("plain.gguf"), "--n-embd", "64",
        "--n-layer", "1", "--n-head", "2", "--n-ff", "128", "--tokenizer", "bytes",
        "--activation", "relu", "--n-ctx", "256")
    for name in ("demo.stats.gguf", "demo.plan.gguf"):
        blob = open(p(name), "rb").read()
        with open(p("truncated." + name.split(".")[1] + ".gguf"), "wb") as f:
            f.write(blob[: len(blob) * 2 // 3])
    # Truncated copies where the tools look for a cached plan and an index.
    shutil.copy(p("demo.gguf"), p("planned.gguf"))
    shutil.copy(p("demo.stats.gguf"), p("planned.stats.gguf"))
    shutil.copy(p("truncated.plan.gguf"), p("planned.plan-64M-c256-f16-f16-g1.gguf"))
    shutil.copy(p("truncated.plan.gguf"), p("replan.gguf"))
    with open(p("regpuidx"), "wb") as f:
        f.write(b"GGUF\x03\x00\x00\x00\x0c")
    os.chmod(p("readonly"), stat.S_IRUSR | stat.S_IXUSR)
    return sorted(os.listdir(tmp))


def model_cases(tool, flag, extra):
    """A model path that is no model."""
    return [
        bad_input(tool, [flag, "missing.gguf"] + extra, "missing.gguf"),
        bad_input(tool, [flag, "dir"] + extra, "not a regular file"),
        bad_input(tool, [flag, "fifo"] + extra, "not a regular file"),
        bad_input(tool, [flag, "/dev/zero"] + extra, "not a regular file"),
        bad_input(tool, [flag, "empty.gguf"] + extra, "empty.gguf"),
        bad_input(tool, [flag, "text.gguf"] + extra, "text.gguf"),
        bad_input(tool, [flag, "header_only.gguf"] + extra, "header_only.gguf"),
        bad_input(tool, [flag, "truncated.gguf"] + extra, "truncated.gguf"),
        bad_input(tool, [flag, "demo.stats.gguf"] + extra, "demo.stats.gguf"),
    ]


def int_cases(tool, flag, extra, bad, message=None):
    """Values an integer flag must refuse: ones no integer flag takes (the
    message names the flag), then this flag's own `bad` values (`message`)."""
    values = ["abc", "1.5", "", "99999999999999999999", "0x10", "1e3"]
    return ([usage(tool, extra + [flag, v], flag) for v in values] +
            [usage(tool, extra + [flag, v], message or flag) for v in bad])


def float_cases(tool, flag, extra, bad, message=None):
    values = ["abc", "nan", "inf", "-inf", "", "1e99"]
    return ([usage(tool, extra + [flag, v], flag) for v in values] +
            [usage(tool, extra + [flag, v], message or flag) for v in bad])


def common_cases(tool, extra):
    return [
        usage(tool, extra + ["--no-such-flag"], "unknown flag '--no-such-flag'"),
        usage(tool, extra + ["-z"], "unknown flag '-z'"),
    ]


def out_path_cases(tool, flag, extra, rc=1):
    """Special and unwritable outputs: refused, nothing replaced. (A read-only
    folder only refuses writers that are not root.)"""
    cases = [
        Case(tool, extra + [flag, "dir"], rc, "refusing to replace it"),
        Case(tool, extra + [flag, "fifo"], rc, "refusing to replace it"),
        Case(tool, extra + [flag, "/dev/null"], rc, "refusing to replace it"),
        Case(tool, extra + [flag, "no/such/dir/out.gguf"], rc, "no/such/dir"),
    ]
    if os.geteuid() != 0:
        cases.append(Case(tool, extra + [flag, "readonly/out.gguf"], rc, "readonly"))
    return cases


def pi_run_cases():
    t, m = "pi-run", ["-m", "demo.gguf"]
    ok = ["-n", "2", "--temp", "0"]
    cases = common_cases(t, m) + model_cases(t, "-m", ["-p", "hi", "-n", "1"])
    cases += [usage(t, m + ["-p"], "-p expects a value"), usage(t, m + ["-n"], "-n expects")]
    cases += int_cases(t, "-n", m, ["-3"], message="-n must be -2 or more")
    cases += int_cases(t, "-t", m, ["0", "-1"], message="-t")
    cases += int_cases(t, "-c", m, ["-1"], message="-c")
    cases += int_cases(t, "-b", m, ["0", "-3"], message="-b")
    cases += int_cases(t, "--top-k", m, ["-1"], message="out of range")
    cases += int_cases(t, "--repeat-last-n", m, ["-2"], message="out of range")
    cases += int_cases(t, "-s", m, [])
    for flag, bad in (("--temp", []), ("--top-p", ["0", "1.5", "-1"]),
                      ("--min-p", ["-0.1", "2"]), ("--repeat-penalty", ["0", "-1"]),
                      ("--sparse-threshold", [])):
        cases += float_cases(t, flag, m, bad, "out of range")
    cases += [
        usage(t, m + ["--vram-budget", v], "--vram-budget")
        for v in ("-2", "16777216T", "inf", "nan", "abc", "5X", "", "G", "1e999G", "4096Bi")
    ]
    cases += [
        usage(t, m + ["--sparse", "sometimes"], "--sparse"),
        usage(t, m + ["-ctk", "q3"], "q3"),
        usage(t, m + ["-ctv", ""], "-ctv"),
        usage(t, m + ["--ffn-backend", "tpu"], "tpu"),
        usage(t, m + ["--gpus", "0,x"], "--gpus expects CUDA device numbers or host"),
        usage(t, m + ["--gpus", ""], "--gpus expects"),
        usage(t, m + ["--vram-budget", "1G,abc"], "--vram-budget expects a size"),
        bad_input(t, m + ["--vram-budget", "1G,2G", "-p", "hi"],
                  "--vram-budget lists 2 budgets: one per device of --gpus"),
        bad_input(t, m + ["--gpus", "host,host", "--vram-budget", "1G,2G,3G", "-p", "hi"],
                  "--vram-budget gives 3 budgets for the 2 devices of --gpus host,host"),
        bad_input(t, m + ["--gpus", "host,host", "--vram-budget", "auto", "-p", "hi"],
                  "--vram-budget auto with --gpus"),
        bad_input(t, m + ["--gpus", "host", "--host-device", "--vram-budget", "1G", "-p", "hi"],
                  "host entries, not --host-device"),
        usage(t, m + ["--stop", ""], "--stop expects a non-empty text"),
        usage(t, m + ["--cpu-workers", "-1"], "--cpu-workers must be 0 to 64"),
        usage(t, m + ["--cpu-workers", "65"], "--cpu-workers must be 0 to 64"),
        usage(t, m + ["--cpu-workers", "two"], "--cpu-workers expects an integer"),
        usage(t, m + ["--cpu-workers", "1", "--coordinator-share", "0.95"],
              "--coordinator-share must be 0 to 0.9"),
        usage(t, m + ["--cpu-workers", "1", "--coordinator-share", "nan"],
              "--coordinator-share"),
        # A file without ffn_down_t: its neurons cannot be split off.
        bad_input(t, ["-m", "plain.gguf", "--cpu-workers", "1", "-p", "hi"],
                  "sparse-capable model"),
        bad_input(t, m + ["-f", "dir"], "it is a directory"),
        bad_input(t, m + ["-f", "fifo"], "not a regular file"),
        bad_input(t, m + ["-f", "/dev/zero"], "not a regular file"),
        bad_input(t, m + ["-f", "missing.txt"], "missing.txt"),
        bad_input(t, m + ["-f", "huge_prompt.txt"], "longer than the context"),
        bad_input(t, m + ["-c", "2000000000", "-p", "hi"], "(-c)"),
        bad_input(t, m + ["-c", "100000000", "-p", "hi"], "is available"),
        bad_input(t, ["-m", "other.gguf", "--sparse", "predictor", "-p", "hi"], "predictor"),
        bad_input(t, ["-m", "plain.gguf", "--sparse", "predictor", "-p", "hi"], "predictor"),
        # A model and a plan of another model / truncated stats for a split.
        bad_input(t, m + ["--vram-budget", "64M", "--ffn-backend", "host",
                          "--stats", "truncated.stats.gguf", "-p", "hi"], "truncated.stats.gguf"),
        bad_input(t, m + ["--vram-budget", "64M", "--ffn-backend", "host",
                          "--stats", "other.gguf", "-p", "hi"], "other.gguf"),
        bad_input(t, m + ["--vram-budget", "64M", "--ffn-backend", "host", "--stats", "fifo",
                          "-p", "hi"], "not a regular file"),
        # Non-finite weights: named by --check-tensors, and as NaN logits without it.
        bad_input(t, ["-m", "nan.gguf", "--check-tensors", "-p", "hi"],
                  "tensor 'output.weight' [256, 4096]: row 4095, element 224 is NaN"),
        bad_input(t, ["-m", "nan.gguf", "-p", "hi", "--json"],
                  "the logits hold NaN or infinite values"),
        # A truncated cached plan is not used: it is remade, and the run goes on.
        Case(t, ["-m", "planned.gguf", "--vram-budget", "64M", "--ffn-backend", "host",
                 "-p", "hi", "-n", "4"], 0, "not reusing planned.plan-64M-c256-f16-f16-g1.gguf"),
        # Unusual but valid prompts run.
        Case(t, m + ["-f", "empty.txt"] + ok, 0, "pi-run:"),
        Case(t, m + ["-f", "binary.txt", "-c", "1024"] + ok, 0, "pi-run:"),
        Case(t, m + ["-f", "invalid_utf8.txt"] + ok, 0, "pi-run:"),
        Case(t, m + ["-p", "\u00e9\u4e2d\U0001f600"] + ok, 0, "pi-run:"),
        Case(t, m + ["-p", "hi", "-n", "0"], 0, "pi-run:"),
        Case(t, m + ["-p", "hi", "-c", "8", "-n", "-1", "--temp", "0", "--ignore-eos",
                     "--no-context-shift"], 0, "the context (8) is full"),
        Case(t, m + ["-p", "hi", "-c", "8", "-n", "40", "--temp", "0", "--ignore-eos"], 0,
             "the context (8) filled and was shifted"),
        Case(t, m + ["-p", "hi", "--repeat-last-n", "-1", "--repeat-penalty", "1.1"] + ok, 0,
             "pi-run:"),
        Case(t, m + ["-p", "hi", "--repeat-last-n", "2000000000", "--repeat-penalty", "1.1"] + ok,
             0, "pi-run:"),
        Case(t, m + ["-p", "hi", "-c", "300"] + ok, 0, "exceeds the model's trained context"),
        Case(t, m + ["-p", "hi", "--check-tensors"] + ok, 0, "pi-run:"),
    ]
    return cases


def pi_bench_cases():
    t, m = "pi-bench", ["-m", "demo.gguf", "--no-bw"]
    cases = common_cases(t, m) + model_cases(t, "-m", ["-p", "0", "-n", "1", "-r", "1"])
    for flag in ("-p", "-n", "-t"):
        cases += [usage(t, m + [flag, v], flag)
                  for v in ("abc", "-1", "", "1,,2", "99999999999", "16777217", "1.5", ",")]
    cases += [usage(t, m + ["-t", "0"], "-t item 0 ('0') is out of range")]
    cases += int_cases(t, "-r", m, ["0", "-1"], message="-r")
    cases += int_cases(t, "-b", m, ["0", "-1"], message="-b")
    cases += [
        usage(t, m + ["-o", "xml"], "-o expects md, csv, json or jsonl"),
        usage(t, m + ["--isa", "sse9"], "sse9"),
        usage(t, m + ["--link-gbs", "-1"], "--link-gbs"),
        usage(t, m + ["--link-gbs", "nan"], "--link-gbs"),
        usage(t, m + ["--sparse", "off,maybe"], "maybe"),
        usage(t, m + ["--worker-threads", "-1"], "--worker-threads must be 0 to 512"),
        usage(t, m + ["--transport", "inproc,carrier-pigeon"], "carrier-pigeon"),
        bad_input(t, m + ["--text", "dir"], "it is a directory"),
        bad_input(t, m + ["--text", "fifo"], "not a regular file"),
        bad_input(t, m + ["--text", "empty.txt"], "is empty"),
        bad_input(t, m + ["--text", "missing.txt"], "missing.txt"),
        bad_input(t, m + ["-p", "16777216", "-n", "0", "-r", "1"], "is available"),
        bad_input(t, ["-m", "demo.gguf,missing.gguf", "--no-bw", "-p", "0", "-n", "1", "-r", "1"],
                  "missing.gguf"),
    ]
    return cases


def pi_perplexity_cases():
    t, m = "pi-perplexity", ["-m", "demo.gguf"]
    f = m + ["-f", "short.txt"]
    cases = common_cases(t, f) + model_cases(t, "-m", ["-f", "short.txt"])
    cases += [usage(t, m, "-f")]
    cases += int_cases(t, "-c", f, ["-1", "2"], message="-c")
    cases += int_cases(t, "-b", f, ["0"], message="-b")
    cases += int_cases(t, "-t", f, ["0"], message="-t")
    cases += int_cases(t, "--chunks", f, ["0", "-2"], message="--chunks")
    cases += [
        bad_input(t, m + ["-f", "dir"], "it is a directory"),
        bad_input(t, m + ["-f", "fifo"], "not a regular file"),
        bad_input(t, m + ["-f", "/dev/zero"], "not a regular file"),
        bad_input(t, m + ["-f", "empty.txt"], "empty.txt"),
        bad_input(t, m + ["-f", "short.txt", "-c", "512"], "tokens"),
        bad_input(t, m + ["-f", "short.txt", "-c", "100000000"], "-c"),
        Case(t, m + ["-f", "binary.txt", "-c", "64", "--chunks", "1"], 0, "perplexity"),
        bad_input(t, ["-m", "nan.gguf", "-f", "short.txt", "--check-tensors"],
                  "row 4095, element 224 is NaN"),
    ]
    return cases


def pi_dump_logits_cases():
    t = "pi-dump-logits"
    m = ["-m", "demo.gguf", "--out", "out.bin"]
    cases = common_cases(t, m + ["--tokens", "1"])
    cases += model_cases(t, "-m", ["--tokens", "1,2", "--out", "out.bin"])
    cases += [
        usage(t, m + ["--tokens", v], "--tokens")
        for v in ("", "abc", "1,,2", "1,x", "99999999999", "1.5")
    ]
    cases += [
        bad_input(t, m + ["--tokens", "1,2,99999"], "--tokens entry 2: token id 99999"),
        bad_input(t, m + ["--tokens", "1,-4"], "--tokens entry 1"),
        usage(t, m + ["--tokens", "1", "--mode", "sideways"], "sideways"),
        usage(t, ["-m", "demo.gguf", "--tokens", "1"], "--out"),
    ]
    cases += int_cases(t, "-t", m + ["--tokens", "1"], ["0"], message="-t")
    cases += int_cases(t, "-c", m + ["--tokens", "1"], ["-1"], message="-c")
    cases += out_path_cases(t, "--out", ["-m", "demo.gguf", "--tokens", "1,2"])
    return cases


def pi_tokenize_cases():
    t, m = "pi-tokenize", ["-m", "demo.gguf"]
    cases = common_cases(t, m) + model_cases(t, "-m", ["hello"])
    cases += [usage(t, ["hello"], "-m")]
    for flag in ("--ids-jsonl", "--decode-jsonl", "--stream-jsonl"):
        cases += [
            bad_input(t, m + [flag, "dir"], "it is a directory"),
            bad_input(t, m + [flag, "fifo"], "not a regular file"),
            bad_input(t, m + [flag, "missing.jsonl"], "missing.jsonl"),
            bad_input(t, m + [flag, "bad_lines.jsonl"], "bad_lines.jsonl:"),
        ]
    for flag in ("--decode-jsonl", "--stream-jsonl"):
        cases += [
            bad_input(t, m + [flag, "bad_ids.jsonl"], "id 99999999 at position 2 is out of range"),
            bad_input(t, m + [flag, "negative_ids.jsonl"], "id -5 at position 1 is out of range"),
            bad_input(t, m + [flag, "not_array.jsonl"], "not_array.jsonl:1: expected a JSON array"),
        ]
    cases += [
        Case(t, m + [open(os.path.join(ROOT, "models", "kjv-valid.txt")).read(200)], 0, ""),
        Case(t, m + ["--info"], 0, ""),
    ]
    return cases


def pi_synth_cases():
    t, o = "pi-synth", ["-o", "synth.gguf"]
    cases = common_cases(t, o) + [usage(t, [], "-o OUT.gguf is required")]
    for flag in ("--n-vocab", "--n-embd", "--n-layer", "--n-head", "--n-ff", "--n-ctx"):
        cases += int_cases(t, flag, o, [], message=flag)
        cases += [usage(t, o + [flag, v], "must be positive") for v in ("0", "-1")]
    cases += [
        usage(t, o + ["--n-head-kv", "-1"], "must be positive"),
        usage(t, o + ["--n-embd", "100", "--n-head", "3"], "head size"),
        usage(t, o + ["--n-head", "4", "--n-head-kv", "3"], "multiple"),
        usage(t, o + ["--type", "q2_k"], "--type expects"),
        usage(t, o + ["--type", "q4_0", "--n-embd", "48", "--n-head", "2"], "multiples of 32"),
        usage(t, o + ["--arch", "gpt"], "arch 'gpt'"),
        usage(t, o + ["--activation", "tanh"], "activation 'tanh'"),
        usage(t, o + ["--arch", "falcon", "--activation", "silu"], "no gate"),
        usage(t, o + ["--tokenizer", "words"], "--tokenizer expects"),
        usage(t, o + ["--tokenizer", "bytes", "--n-vocab", "100"], "n_vocab >= "),
        usage(t, o + ["--rope-theta", "0"], "must be positive"),
        usage(t, o + ["--norm-eps", "-1"], "must be positive"),
        usage(t, o + ["--rope-theta", "nan"], "--rope-theta"),
        usage(t, o + ["--planted-sparsity", "1.5", "--activation", "relu"], "planted sparsity"),
        usage(t, o + ["--planted-sparsity", "0.9"], "ReLU-family"),
        usage(t, o + ["--planted-alpha", "-1", "--planted-sparsity", "0.5", "--activation", "relu"],
              "planted alpha"),
        usage(t, o + ["--n-vocab", "2000000000", "--n-embd", "4096", "--n-head", "32"],
              "of memory"),
        usage(t, o + ["--n-layer", "2000000000"], "of memory"),
        usage(t, o + ["--n-ff", "2000000000", "--n-embd", "4096", "--n-head", "32"], "of memory"),
        bad_input(t, o + ["--n-layer", "100000", "--n-embd", "4096", "--n-head", "32",
                          "--n-ff", "16384"], "of disk"),
    ]
    cases += out_path_cases(t, "-o", [])
    return cases


def pi_quantize_cases():
    t = "pi-quantize"
    cases = [
        usage(t, [], "usage"),
        usage(t, ["demo.gguf"], "usage"),
        usage(t, ["demo.gguf", "out.gguf"], "usage"),
        usage(t, ["demo.gguf", "out.gguf", "q3_k"], "unknown type 'q3_k'"),
        usage(t, ["demo.gguf", "out.gguf", "q8_0", "--sideways"], "unknown flag '--sideways'"),
        usage(t, ["demo.gguf", "out.gguf", "q8_0", "--set-activation"], "expects a value"),
    ]
    for m in model_cases(t, "", []):
        if m.args[1] != "demo.stats.gguf":  # any GGUF is pi-quantize's input
            cases.append(bad_input(t, [m.args[1], "out.gguf", "q8_0"], m.message))
    for c in out_path_cases(t, "", []):
        cases.append(bad_input(t, ["demo.gguf", c.args[1], "q8_0"], c.message))
    # In place: the input stays mapped while its replacement is written.
    cases.append(Case(t, ["copy.gguf", "copy.gguf", "q8_0"], 0, "q8_0"))
    return cases


def pi_place_cases():
    t, m = "pi-place", ["-m", "demo.gguf"]
    b = m + ["--vram-budget", "64M", "-o", "plan.gguf"]
    cases = common_cases(t, b) + model_cases(t, "-m", ["--vram-budget", "64M", "-o", "plan.gguf",
                                                       "--stats", "demo.stats.gguf"])
    cases += [usage(t, m, "--vram-budget")]
    cases += [usage(t, m + ["--vram-budget", v], "--vram-budget")
              for v in ("-1", "auto", "-2", "abc", "inf", "16777216T", "")]
    cases += int_cases(t, "-c", b, ["-1"], message="-c")
    cases += int_cases(t, "--group", b, ["0", "-1"], message="--group")
    cases += [
        bad_input(t, b + ["--stats", "missing.stats.gguf"], "missing.stats.gguf"),
        bad_input(t, b + ["--stats", "truncated.stats.gguf"], "truncated.stats.gguf"),
        bad_input(t, b + ["--stats", "other.gguf"], "other.gguf"),
        bad_input(t, b + ["--stats", "fifo"], "not a regular file"),
        bad_input(t, b + ["--stats", "demo.plan.gguf"], "demo.plan.gguf"),
        # A budget that cannot hold the dense blocks: what fits, said so (as the original).
        Case(t, b + ["-c", "2000000000"], 0, "raise --vram-budget for hot neurons or lower -c",
             outputs=["plan.gguf"]),
    ]
    # A truncated plan or index where the output goes is rewritten, with the reason.
    cases += [
        Case(t, m + ["--vram-budget", "64M", "-o", "replan.gguf"], 0, "replacing replan.gguf"),
        Case(t, b + ["--gpuidx", "regpuidx"], 0, "replacing regpuidx", outputs=["plan.gguf"]),
    ]
    cases += out_path_cases(t, "-o", m + ["--vram-budget", "64M"])
    cases += [
        bad_input(t, m + ["--vram-budget", "64M", "-o", "plan.gguf", "--gpuidx", "fifo"],
                  "refusing to replace it"),
    ]
    return cases


def pi_profile_cases():
    t, m = "pi-profile", ["-m", "demo.gguf"]
    f = m + ["-f", "short.txt", "-o", "s.gguf"]
    cases = common_cases(t, f) + model_cases(t, "-m", ["-f", "short.txt", "-o", "s.gguf"])
    cases += [usage(t, m, "-f")]
    cases += int_cases(t, "-c", f, ["-1", "1"], message="-c")
    cases += int_cases(t, "-b", f, ["0"], message="-b")
    cases += int_cases(t, "-t", f, ["0"], message="-t")
    cases += int_cases(t, "--max-tokens", f, ["0", "-5"], message="--max-tokens")
    cases += [
        bad_input(t, m + ["-f", "fifo", "-o", "s.gguf"], "not a regular file"),
        bad_input(t, m + ["-f", "missing.txt", "-o", "s.gguf"], "missing.txt"),
        bad_input(t, m + ["-f", "dir", "-o", "s.gguf"], "dir"),
        bad_input(t, m + ["-f", "empty.txt", "-o", "s.gguf"], "empty.txt"),
        bad_input(t, f + ["-c", "100000000"], "is available"),
    ]
    cases += out_path_cases(t, "-o", m + ["-f", "short.txt"])
    cases += out_path_cases(t, "--csv", m + ["-f", "short.txt", "-o", "s.gguf"])
    return cases


def pi_train_predictor_cases():
    t = "pi-train-predictor"
    m = ["-m", "demo.gguf", "-f", CORPUS, "-o", "p.gguf"]
    cases = common_cases(t, m) + model_cases(t, "-m", ["-f", CORPUS, "-o", "p.gguf"])
    cases += [usage(t, ["-m", "demo.gguf", "-f", CORPUS], "-o")]
    for flag, bad in (("--rank", ["-1", "70000"]), ("--max-tokens", ["0", "-1"]),
                      ("-c", ["1", "-1"]), ("--epochs", ["0"]), ("--patience", ["0"]),
                      ("--batch", ["0"]), ("-t", ["0"]), ("--seed", [])):
        cases += int_cases(t, flag, m, bad, message="invalid option" if bad else flag)
    for flag, bad in (("--lr", ["0", "-1"]), ("--pos-weight", ["0"]), ("--holdout", ["0", "1"]),
                      ("--target-recall", ["0", "1.5"]), ("--margin", ["-1"])):
        cases += float_cases(t, flag, m, bad, "invalid option")
    cases += [
        usage(t, m + ["--ranks", "1,2,x"], "--ranks"),
        usage(t, m + ["--predictor-type", "q4_k"], "q4_k"),
        bad_input(t, ["-m", "other.gguf", "-f", CORPUS, "-o", "p.gguf"], "other.gguf"),
        bad_input(t, ["-m", "demo.gguf", "-f", "fifo", "-o", "p.gguf"], "not a regular file"),
        bad_input(t, ["-m", "demo.gguf", "-f", "dir", "-o", "p.gguf"], "has no *.txt files"),
    ]
    return cases


def relu_cases():
    """pi-train-predictor on a ReLU model: a corpus too small to measure recall."""
    t = "pi-train-predictor"
    base = ["-m", "relu.gguf", "-o", "p.gguf", "-t", "1"]
    return [
        bad_input(t, base + ["-f", "short.txt"], "measuring recall at least 50 held out"),
        bad_input(t, base + ["-f", CORPUS, "--max-tokens", "220"], "at least 50 held out"),
    ] + out_path_cases(t, "-o", ["-m", "relu.gguf", "-f", CORPUS, "--max-tokens", "600",
                                 "--epochs", "1", "-t", "1"])


def limits(sanitized):
    def apply():
        if not sanitized:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_case(bin_dir, tmp, case, sanitized, before):
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (f"hard_rss_limit_mb={MEMORY_LIMIT >> 20}:detect_leaks=1:"
                           "abort_on_error=1:allocator_may_return_null=0")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["LLAMA_SPARSE_PRED_THRESHOLD"] = ""
    env.pop("LLAMA_SPARSE_PRED_THRESHOLD")
    cmd = [os.path.join(bin_dir, case.tool)] + case.args
    try:
        p = subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=TIME_LIMIT, preexec_fn=limits(sanitized))
    except subprocess.TimeoutExpired:
        return f"hung (killed after {TIME_LIMIT} s)"
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    problems = []
    if p.returncode < 0:
        problems.append(f"killed by signal {-p.returncode}")
    elif p.returncode != case.rc:
        problems.append(f"exit {p.returncode}, want {case.rc}")
    bad = [s for s in BAD_SIGNS if s in out]
    if bad:
        problems.append(f"printed {bad[0]!r}")
    if case.message and case.message not in out:
        problems.append(f"no {case.message!r} in the output")
    if case.rc != 0 and not any(line.startswith(case.tool + ": ") or line.startswith("usage:")
                                for line in out.splitlines()):
        problems.append(f"no line saying '{case.tool}: ...'")
    new = sorted(set(os.listdir(tmp)) - set(before))
    for name in new:  # outputs a case asked for too: each case starts from the same folder
        path = os.path.join(tmp, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    left = [name for name in new if name not in case.outputs]
    if left:
        problems.append(f"left {left}")
    if problems:
        return "; ".join(problems) + " | output: " + out.strip()[-400:].replace("\n", " / ")
    return None


def gpu_worker_cases(bin_dir):
    """pi-gpu-worker, which pi-launch starts (or a remote one): bad flags, a channel that is
    not one, secrets missing."""
    t, m = "pi-gpu-worker", ["-m", "demo.gguf"]
    cases = common_cases(t, m + ["--shm-fd", "3"])
    cases += int_cases(t, "-t", m + ["--shm-fd", "3"], ["0", "513"], message="-t must be 1 to 512")
    cases += [
        usage(t, ["--shm-fd", "3"], "-m MODEL is required"),
        usage(t, m, "give one of --shm-fd N and --listen HOST:PORT"),
        usage(t, m + ["--shm-fd", "3", "--listen", "127.0.0.1:0"],
              "give one of --shm-fd N and --listen HOST:PORT"),
        usage(t, m + ["--shm-fd", "3", "--ffn-backend", "tpu"],
              "--ffn-backend expects auto, cuda or host, got 'tpu'"),
        bad_input(t, m + ["--shm-fd", "57"], "fd 57"),
    ]
    # Remote: a gRPC build (it has pi-launch) says the token is missing; one without gRPC,
    # that --listen needs it.
    grpc_build = os.path.exists(os.path.join(bin_dir, "pi-launch"))
    cases.append(usage(t, m + ["--listen", "127.0.0.1:0"],
                       "need --auth-token-file" if grpc_build else "--listen needs a build with gRPC"))
    return cases


def served_cases(bin_dir):
    """pi-launch and pi-client (built with gRPC): bad flags and unusable input. A valid
    pi-launch serves until stopped, so only its failures are here (tests/launch_test.py
    runs it)."""
    if not os.path.exists(os.path.join(bin_dir, "pi-launch")):
        return []
    t, m = "pi-launch", ["-m", "demo.gguf"]
    cases = common_cases(t, m) + model_cases(t, "-m", ["--listen", "127.0.0.1:0"])
    cases += int_cases(t, "--max-queue", m, ["-1", "100001"], message="--max-queue")
    cases += int_cases(t, "-t", m, ["0"], message="-t")
    cases += [
        bad_input(t, m + ["--listen", "nonsense"], "--listen expects HOST:PORT"),
        bad_input(t, m + ["--listen", "127.0.0.1:"], "--listen expects HOST:PORT"),
        bad_input(t, m + ["--listen", "256.1.1.1:5"], "cannot listen on"),
        bad_input(t, ["-m", "plain.gguf", "--cpu-workers", "1", "--listen", "127.0.0.1:0"],
                  "sparse-capable model"),
        bad_input(t, m + ["-c", "2000000000", "--listen", "127.0.0.1:0"], "(-c)"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--http", "nonsense"],
                  "--http expects HOST:PORT"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--http", "256.1.1.1:5"],
                  "is not an IP address"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--api-key-file", "missing.txt"],
                  "missing.txt"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--api-key-file", "short_token.txt"],
                  "16 to 4096 characters"),
        usage(t, m + ["--http"], "--http expects a value"),
        usage(t, m + ["--chat-template", "alpaca"], "unknown chat template 'alpaca'"),
    ]
    # Remote workers: flags, token files, a worker nobody runs.
    tok = ["--auth-token-file", "token.txt"]
    cases += [
        usage(t, m + ["--cpu-worker", "127.0.0.1:1"], "--auth-token-file"),
        usage(t, m + ["--cpu-worker", "nonsense"] + tok, "--cpu-worker expects HOST:PORT"),
        usage(t, m + ["--cpu-worker", "127.0.0.1:99999"] + tok, "--cpu-worker expects HOST:PORT"),
        usage(t, m + ["--cpu-worker", "127.0.0.1:0"] + tok, "port 0 names no worker"),
        usage(t, m + ["--worker-timeout", "5"], "--worker-timeout must be"),
        usage(t, m + ["--tls-cert", "token.txt"], "give them with --cpu-worker"),
        usage(t, m + ["--cpu-worker", "127.0.0.1:1", "--tls-cert", "token.txt"] + tok,
              "--tls-cert and --tls-key go together"),
        bad_input(t, ["-m", "relu.gguf", "--cpu-worker", "127.0.0.1:1", "--auth-token-file",
                      "short_token.txt"], "16 to 4096 characters"),
        bad_input(t, ["-m", "relu.gguf", "--cpu-worker", "127.0.0.1:1", "--auth-token-file",
                      "missing.txt"], "missing.txt"),
        bad_input(t, ["-m", "relu.gguf", "--cpu-worker", "127.0.0.1:1", "--tls-ca", "token.txt"]
                  + tok, "not a PEM file"),
    ]
    t = "pi-cpu-worker"
    cases += common_cases(t, m + ["--listen", "127.0.0.1:0"] + tok)
    cases += int_cases(t, "-t", m + ["--shm-fd", "3"], ["0", "513"], message="-t must be")
    cases += [
        usage(t, ["--listen", "127.0.0.1:0"] + tok, "-m MODEL is required"),
        usage(t, m, "give one of --shm-fd N and --listen HOST:PORT"),
        usage(t, m + ["--shm-fd", "3", "--listen", "127.0.0.1:0"], "give one of"),
        usage(t, m + ["--listen", "127.0.0.1:0"], "--auth-token-file"),
        usage(t, m + ["--listen", "127.0.0.1:0", "--tls-key", "token.txt"] + tok,
              "--tls-cert and --tls-key go together"),
        usage(t, m + ["--listen", "127.0.0.1:0", "--tls-ca", "token.txt"] + tok,
              "--tls-ca needs"),
        bad_input(t, m + ["--listen", "nonsense"] + tok, "--listen expects HOST:PORT"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--auth-token-file", "short_token.txt"],
                  "16 to 4096 characters"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--auth-token-file", "fifo"],
                  "not a regular file"),
        bad_input(t, m + ["--listen", "127.0.0.1:0", "--tls-cert", "token.txt", "--tls-key",
                          "token.txt"] + tok, "not a PEM file"),
        bad_input(t, ["-m", "missing.gguf", "--listen", "127.0.0.1:0"] + tok, "missing.gguf"),
        # Not a channel: the fd is not open / not a shared-memory channel.
        bad_input(t, m + ["--shm-fd", "57"], "fd 57"),
    ]
    t = "pi-client"
    # A port nothing listens on (port 1 on loopback: refused at once).
    none = ["--server", "127.0.0.1:1", "--timeout", "1"]
    cases += common_cases(t, none)
    cases += int_cases(t, "--timeout", [], ["0", "-1", "86401"], message="--timeout")
    cases += int_cases(t, "--top-k", none, ["-1"], message="out of range")
    cases += [
        usage(t, ["-p"], "-p expects a value"),
        usage(t, ["--stop", ""], "--stop expects a non-empty text"),
        usage(t, ["-n", "-3"], "-n must be -2 or more"),
        bad_input(t, none + ["-p", "hi"], "no server answers"),
        bad_input(t, none + ["--health"], "no server answers"),
        bad_input(t, ["--server", "nonsense:address:x", "--timeout", "1", "--models"],
                  "no server answers"),
        bad_input(t, none + ["-f", "missing.txt"], "missing.txt"),
        bad_input(t, none + ["-f", "dir"], "it is a directory"),
    ]
    return cases


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    sanitized = "--sanitized" in sys.argv[2:]
    only = [a for a in sys.argv[2:] if not a.startswith("--")]
    tmp = tempfile.mkdtemp(prefix="pi_bad_input_")
    try:
        before = make_scratch(bin_dir, tmp)
        subprocess.run([os.path.join(bin_dir, "pi-synth"), "-o", os.path.join(tmp, "relu.gguf"),
                        "--activation", "relu", "--down-t", "--tokenizer", "bytes", "--n-layer",
                        "1", "--n-embd", "64", "--n-head", "2", "--n-ff", "128"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        before = sorted(os.listdir(tmp))
        cases = (pi_run_cases() + pi_bench_cases() + pi_perplexity_cases() +
                 pi_dump_logits_cases() + pi_tokenize_cases() + pi_synth_cases() +
                 pi_quantize_cases() + pi_place_cases() + pi_profile_cases() +
                 pi_train_predictor_cases() + relu_cases() + gpu_worker_cases(bin_dir) + served_cases(bin_dir))
        if only:
            cases = [c for c in cases if any(o in c.name() for o in only)]
        failures = 0
        times = []
        for i, case in enumerate(cases):
            start = time.monotonic()
            problem = run_case(bin_dir, tmp, case, sanitized, before)
            times.append((time.monotonic() - start, case.name()))
            if problem:
                failures += 1
                print(f"FAIL {case.name()!r}: {problem}", flush=True)
            elif (i + 1) % 50 == 0:
                print(f"... {i + 1}/{len(cases)} cases", flush=True)
        slowest = ", ".join(f"{name} {secs:.1f} s" for secs, name in sorted(times)[-3:])
        print(f"slowest: {slowest}")
        print(f"bad_input_matrix: {len(cases) - failures}/{len(cases)} cases passed"
              f"{' (sanitized build)' if sanitized else ''}")
        return 1 if failures else 0
    finally:
        os.chmod(os.path.join(tmp, "readonly"), stat.S_IRWXU)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where the tools keep a model's side files (statistics, placement plans), as a user meets them:

- the plan's name carries every key it was made for (budget, context, KV cache types, GPUs):
  runs at two contexts keep two plans, and each is reused by its own kind of run;
- --plan FILE names another place; a run that then fails (an FFN backend that cannot load)
  writes no plan;
- pi-quantize carries a model's statistics over to its copy in another type, which
  --vram-budget takes (with a note) instead of asking for a new profile;
- PowerInfer's <model>.generated.gpuidx is used when solved for the run's budget, refused
  with the reason for another, ignored with --reset-gpu-index;
- a model in a folder nobody can write (an immutable folder: even root cannot): pi-profile's
  statistics and the plans go to $XDG_CACHE_HOME/pi, and --vram-budget finds them there.

Usage: side_files_test.py BIN_DIR
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import ROOT, check, demo_down_t, finish  # noqa: E402


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300, env=env)


def main():
    bin_dir = sys.argv[1]
    pi_run = os.path.join(bin_dir, "pi-run")
    with tempfile.TemporaryDirectory() as tmp:
        model = demo_down_t(bin_dir, tmp, profile=True)
        base = ["-m", model, "-p", "In the beginning", "-n", "4", "--sparse", "oracle",
                "--vram-budget", "8M", "--ffn-backend", "host"]
        p = run(pi_run, *base, "-c", "128")
        q = run(pi_run, *base, "-c", "256")
        plans = sorted(os.path.basename(f) for f in glob.glob(os.path.join(tmp, "*.plan-*.gguf")))
        check(p.returncode == 0 and q.returncode == 0 and plans == [
            "demo-down-t.plan-8M-c128-f16-f16-g1.gguf", "demo-down-t.plan-8M-c256-f16-f16-g1.gguf"],
              f"a plan per context, each named by its keys ({plans})")
        p = run(pi_run, *base, "-c", "128")
        check(p.returncode == 0 and "reused" in p.stderr, "the -c 128 run reuses its plan")
        p = run(pi_run, *base, "-c", "128", "-ctk", "f32", "-ctv", "f32")
        check(p.returncode == 0 and os.path.exists(model[:-5] + ".plan-8M-c128-f32-f32-g1.gguf"),
              "other KV cache types: another plan")
        mine = os.path.join(tmp, "mine.plan.gguf")
        p = run(pi_run, *base, "--plan", mine)
        check(p.returncode == 0 and os.path.exists(mine), "--plan FILE writes there")
        failed = os.path.join(tmp, "failed.plan.gguf")
        p = run(pi_run, *base[:-2], "--ffn-backend", "cuda", "--plan", failed)
        # A machine with a GPU runs it: then the plan is rightly written.
        gpu = p.returncode == 0
        check(gpu or (p.returncode == 1 and not os.path.exists(failed)),
              f"a run that fails (--ffn-backend cuda without one) writes no plan "
              f"({p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''!r})")

        # PowerInfer's index, <model>.generated.gpuidx: used when solved for this budget
        # (here pi-place's for 7M, its capacity rewritten to 8M: the run then takes the 7M
        # plan's fewer neurons), refused with the reason otherwise, ignored with
        # --reset-gpu-index.
        idx = model + ".generated.gpuidx"
        p = run(os.path.join(bin_dir, "pi-place"), "-m", model, "--vram-budget", "7M", "-c", "128",
                "--gpuidx", idx, "-o", os.path.join(tmp, "seven.plan.gguf"))
        seven = run(pi_run, *base[:-4], "--vram-budget", "7M", "--ffn-backend", "host", "-c", "128",
                    "--plan", os.path.join(tmp, "p7.gguf"))
        n7 = re.search(r"FFN split: (\d+) of", seven.stderr)
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import pigguf
        r = pigguf.GGUFReader(idx)
        w = pigguf.GGUFWriter(idx, "generic.gpu_index", sparse_magic=True)
        w.add_u32("generic.gpu_index.block_count", r.metadata["generic.gpu_index.block_count"])
        w.add_u64("split.vram_capacity", 8 << 20)
        for name, t in r.tensors.items():
            w.add_tensor_raw(name, t.ne, t.type_id, bytes(t.data))
        w.write()
        p = run(pi_run, *base, "-c", "128", "--plan", os.path.join(tmp, "p8.gguf"))
        n8 = re.search(r"FFN split: (\d+) of", p.stderr)
        check(p.returncode == 0 and "hot neurons from" in p.stderr and n7 and n8
              and n8.group(1) == n7.group(1),
              f"a gpuidx for this budget is used: its {n7.group(1) if n7 else '?'} hot neurons "
              f"({n8.group(1) if n8 else '?'})")
        p = run(pi_run, *base, "-c", "128", "--plan", os.path.join(tmp, "p9.gguf"),
                "--reset-gpu-index")
        n9 = re.search(r"FFN split: (\d+) of", p.stderr)
        check(p.returncode == 0 and "hot neurons from" not in p.stderr and n9
              and int(n9.group(1)) > int(n8.group(1) if n8 else 0),
              "--reset-gpu-index ignores it (the 8M plan's own, more neurons)")
        p = run(pi_run, *base[:-4], "--vram-budget", "6M", "--ffn-backend", "host", "-c", "128",
                "--plan", os.path.join(tmp, "p6.gguf"))
        check(p.returncode == 0 and "not using" in p.stderr and "solved for a budget of 8388608" in p.stderr,
              "an index for another budget is not used, saying why")
        os.remove(idx)

        # A Q8_0 copy: pi-quantize carries the statistics over, --vram-budget takes them.
        q8 = os.path.join(tmp, "q8.gguf")
        p = run(os.path.join(bin_dir, "pi-quantize"), model, q8, "q8_0")
        q = run(pi_run, "-m", q8, *base[2:])
        check(p.returncode == 0 and os.path.exists(os.path.join(tmp, "q8.stats.gguf"))
              and q.returncode == 0 and "a copy in other types?" in q.stderr,
              f"a Q8_0 copy reuses the F16's statistics, saying so ({q.stderr[-200:]!r})")

        # A folder nobody may write: chattr +i (root included); skipped where not allowed.
        store = os.path.join(tmp, "store")
        os.mkdir(store)
        shutil.copy(model, os.path.join(store, "m.gguf"))
        locked = run("chattr", "+i", store).returncode == 0
        if not locked:
            print("skip read-only folder: chattr +i is not allowed here")
        else:
            try:
                cache = os.path.join(tmp, "cache")
                env = dict(os.environ, XDG_CACHE_HOME=cache)
                p = run(os.path.join(bin_dir, "pi-profile"), "-m", os.path.join(store, "m.gguf"),
                        "-f", os.path.join(ROOT, "models", "kjv-valid.txt"), "--max-tokens", "512",
                        env=env)
                stats = os.path.join(cache, "pi", "m.stats.gguf")
                check(p.returncode == 0 and os.path.exists(stats),
                      f"pi-profile of a read-only folder's model: stats in $XDG_CACHE_HOME/pi "
                      f"({p.stderr[-200:]!r})")
                p = run(pi_run, "-m", os.path.join(store, "m.gguf"), *base[2:], "-c", "128", env=env)
                check(p.returncode == 0 and os.path.exists(
                    os.path.join(cache, "pi", "m.plan-8M-c128-f16-f16-g1.gguf")),
                      f"--vram-budget finds the cached stats and caches its plan there "
                      f"({p.stderr[-200:]!r})")
            finally:
                run("chattr", "-i", store)
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""pi-run -cnv: each reply equals pi-run's answer to the conversation so far, rendered by
hand in the template's published format (ChatML: <|im_start|>role\\ntext<|im_end|>\\n, then
<|im_start|>assistant\\n opening the reply); -p is the system message; /exit ends it; a
model without a chat template and no --chat-template is a clear error.

Usage: conversation_test.py BIN_DIR
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
MODEL = os.path.join(os.path.dirname(HERE), "models", "demo-kjv-f16.gguf")

def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
        "<|im_start|>assistant\n"


def main():
    bin_dir = sys.argv[1]
    run = os.path.join(bin_dir, "pi-run")
    common = ["-m", MODEL, "--temp", "0", "-n", "12", "-t", "2"]

    def solo(prompt):
        p = subprocess.run([run, *common, "-p", prompt, "--json"], capture_output=True, text=True,
                           timeout=120)
        return json.loads(p.stdout)["text"] if p.returncode == 0 else None

    turns = ["In the beginning", "And the earth", "Who made the light?"]
    for system in (None, "Answer as the scripture would."):
        extra = ["-p", system] if system else []
        p = subprocess.run([run, *common, "-cnv", "--chat-template", "chatml", *extra],
                           input="\n".join(turns) + "\n/exit\nnever read\n", capture_output=True,
                           text=True, timeout=300)
        check(p.returncode == 0, f"pi-run -cnv{' -p SYSTEM' if system else ''} exits 0")
        messages = [{"role": "system", "content": system}] if system else []
        want = ""
        for turn in turns:
            messages.append({"role": "user", "content": turn})
            reply = solo(chatml(messages))
            want += reply + "\n"
            messages.append({"role": "assistant", "content": reply})
        check(p.stdout == want, f"every reply equals pi-run's answer to the conversation so far "
                                f"({'with' if system else 'without'} a system message): "
                                f"{p.stdout!r}")
        check(p.stderr.count("> ") == len(turns) + 1, "a '> ' cue per turn, and /exit ends it")
    p = subprocess.run([run, "-m", MODEL, "-cnv"], input="hi\n", capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 1 and "no chat template" in p.stderr and "--chat-template" in p.stderr,
          f"no template and no --chat-template: a clear error ({p.stderr.strip()[-120:]!r})")
    p = subprocess.run([run, "-m", MODEL, "-cnv", "--chat-template", "alpaca"], input="",
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 2 and "alpaca" in p.stderr, "an unknown template name: a usage error")
    finish()


if __name__ == "__main__":
    main()

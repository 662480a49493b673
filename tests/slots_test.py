#!/usr/bin/env python3
"""llama-server's slot actions through pi-launch's HTTP API (coordinator/serve/slots_api.h):
POST /slots/{id}?action=save|restore|erase and the id_slot a completion runs on.

On the demo model with -np 2 and no prompt store (--cache-ram 0, so nothing but a restore
can bring a prompt back): a prompt run on slot 1 and saved there; the slot erased (the
prompt evaluated whole again, the same answer); then a fresh pi-launch restores the file
into slot 0 and the prompt's answer there is the first run's exactly (text and
probabilities), none of its tokens evaluated again, and a prompt going on from it
evaluates only what is new. GET /slots shows the slot a generation runs on as busy. The same file restores into the serial scheduler. A save
asked while its slot generates waits for the generation to end. Refused, naming the
problem: a file name with a directory or a leading dot, a missing or damaged file (the
slot keeps what it held), an unknown action or query parameter, a slot or id_slot out of
range, GET; without --slot-save-path save and restore are a 501 and erase works (what it
erases is not kept in the prompt store). On the device path (--vram-budget, the layers' KV
cache in a gpu worker) the file holds the worker's part too and restores into a fresh server
of the same placement; a file of the other path is refused, naming the difference.

Usage: slots_test.py BIN_DIR
"""

import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, demo_down_t, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
PROMPT = ("In the beginning God created the heaven and the earth. And the earth was without "
          "form, and void; and darkness was upon the face of the deep.")
MORE = " And the Spirit of God moved upon the face of the waters."


def complete(a, prompt, slot, n=8):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": 2}
    if slot is not None:
        body["id_slot"] = slot
    st, _, r = call(a, "POST", "/completion", body)
    return r if st == 200 else None


def answer(r):
    return None if r is None else (r["content"], r["completion_probabilities"])


def action(a, slot, what, filename=None, query=None):
    body = None if filename is None else {"filename": filename}
    return call(a, "POST", f"/slots/{slot}?{query or 'action=' + what}", body)


def refused(a, status, words, what, *args, **kw):
    st, _, r = action(a, *args, **kw)
    msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else str(r)
    check(st == status and words in msg, f"{what}: {st} ({msg})")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        slots = os.path.join(tmp, "slots")
        base = ["-m", MODEL, "-t", "2", "-c", "2048", "--cpu-workers", "0", "-b", "16"]
        args = base + ["--cache-ram", "0", "--slot-save-path", slots]
        s = launch(bin_dir, tmp, *args, "-np", "2")
        check(s.http is not None, "pi-launch -np 2 --slot-save-path")
        first = complete(s.http, PROMPT, 1)
        n_prompt = first["tokens_evaluated"] if first else 0
        check(first is not None and first["id_slot"] == 1 and first["timings"]["prompt_n"] == n_prompt,
              f"a completion on slot 1: id_slot {first and first['id_slot']}, {n_prompt} prompt tokens")
        st, _, saved = action(s.http, 1, "save", "talk.bin")
        size = os.path.getsize(os.path.join(slots, "talk.bin")) if st == 200 else -1
        check(st == 200 and saved["n_saved"] == n_prompt and saved["n_written"] == size
              and saved["id_slot"] == 1 and saved["filename"] == "talk.bin"
              and saved["timings"]["save_ms"] >= 0,
              f"save slot 1: {saved}")
        st, _, erased = action(s.http, 1, "erase")
        check(st == 200 and erased == {"id_slot": 1, "n_erased": n_prompt}, f"erase slot 1: {erased}")
        again = complete(s.http, PROMPT, 1)
        check(again is not None and again["timings"]["prompt_n"] == n_prompt
              and answer(again) == answer(first),
              "after the erase the prompt is evaluated whole, the same answer")

        # A save asked while its slot generates runs after the generation; GET /slots
        # shows which slot is busy meanwhile.
        ended = {}

        def long_run():
            ended["reply"] = complete(s.http, PROMPT + MORE, 0, n=1500)

        t = threading.Thread(target=long_run)
        t.start()
        seen = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "reply" not in ended:
            _, _, seen = call(s.http, "GET", "/slots")
            if seen[0]["is_processing"]:
                break
        st, _, busy = action(s.http, 0, "save", "busy.bin")
        t.join()
        long_prompt = ended["reply"]["tokens_evaluated"] if ended.get("reply") else -1
        check(seen is not None and [x["is_processing"] for x in seen] == [True, False],
              f"GET /slots while slot 0 generates: {seen}")
        # (The slot's cache holds a prompt once its generation has left it: a save run
        # during the generation would find nothing to save.)
        check(st == 200 and busy["n_saved"] == long_prompt,
              f"a save of a busy slot waits for its generation: {busy}")

        # Refusals.
        refused(s.http, 400, "not starting with a dot", "a leading dot", 0, "restore", "../talk.bin")
        refused(s.http, 400, "only A-Z", "a directory", 0, "save", "sub/talk.bin")
        refused(s.http, 400, "nope.bin", "a missing file", 0, "restore", "nope.bin")
        refused(s.http, 400, "action must be save, restore or erase", "an unknown action", 0, "x")
        refused(s.http, 400, "query parameter x", "an unknown parameter", 0, "erase",
                query="action=erase&x=1")
        refused(s.http, 400, "slots are 0 to 1", "slot 2", 2, "erase")
        refused(s.http, 400, "must be a number", "slot x", "x", "erase")
        st, _, r = call(s.http, "POST", "/slots/0?action=save", {"filename": "a.bin", "x": 1})
        check(st == 400 and "x is not supported" in r["error"]["message"], f"a body field: {r}")
        st, _, r = call(s.http, "GET", "/slots/0")
        check(st == 405, f"GET /slots/0: {st}")
        st, _, r = call(s.http, "POST", "/completion", {"prompt": "x", "id_slot": 2})
        check(st == 400 and "id_slot 2" in r["error"]["message"], f"id_slot 2: {r}")
        st, _, r = call(s.http, "POST", "/v1/completions", {"prompt": "x", "id_slot": -2})
        check(st == 400 and "id_slot" in r["error"]["message"], f"id_slot -2: {r}")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # A fresh server: the file into the other slot.
        s = launch(bin_dir, tmp, *args, "-np", "2")
        st, _, restored = action(s.http, 0, "restore", "talk.bin")
        check(st == 200 and restored["n_restored"] == n_prompt and restored["n_read"] == size
              and restored["timings"]["restore_ms"] >= 0,
              f"a fresh server restores it into slot 0: {restored}")
        back = complete(s.http, PROMPT, 0)
        check(back is not None and back["timings"]["prompt_n"] == 0 and answer(back) == answer(first),
              f"its answer is the first run's exactly, {back and back['timings']['prompt_n']} "
              "prompt tokens evaluated")
        on = complete(s.http, PROMPT + MORE, 0)
        check(on is not None and on["timings"]["prompt_n"] < on["tokens_evaluated"] - n_prompt + 16,
              f"a prompt going on from it: {on and on['timings']['prompt_n']} of "
              f"{on and on['tokens_evaluated']} evaluated")
        # A damaged file: refused, the slot keeps what it held.
        with open(os.path.join(slots, "talk.bin"), "rb") as f:
            data = f.read()
        with open(os.path.join(slots, "cut.bin"), "wb") as f:
            f.write(data[:len(data) // 2])
        st, _, restored = action(s.http, 1, "restore", "talk.bin")
        refused(s.http, 400, "cut.bin", "a truncated file", 1, "restore", "cut.bin")
        kept = complete(s.http, PROMPT, 1)
        check(kept is not None and kept["timings"]["prompt_n"] == 0 and answer(kept) == answer(first),
              "after the refused restore slot 1 still holds the prompt")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # The serial scheduler restores it too; without --slot-save-path only erase.
        s = launch(bin_dir, tmp, *args)
        st, _, restored = action(s.http, 0, "restore", "talk.bin")
        back = complete(s.http, PROMPT, None)
        check(st == 200 and back is not None and back["timings"]["prompt_n"] == 0
              and answer(back) == answer(first) and back["id_slot"] == 0,
              "serial: restored, the same answer, nothing evaluated")
        check(s.stop() == 0, "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, *base)
        refused(s.http, 501, "--slot-save-path", "save without --slot-save-path", 0, "save", "a.bin")
        complete(s.http, PROMPT, 0)
        st, _, erased = action(s.http, 0, "erase")
        check(st == 200 and erased["n_erased"] == n_prompt, f"erase without it: {erased}")
        again = complete(s.http, PROMPT, 0)
        check(again is not None and again["timings"]["prompt_n"] == n_prompt,
              "an erased prompt is forgotten, not kept in the prompt store (--cache-ram)")
        st, _, r = call(s.http, "POST", "/completion", {"prompt": "x", "id_slot": 1})
        check(st == 400 and "slots are 0 to 0" in r["error"]["message"], f"serial, id_slot 1: {r}")
        check(s.stop() == 0, "pi-launch stops cleanly")

        # The device path (layers in a gpu worker): the file holds the worker's layers too; a
        # fresh server with the same placement restores it and answers as the first did; a
        # file of the other path (the same model) is refused, naming the difference.
        demo_t = demo_down_t(bin_dir, tmp, profile=True)
        host = ("-m", demo_t, "-c", "256", "--cpu-workers", "0", "--slot-save-path", slots)
        device = (*host, "--vram-budget", "8M", "--host-device", "--cache-ram", "0")
        s = launch(bin_dir, tmp, *device)
        on_device = complete(s.http, PROMPT, 0)
        st, _, saved = action(s.http, 0, "save", "d.bin")
        check(st == 200 and saved["n_saved"] == n_prompt and saved["n_written"] > 0,
              f"the device path: save ({saved})")
        check(s.stop() == 0, "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, *host)
        complete(s.http, PROMPT, 0)
        st, _, saved = action(s.http, 0, "save", "h.bin")
        check(st == 200, f"the host path: save ({saved})")
        refused(s.http, 400, "saved by a server with GPU layers host[0,",
                "the host path: a device path's file", 0, "restore", "d.bin")
        check(s.stop() == 0, "pi-launch stops cleanly")
        s = launch(bin_dir, tmp, *device)
        st, _, restored = action(s.http, 0, "restore", "d.bin")
        back = complete(s.http, PROMPT, 0)
        check(st == 200 and restored["n_restored"] == n_prompt and back is not None
              and back["timings"]["prompt_n"] == 0 and answer(back) == answer(on_device),
              f"the device path: restored into a fresh server, the same answer, nothing "
              f"evaluated ({restored})")
        refused(s.http, 400, "no layers on a GPU; this one has GPU layers host[0,",
                "the device path: a host path's file", 0, "restore", "h.bin")
        st, _, erased = action(s.http, 0, "erase")
        check(st == 200 and erased["n_erased"] > 0, f"the device path: erase ({erased})")
        check(s.stop() == 0, "pi-launch stops cleanly")
    finish()


if __name__ == "__main__":
    main()

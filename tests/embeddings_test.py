#!/usr/bin/env python3
"""POST /v1/embeddings through pi-launch --http on the demo model, against the numpy
reference forward (tests/reference/llama_ref.py: the final-normed hidden states, pooled
here and scaled to unit length).

- mean pooling (the default), --pooling last and cls: each embedding within 1e-4 of the
  reference's, unit length, n_embd long, for a short prompt and one of several -b chunks;
  usage counts the prompt tokens (BOS included);
- several inputs in one request: the list in input order, each as asked alone; token ids
  as input: as their text; llama-server's mixes of ids and text, and inputs of both kinds
  in one list: as the ids /tokenize gives their pieces; an empty text: the embedding of
  BOS alone; base64: the same floats;
- with -np 2, an embedding asked while a completion runs beside it equals -np 1's, bit for
  bit (its rows are evaluated as they are alone);
- llama-server's POST /embedding and /embeddings (inputs also as "content"): the pooled
  vector as [[...]] under each input's index, equal to /v1's; with --pooling none (-np 1
  and 2) every token's state, unnormalized, each within 1e-4 of the reference's, and
  /v1/embeddings a 400 saying why; a reply over the value cap refused;
- 400s naming the problem: no input, an empty list, an input neither text nor ids, dimensions, an unknown
  field, a token outside the vocabulary, an input longer than the context, a bad
  encoding_format; pi-launch --pooling with an unknown name.

Usage: embeddings_test.py BIN_DIR
"""

import base64
import os
import struct
import subprocess
import sys
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "reference"))
from llama_ref import LlamaRef  # noqa: E402
from served_process import check, finish  # noqa: E402
from http_api_test import call, launch  # noqa: E402

MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
TEXTS = ["In the beginning God created the heaven and the earth.",
         "And the evening and the morning were the first day."]
SERVED = ["-m", MODEL, "-t", "2", "-c", "256", "-ctk", "f32", "-ctv", "f32"]


def reference(ref, ids, pooling):
    ref.forward(ids)
    h = ref.hidden.astype(np.float64)
    v = {"mean": h.mean(axis=0), "last": h[-1], "cls": h[0]}[pooling]
    return v / np.linalg.norm(v)


def embed(a, body):
    st, _, r = call(a, "POST", "/v1/embeddings", body)
    return st, r


def error_of(r):
    return r.get("error", {}).get("message", "") if isinstance(r, dict) else repr(r)


def pooled(bin_dir, tmp, ref, pooling):
    args = SERVED + (["--pooling", pooling] if pooling != "mean" else [])
    s = launch(bin_dir, tmp, *args)
    a = s.http
    ids = call(a, "POST", "/tokenize", {"content": TEXTS[0], "add_special": True})[2]["tokens"]
    st, r = embed(a, {"input": TEXTS[0], "model": "demo-kjv-f16"})
    got = np.array(r["data"][0]["embedding"]) if st == 200 else np.zeros(1)
    want = reference(ref, ids, pooling)
    check(st == 200 and got.shape == want.shape and np.abs(got - want).max() < 1e-4
          and abs(np.linalg.norm(got) - 1) < 1e-5 and r["usage"]["prompt_tokens"] == len(ids),
          f"--pooling {pooling}: the reference's embedding "
          f"(max |diff| {np.abs(got - want).max() if got.shape == want.shape else 'shape'})")
    # A prompt of several -b chunks (pi-launch's -b is 64).
    long_text = " ".join(TEXTS * 7)
    ids = call(a, "POST", "/tokenize", {"content": long_text, "add_special": True})[2]["tokens"]
    st, long = embed(a, {"input": long_text})
    got = np.array(long["data"][0]["embedding"]) if st == 200 else np.zeros(1)
    want = reference(ref, ids, pooling)
    check(st == 200 and len(ids) > 128 and got.shape == want.shape
          and np.abs(got - want).max() < 1e-4,
          f"--pooling {pooling}, {len(ids)} tokens: the reference's embedding")
    return s, a, r


def inputs_and_formats(a, one):
    st, many = embed(a, {"input": TEXTS})
    st2, second = embed(a, {"input": TEXTS[1]})
    check(st == 200 and st2 == 200 and [d["index"] for d in many["data"]] == [0, 1]
          and many["data"][0]["embedding"] == one["data"][0]["embedding"]
          and many["data"][1]["embedding"] == second["data"][0]["embedding"]
          and many["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
          + second["usage"]["prompt_tokens"],
          "two inputs: the list in order, each as asked alone")
    ids = call(a, "POST", "/tokenize", {"content": TEXTS[0], "add_special": True})[2]["tokens"]
    st, by_ids = embed(a, {"input": ids})
    st2, by_lists = embed(a, {"input": [ids, ids]})
    check(st == 200 and st2 == 200 and by_ids["data"][0]["embedding"] == one["data"][0]["embedding"]
          and by_lists["data"][1]["embedding"] == one["data"][0]["embedding"],
          "token ids (one list, or lists) as input: as their text")
    # llama-server's mixes: text pieces tokenized alone (BOS before a first one).
    def tokens(text, special):
        return call(a, "POST", "/tokenize", {"content": text, "add_special": special})[2]["tokens"]
    st, mixed = embed(a, {"input": [12, 34, "And God said", 56]})
    st2, plain = embed(a, {"input": [12, 34] + tokens("And God said", False) + [56]})
    check(st == 200 and st2 == 200 and mixed["data"][0]["embedding"] == plain["data"][0]["embedding"]
          and mixed["usage"] == plain["usage"],
          "ids and text mixed in one input: as the ids of its pieces")
    st, both = embed(a, {"input": [TEXTS[0], ids, ["And God said", 56]]})
    st2, led = embed(a, {"input": tokens("And God said", True) + [56]})
    check(st == 200 and st2 == 200 and [d["index"] for d in both["data"]] == [0, 1, 2]
          and both["data"][0]["embedding"] == one["data"][0]["embedding"]
          and both["data"][1]["embedding"] == one["data"][0]["embedding"]
          and both["data"][2]["embedding"] == led["data"][0]["embedding"],
          "a list of a text, ids and a mix: each as alone (a mix led by text has BOS)")
    bos = tokens("", True)
    st, empty = embed(a, {"input": ""})
    st2, by_bos = embed(a, {"input": bos})
    check(st == 200 and st2 == 200 and len(bos) == 1
          and empty["data"][0]["embedding"] == by_bos["data"][0]["embedding"],
          "an empty text: the embedding of BOS alone (llama-server's answer)")
    st, b64 = embed(a, {"input": TEXTS[0], "encoding_format": "base64"})
    raw = base64.b64decode(b64["data"][0]["embedding"]) if st == 200 else b""
    floats = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    check(st == 200 and floats == [np.float32(x) for x in one["data"][0]["embedding"]],
          "base64: the same float32 values")


def refusals(a):
    for body, words in (({}, "input is required"),
                        ({"input": []}, "input is empty"),
                        ({"input": ["a", []]}, "input[1] is empty"),
                        ({"input": ["a", [1, {"b": 2}]]}, "input[1]: an input must be"),
                        ({"input": [1.5]}, "input: an input must be"),
                        ({"input": "a", "dimensions": 8}, "dimensions"),
                        ({"input": "a", "top_k": 8}, "unrecognized request argument: top_k"),
                        ({"input": [5, 99999]}, "outside the vocabulary"),
                        ({"input": "Amen. " * 300}, "too large for the context"),
                        ({"input": "a", "encoding_format": "hex"}, "encoding_format"),
                        ({"input": "a", "model": "other"}, "not served here")):
        st, r = embed(a, body)
        msg = error_of(r)
        want = 404 if "model" in body else 400
        check(st == want and words in msg, f"{want} naming {words!r} ({msg!r})")


def native(a, one):
    """llama-server's /embedding and /embeddings: its shape, the same vectors."""
    for path, body in (("/embeddings", {"input": [TEXTS[0], TEXTS[1]]}),
                       ("/embedding", {"content": [TEXTS[0], TEXTS[1]]})):
        st, _, r = call(a, "POST", path, body)
        check(st == 200 and isinstance(r, list) and [x["index"] for x in r] == [0, 1]
              and r[0]["embedding"] == [one["data"][0]["embedding"]]
              and len(r[1]["embedding"]) == 1,
              f"POST {path}: each input's vector as [[...]] under its index, /v1's values")
    st, _, r = call(a, "POST", "/embeddings", {"input": "a", "encoding_format": "base64"})
    check(st == 400 and "base64" in error_of(r), "native embeddings: floats only")


def per_token(bin_dir, tmp, ref):
    for extra in ([], ["-np", "2"]):
        s = launch(bin_dir, tmp, *SERVED, "--pooling", "none", *extra)
        a = s.http
        ids = call(a, "POST", "/tokenize", {"content": TEXTS[0], "add_special": True})[2]["tokens"]
        st, _, r = call(a, "POST", "/embeddings", {"content": TEXTS[0]})
        got = np.array(r[0]["embedding"]) if st == 200 else np.zeros(1)
        ref.forward(ids)
        want = ref.hidden.astype(np.float64)
        check(st == 200 and got.shape == want.shape and np.abs(got - want).max() < 1e-4
              and abs(np.linalg.norm(got[0]) - 1) > 1e-3,
              f"--pooling none {' '.join(extra)}: each token's state, unnormalized, the "
              f"reference's ({got.shape} against {want.shape})")
        st, r = embed(a, {"input": TEXTS[0]})
        check(st == 400 and "POST /embeddings" in error_of(r),
              f"--pooling none: /v1/embeddings refused, saying why ({error_of(r)!r})")
        st, _, r = call(a, "POST", "/embeddings", {"input": ["Amen. " * 60] * 600})
        check(st == 400 and "values in one reply" in error_of(r),
              f"--pooling none: a reply over the cap refused ({error_of(r)[:80]!r})")
        check(s.stop() == 0, "pi-launch --pooling none stops cleanly")


def beside_a_completion(bin_dir, tmp, one):
    s = launch(bin_dir, tmp, *SERVED, "-np", "2")
    a = s.http
    done = {}

    def complete():
        done["c"] = call(a, "POST", "/v1/completions",
                         {"prompt": "And God said", "max_tokens": 200, "temperature": 0})

    t = threading.Thread(target=complete)
    t.start()
    results = [embed(a, {"input": TEXTS[0]}) for _ in range(3)]
    t.join(timeout=120)
    check(all(st == 200 and r["data"][0]["embedding"] == one["data"][0]["embedding"]
              for st, r in results) and done.get("c", (0,))[0] == 200,
          "-np 2: embeddings beside a running completion equal -np 1's, bit for bit")
    check(s.stop() == 0, "pi-launch -np 2 stops cleanly")


def main():
    bin_dir = sys.argv[1]
    ref = LlamaRef(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        s, a, one = pooled(bin_dir, tmp, ref, "mean")
        inputs_and_formats(a, one)
        native(a, one)
        refusals(a)
        check(s.stop() == 0, "pi-launch stops cleanly")
        for pooling in ("last", "cls"):
            s, _, _ = pooled(bin_dir, tmp, ref, pooling)
            check(s.stop() == 0, "pi-launch stops cleanly")
        beside_a_completion(bin_dir, tmp, one)
        per_token(bin_dir, tmp, ref)
        bad = subprocess.run([os.path.join(bin_dir, "pi-launch"), "-m", MODEL, "--pooling", "max"],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode != 0 and "--pooling: unknown pooling 'max'" in bad.stderr,
              f"--pooling max: refused ({bad.stderr.strip()[-80:]!r})")
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""pi-pt-export: the original PowerInfer's torch files as one safetensors file, for
pi-convert (which calls it; C++ reads safetensors, not pickles).

    pi-pt-export --predictors DIR -o OUT.safetensors   # DIR/model_{i}.pt: fc1.weight, fc2.weight
    pi-pt-export --activations DIR -o OUT.safetensors  # DIR/activation_{i}.pt: [n_ff] counts

Layers are numbered by the digits in the file name, never by sorting names (PowerInfer's
export_split.py sorted activation_10 before activation_2). Files are loaded with
torch.load(weights_only=True): a pickle that would run code is refused, not executed.
Output tensors: blk.{i}.fc1.weight, blk.{i}.fc2.weight (F32) or blk.{i}.activation (F32, or
I64 for integer counts). Errors go to stderr with exit status 1.
"""

import argparse
import json
import os
import re
import struct
import sys


def fail(msg):
    print("pi-pt-export: " + msg, file=sys.stderr)
    sys.exit(1)


def numbered(dir, prefix):
    """{layer: path} of DIR/PREFIX{N}.pt."""
    if not os.path.isdir(dir):
        fail("%s: not a folder" % dir)
    files = {}
    for name in os.listdir(dir):
        m = re.fullmatch(re.escape(prefix) + r"(\d+)\.pt", name)
        if m:
            files[int(m.group(1))] = os.path.join(dir, name)
    if not files:
        fail("%s: no %sN.pt files" % (dir, prefix))
    missing = [i for i in range(max(files) + 1) if i not in files]
    if missing:
        fail("%s: %s%d.pt is missing (layers 0..%d expected)" % (dir, prefix, missing[0], max(files)))
    return files


def load(torch, path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a corrupt file, or a pickle that is not plain tensors
        fail("%s: cannot load as plain tensors: %s" % (path, str(e).splitlines()[0][:200]))


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(prog="pi-pt-export")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--predictors")
    g.add_argument("--activations")
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        fail("reading .pt files needs torch (Debian: apt-get install python3-torch)")
    out = {}
    if a.predictors:
        for i, path in sorted(numbered(a.predictors, "model_").items()):
            sd = load(torch, path)
            if not isinstance(sd, dict):
                fail("%s: not a state dict" % path)
            for part in ("fc1", "fc2"):
                keys = [k for k in sd if k == part + ".weight" or k.endswith("." + part + ".weight")]
                if len(keys) != 1:
                    fail("%s: expected one %s.weight, found %s" % (path, part, keys or "none"))
                t = sd[keys[0]]
                if not torch.is_tensor(t) or t.dim() != 2:
                    fail("%s: %s is not a matrix" % (path, keys[0]))
                t = t.detach().float().contiguous()
                out["blk.%d.%s.weight" % (i, part)] = ("F32", t.shape, t.numpy().tobytes())
    else:
        for i, path in sorted(numbered(a.activations, "activation_").items()):
            t = load(torch, path)
            if not torch.is_tensor(t) or t.dim() != 1:
                fail("%s: expected a 1-D tensor of per-neuron counts" % path)
            if t.is_floating_point():
                t = t.detach().float().contiguous()
                out["blk.%d.activation" % i] = ("F32", t.shape, t.numpy().tobytes())
            else:
                t = t.detach().long().contiguous()
                out["blk.%d.activation" % i] = ("I64", t.shape, t.numpy().tobytes())
    write_safetensors(a.o, out)


if __name__ == "__main__":
    main()

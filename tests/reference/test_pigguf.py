#!/usr/bin/env python3
"""Tests of tools/pigguf.py against independent references:
- Q8_0 / Q4_0: scalar transcriptions of ggml's reference quantizers (one weight at a time,
  exact double arithmetic, Python's own half-float packing), not pigguf's vectorized code;
- F16 / BF16: torch's conversions;
- the file layout: bytes assembled by hand from the GGUF spec (ecosystem.md section 1.1).

Run: /usr/bin/python3 tests/reference/test_pigguf.py
"""

import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import pigguf  # noqa: E402

F32 = np.float32


def ref_q8_0_block(x):
    """ggml quantize_row_q8_0_ref, one block, scalar."""
    amax = max(abs(float(v)) for v in x)
    d = F32(F32(amax) / F32(127))
    idv = F32(1) / d if d != 0 else F32(0)
    out = struct.pack("<e", float(d))
    for v in x:
        x0 = float(F32(F32(v) * idv))  # the float32 product, exactly, as a double
        q = math.floor(abs(x0) + 0.5) * (1 if x0 >= 0 else -1)  # roundf; exact in double
        out += struct.pack("<b", q)
    return out


def ref_q4_0_block(x):
    """ggml quantize_row_q4_0_ref, one block, scalar."""
    amax, vmax = 0.0, 0.0
    for v in x:
        if amax < abs(float(v)):
            amax, vmax = abs(float(v)), float(v)
    d = F32(F32(vmax) / F32(-8))
    idv = F32(1) / d if d != 0 else F32(0)
    q = []
    for v in x:
        t = float(F32(F32(F32(v) * idv) + F32(8.5)))
        q.append(min(15, int(t)))  # C's (int8_t) cast truncates toward zero
    out = struct.pack("<e", float(d))
    for j in range(16):
        out += struct.pack("<B", q[j] | (q[j + 16] << 4))
    return out


def ref_dequant_q8_0(b):
    d = struct.unpack("<e", b[:2])[0]
    return [d * q for q in struct.unpack("<32b", b[2:34])]


def ref_dequant_q4_0(b):
    d = struct.unpack("<e", b[:2])[0]
    lo = [((c & 15) - 8) * d for c in b[2:18]]
    hi = [((c >> 4) - 8) * d for c in b[2:18]]
    return lo + hi


def test_blocks(rng):
    """Blocks that exercise the corner cases: random, zeros, ties, exact halves, huge."""
    blocks = [rng.standard_normal(32).astype(F32) * s for s in (1e-3, 0.1, 1, 30, 6e4)]
    blocks.append(np.zeros(32, F32))
    b = np.zeros(32, F32)
    b[3] = 1.0
    blocks.append(b)  # one non-zero
    b = rng.standard_normal(32).astype(F32)
    b[5], b[9] = 4.0, -4.0  # equal |max| with opposite signs: the first one wins in q4_0
    b = np.clip(b, -3.9, 3.9)
    b[5], b[9] = -4.0, 4.0
    blocks.append(b.astype(F32))
    # amax 127 (d = 1): every x/d is an exact half, where roundf and rint differ
    blocks.append(np.array([127, -127] + [k + 0.5 for k in range(-15, 15)], F32))
    # vmax -8 (d = 1): x/d + 8.5 lands on integers and halves
    blocks.append(np.array([-8] + [k * 0.5 for k in range(-15, 16)], F32))
    blocks.append(np.linspace(-1, 1, 32).astype(F32))
    blocks.append((rng.integers(-8, 8, 32) * 0.25).astype(F32))
    return blocks


class QuantTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(7)

    def test_q8_0_matches_scalar_reference(self):
        for blk in test_blocks(self.rng):
            self.assertEqual(pigguf.quantize_q8_0(blk), ref_q8_0_block(blk), msg=str(blk))

    def test_q4_0_matches_scalar_reference(self):
        for blk in test_blocks(self.rng):
            self.assertEqual(pigguf.quantize_q4_0(blk), ref_q4_0_block(blk), msg=str(blk))

    def test_multi_block_rows(self):
        x = self.rng.standard_normal((3, 96)).astype(F32)
        blocks = x.reshape(-1, 32)
        self.assertEqual(pigguf.quantize_q8_0(x), b"".join(ref_q8_0_block(b) for b in blocks))
        self.assertEqual(pigguf.quantize_q4_0(x), b"".join(ref_q4_0_block(b) for b in blocks))

    def test_dequantize(self):
        x = self.rng.standard_normal(64).astype(F32)
        q8 = pigguf.quantize_q8_0(x)
        q4 = pigguf.quantize_q4_0(x)
        np.testing.assert_array_equal(
            pigguf.dequantize_q8_0(q8, 64),
            np.array(ref_dequant_q8_0(q8[:34]) + ref_dequant_q8_0(q8[34:]), F32))
        np.testing.assert_array_equal(
            pigguf.dequantize_q4_0(q4, 64),
            np.array(ref_dequant_q4_0(q4[:18]) + ref_dequant_q4_0(q4[18:]), F32))
        # Quantization error bounds of the formats: half a quantum (q8_0), one quantum (q4_0).
        amax = np.abs(x.reshape(2, 32)).max(axis=1).repeat(32)
        self.assertTrue(np.all(np.abs(pigguf.dequantize_q8_0(q8, 64) - x) <= amax / 127 * 0.51))
        self.assertTrue(np.all(np.abs(pigguf.dequantize_q4_0(q4, 64) - x) <= amax / 8 * 1.01))

    def test_q8_0_roundtrip_shape(self):
        x = self.rng.standard_normal((4, 64)).astype(F32)
        y = pigguf.q8_0_roundtrip(x)
        self.assertEqual(y.shape, x.shape)
        np.testing.assert_array_equal(y.reshape(-1), pigguf.dequantize_q8_0(
            pigguf.quantize_q8_0(x), x.size))

    def test_f16_bf16_match_torch(self):
        import torch
        x = np.concatenate([self.rng.standard_normal(1000).astype(F32) * 100,
                            np.array([0.0, -0.0, 1e-8, 65504, 65520, 1e30, -1e30, np.inf],
                                     F32)])
        self.assertEqual(pigguf.encode(x, "f16"),
                         torch.from_numpy(x).half().numpy().astype("<f2").tobytes())
        self.assertEqual(pigguf.encode(x, "bf16"),
                         torch.from_numpy(x).bfloat16().view(torch.int16).numpy()
                         .astype("<i2").tobytes())
        np.testing.assert_array_equal(pigguf.decode(pigguf.encode(x, "bf16"), "bf16", x.size),
                                      torch.from_numpy(x).bfloat16().float().numpy())


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


class LayoutTest(unittest.TestCase):
    def expected_file(self, magic):
        """A file with 2 keys and one f32 [2, 3] tensor, built by hand from the spec."""
        kv = (gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
              + gguf_string("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", 32)
              + gguf_string("x.ids") + struct.pack("<I", 9) + struct.pack("<IQ", 5, 3)
              + struct.pack("<3i", -1, 0, 7))
        info = (gguf_string("t") + struct.pack("<I", 2) + struct.pack("<2Q", 3, 2)
                + struct.pack("<IQ", 0, 0))
        head = magic + struct.pack("<IQQ", 3, 1, 3) + kv + info
        pad = b"\0" * ((-len(head)) % 32)
        data = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
        return head + pad + data + b"\0" * ((-len(data)) % 32)

    def test_writer_bytes(self):
        for sparse, magic in ((False, b"GGUF"), (True, b"PWRI")):
            w = pigguf.GGUFWriter("unused", "llama", sparse_magic=sparse)
            w.add_array("x.ids", [-1, 0, 7], "i32")
            w.add_tensor("t", np.array([[1, 2, 3], [4, 5, 6]], F32), "f32")
            self.assertEqual(w.to_bytes(), self.expected_file(magic))

    def test_reader_on_hand_built_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "a.gguf")
            with open(path, "wb") as f:
                f.write(self.expected_file(b"PWRI"))
            r = pigguf.GGUFReader(path)
            self.assertTrue(r.sparse_magic)
            self.assertEqual(r.metadata["general.architecture"], "llama")
            self.assertEqual(r.metadata["x.ids"], [-1, 0, 7])
            self.assertEqual(r.metadata_types["x.ids"], "array[i32]")
            t = r.tensors["t"]
            self.assertEqual((t.dtype, t.ne, t.shape), ("f32", [3, 2], (2, 3)))
            np.testing.assert_array_equal(t.to_f32(), [[1, 2, 3], [4, 5, 6]])

    def test_roundtrip_all_types(self):
        rng = np.random.default_rng(3)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "b.gguf")
            w = pigguf.GGUFWriter(path, "llama")
            w.add_string("s", "▁héllo")
            w.add_u32("u", 7)
            w.add_i32("i", -7)
            w.add_f32("f", 0.5)
            w.add_bool("b", True)
            w.add_u64("q", 1 << 40)
            w.add_array("tok", ["<s>", "▁a"], "string")
            w.add_array("sc", [0.5, -1.0], "f32")
            w.add_array("uu", [1, 2], "u32")
            arrays = {}
            for dt in ("f32", "f16", "bf16", "q8_0", "q4_0"):
                arrays[dt] = rng.standard_normal((3, 64)).astype(F32)
                w.add_tensor("w." + dt, arrays[dt], dt)
            w.add_tensor("v", np.arange(5, dtype=F32))
            w.write()
            r = pigguf.GGUFReader(path)
            self.assertEqual(r.metadata["s"], "▁héllo")
            self.assertEqual((r.metadata["u"], r.metadata["i"], r.metadata["f"],
                              r.metadata["b"], r.metadata["q"]), (7, -7, 0.5, True, 1 << 40))
            self.assertEqual(r.metadata["tok"], ["<s>", "▁a"])
            self.assertEqual(r.metadata["sc"], [0.5, -1.0])
            self.assertEqual(r.metadata["uu"], [1, 2])
            self.assertEqual(r.metadata["general.quantization_version"], 2)
            for dt, a in arrays.items():
                t = r.tensors["w." + dt]
                self.assertEqual(t.dtype, dt)
                self.assertEqual(t.ne, [64, 3])
                self.assertEqual(t.offset % 32, 0)
                np.testing.assert_array_equal(
                    t.to_f32(), pigguf.decode(pigguf.encode(a, dt), dt, a.size).reshape(3, 64))
            np.testing.assert_array_equal(r.tensors["v"].to_f32(), np.arange(5))

    def test_reader_rejects_bad_files(self):
        good = self.expected_file(b"GGUF")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.gguf")
            for bad in (b"GGUX" + good[4:], good[:40], good[:-40],
                        good[:4] + struct.pack("<I", 4) + good[8:]):
                with open(path, "wb") as f:
                    f.write(bad)
                with self.assertRaises(ValueError):
                    pigguf.GGUFReader(path)

    def test_writer_rejects_partial_blocks(self):
        w = pigguf.GGUFWriter("unused", "llama")
        with self.assertRaises(ValueError):
            w.add_tensor("x", np.zeros((2, 48), F32), "q8_0")


if __name__ == "__main__":
    unittest.main()

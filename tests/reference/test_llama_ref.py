#!/usr/bin/env python3
"""llama_ref.py (numpy, reading GGUF through pigguf) vs an independent torch implementation
(the demo model's, tools/train_demo_model.py), on small random models exported to GGUF:
every FFN form x tied/untied x GQA/MHA x ffn_down/ffn_down_t, with f32, f16 and q8_0 weights.

Run: /usr/bin/python3 tests/reference/test_llama_ref.py
"""

import math
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import train_demo_model as demo  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402


def random_model(seed, **kw):
    """A torch model with weights large enough that attention, RoPE and every FFN neuron
    matter (the training init, std 0.02, gives near-uniform logits: a weak test)."""
    import torch
    torch.manual_seed(seed)
    shape = dict(n_vocab=96, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, n_ctx=32)
    shape.update(kw)
    cfg = demo.Config(**shape)
    model = demo.build_model(cfg, use_mkldnn=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1] if "tok" not in name else 8))
            else:
                p.uniform_(0.5, 1.5)
    return model, cfg


TOKENS = [1, 17, 4, 95, 33, 33, 0, 60, 12, 7, 81, 2, 44, 90, 5, 63, 21, 30, 8, 77]


class LlamaRefTest(unittest.TestCase):
    def compare(self, wtype, activation, tied, n_head_kv, down_t, tol, seed):
        import torch
        model, cfg = random_model(seed, activation=activation, tied=tied, n_head_kv=n_head_kv)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            demo.export_gguf(model, cfg, path, "test", None, wtype, down_t=down_t)
            ref = LlamaRef(path)
            self.assertEqual(ref.activation, activation)
            self.assertEqual(ref.tied, tied)
            got = ref.forward(TOKENS)
        twin = demo.rounded_copy(model, cfg, wtype) if wtype != "f32" else model
        with torch.no_grad():
            want = twin(torch.tensor([TOKENS]))[0].numpy()
        self.assertEqual(got.shape, want.shape)
        # The test must be able to fail: logits vary across positions and vocab.
        self.assertGreater(float(np.std(want)), 0.3)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        self.assertLess(err, tol, "%s %s tied=%s kv=%d down_t=%s: rel err %.2e"
                        % (wtype, activation, tied, n_head_kv, down_t, err))
        return err

    def test_f32_all_forms(self):
        seed = 0
        for activation in ("silu", "relu", "drelu"):
            for tied in (False, True):
                for n_head_kv in (2, 4):
                    for down_t in (False, True):
                        seed += 1
                        self.compare("f32", activation, tied, n_head_kv, down_t, 2e-5, seed)

    def test_f16_and_bf16(self):
        self.compare("f16", "relu", False, 2, False, 2e-5, 101)
        self.compare("bf16", "silu", True, 4, True, 2e-5, 102)

    def test_q8_0_close(self):
        # The torch twin does not round activations to Q8_0 as the reference does, so this
        # is only a plausibility check of the quantized path (exact agreement is checked
        # against the C++ engine by check_forward.py).
        err = self.compare("q8_0", "drelu", False, 2, False, 3e-2, 103)
        self.assertGreater(err, 1e-6)  # the activation rounding did happen

    def test_rope_is_normal_not_neox(self):
        # Swapping the pair layout (NeoX halves) must break the agreement: guards against a
        # reference and a torch model that are wrong in the same way being "equal".
        import torch
        model, cfg = random_model(7, activation="relu")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            demo.export_gguf(model, cfg, path, "test", None, "f32")
            ref = LlamaRef(path)
            hd = ref.head_dim
            perm = np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])
            for L in ref.layers:
                for name, nh in (("attn_q", ref.n_head), ("attn_k", ref.n_head_kv)):
                    w = L[name].w.reshape(nh, hd, -1)
                    L[name].w = w[:, perm, :].reshape(nh * hd, -1)
            got = ref.forward(TOKENS)
        with torch.no_grad():
            want = model(torch.tensor([TOKENS]))[0].numpy()
        self.assertGreater(float(np.abs(got - want).max() / np.abs(want).max()), 1e-2)


if __name__ == "__main__":
    unittest.main()

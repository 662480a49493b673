#!/usr/bin/env python3
"""llama_ref.py (numpy, reading GGUF through pigguf) vs an independent torch implementation
(the demo model's, tools/train_demo_model.py), on small random models exported to GGUF:
every FFN form x tied/untied x GQA/MHA x ffn_down/ffn_down_t, with f32, f16 and q8_0 weights.
Falcon: a torch model in Hugging Face's formulation exported as llama.cpp converts it
(FalconRefTest).

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



# ---- falcon -------------------------------------------------------------------------------
# An independent torch Falcon in Hugging Face's formulation (modeling_falcon.py, written out
# here): the fused query_key_value in HF's per-group order (each KV group: its query heads,
# then one key and one value head), rotate_half RoPE, LayerNorm with biases, parallel
# attention and MLP, ln_attn/ln_mlp for the "new decoder architecture" (40B) or one
# input_layernorm (7B). Exported the way llama.cpp's convert_hf_to_gguf.py (FalconModel)
# does, including its "jploski" QKV rearrangement. GELU is ggml's tanh form (llama.cpp
# runs ggml_gelu where HF has the erf form), so the comparison is exact up to rounding.

def falcon_model(seed, n_vocab=96, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=160,
                 new_arch=True, activation="gelu"):
    import torch
    g = torch.Generator().manual_seed(seed)

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def vec(n, lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=g)

    hd = n_embd // n_head
    m = {"cfg": dict(n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                     n_head_kv=n_head_kv, n_ff=n_ff, new_arch=new_arch, activation=activation,
                     eps=1e-5, base=10000.0),
         "word_embeddings": torch.randn(n_vocab, n_embd, generator=g),
         "ln_f": (vec(n_embd, 0.5, 1.5), vec(n_embd, -0.2, 0.2)),
         "lm_head": mat(n_vocab, n_embd), "layers": []}
    for _ in range(n_layer):
        L = {"query_key_value": mat((n_head + 2 * n_head_kv) * hd, n_embd),
             "dense": mat(n_embd, n_head * hd),
             "dense_h_to_4h": mat(n_ff, n_embd), "dense_4h_to_h": mat(n_embd, n_ff)}
        if new_arch:
            L["ln_attn"] = (vec(n_embd, 0.5, 1.5), vec(n_embd, -0.2, 0.2))
            L["ln_mlp"] = (vec(n_embd, 0.5, 1.5), vec(n_embd, -0.2, 0.2))
        else:
            L["input_layernorm"] = (vec(n_embd, 0.5, 1.5), vec(n_embd, -0.2, 0.2))
        m["layers"].append(L)
    return m


def falcon_forward(m, tokens):
    import torch
    import torch.nn.functional as F
    c = m["cfg"]
    nh, nkv, d = c["n_head"], c["n_head_kv"], c["n_embd"]
    hd = d // nh
    T = len(tokens)
    h = m["word_embeddings"][torch.tensor(tokens)].double()
    inv = 1.0 / (c["base"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    def ln(x, p):
        return F.layer_norm(x, (d,), p[0].double(), p[1].double(), c["eps"])

    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), diagonal=1)
    for L in m["layers"]:
        a_in = ln(h, L["ln_attn"] if c["new_arch"] else L["input_layernorm"])
        m_in = ln(h, L["ln_mlp"]) if c["new_arch"] else a_in
        qkv = a_in @ L["query_key_value"].double().T
        # HF _split_heads: per KV group, its query heads then one key and one value head.
        qkv = qkv.view(T, nkv, nh // nkv + 2, hd)
        q = qkv[:, :, :-2].reshape(T, nh, hd)
        k = qkv[:, :, -2]
        v = qkv[:, :, -1]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = torch.empty(T, nh, hd, dtype=torch.float64)
        for j in range(nh):
            g = j // (nh // nkv)
            s = (q[:, j] @ k[:, g].T) / math.sqrt(hd) + mask
            att[:, j] = torch.softmax(s, dim=-1) @ v[:, g]
        attn_out = att.reshape(T, nh * hd) @ L["dense"].double().T
        u = m_in @ L["dense_h_to_4h"].double().T
        a = torch.relu(u) if c["activation"] == "relu" else F.gelu(u, approximate="tanh")
        h = h + attn_out + a @ L["dense_4h_to_h"].double().T
    return (ln(h, m["ln_f"]) @ m["lm_head"].double().T).numpy()


def export_falcon(m, path, tied=False, down_t=False, activation_key=True, rearrange=True):
    """llama.cpp's conversion. rearrange=False skips the jploski QKV reordering (a file
    in HF's order: a negative control)."""
    import pigguf
    import torch
    c = m["cfg"]
    nh, nkv, d = c["n_head"], c["n_head_kv"], c["n_embd"]
    hd = d // nh
    w = pigguf.GGUFWriter(path, "falcon", sparse_magic=down_t)
    w.add_u32("falcon.context_length", 64)
    w.add_u32("falcon.embedding_length", d)
    w.add_u32("falcon.feed_forward_length", c["n_ff"])
    w.add_u32("falcon.block_count", c["n_layer"])
    w.add_u32("falcon.attention.head_count", nh)
    w.add_u32("falcon.attention.head_count_kv", nkv)
    w.add_f32("falcon.attention.layer_norm_epsilon", c["eps"])
    w.add_string("falcon.tensor_data_layout", "jploski")
    if activation_key:
        w.add_string("pi.ffn_activation", c["activation"])

    def f(x):
        return x.detach().float().numpy()

    w.add_tensor("token_embd.weight", f(m["word_embeddings"]))
    for i, L in enumerate(m["layers"]):
        p = "blk.%d." % i
        first = L["ln_attn"] if c["new_arch"] else L["input_layernorm"]
        w.add_tensor(p + "attn_norm.weight", f(first[0]))
        w.add_tensor(p + "attn_norm.bias", f(first[1]))
        if c["new_arch"]:
            w.add_tensor(p + "attn_norm_2.weight", f(L["ln_mlp"][0]))
            w.add_tensor(p + "attn_norm_2.bias", f(L["ln_mlp"][1]))
        qkv = L["query_key_value"]
        if rearrange:  # convert_hf_to_gguf.py, FalconModel.modify_tensors
            qkv = qkv.view(nkv, nh // nkv + 2, hd, hd * nh)
            q = qkv[:, :-2].reshape(nh * hd, hd * nh)
            k = qkv[:, [-2]].reshape(nkv * hd, hd * nh)
            v = qkv[:, [-1]].reshape(nkv * hd, hd * nh)
            qkv = torch.cat((q, k, v))
        w.add_tensor(p + "attn_qkv.weight", f(qkv))
        w.add_tensor(p + "attn_output.weight", f(L["dense"]))
        w.add_tensor(p + "ffn_up.weight", f(L["dense_h_to_4h"]))
        if down_t:
            w.add_tensor(p + "ffn_down_t.weight", f(L["dense_4h_to_h"]).T.copy())
        else:
            w.add_tensor(p + "ffn_down.weight", f(L["dense_4h_to_h"]))
    w.add_tensor("output_norm.weight", f(m["ln_f"][0]))
    w.add_tensor("output_norm.bias", f(m["ln_f"][1]))
    if not tied:
        w.add_tensor("output.weight", f(m["lm_head"]))
    w.write()


class FalconRefTest(unittest.TestCase):
    def compare(self, m, tol=2e-5, **export):
        if export.get("tied"):
            m["lm_head"] = m["word_embeddings"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.gguf")
            export_falcon(m, path, **export)
            ref = LlamaRef(path)
            self.assertTrue(ref.falcon)
            self.assertEqual(ref.activation, m["cfg"]["activation"])
            got = ref.forward(TOKENS[:14])
        want = falcon_forward(m, [t % m["cfg"]["n_vocab"] for t in TOKENS[:14]])
        self.assertGreater(float(np.std(want)), 0.3)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        if tol is not None:
            self.assertLess(err, tol, "%s %s: rel err %.2e" % (m["cfg"], export, err))
        return err

    def test_forms(self):
        seed = 200
        for new_arch, n_head_kv in ((True, 2), (True, 4), (False, 1)):
            for activation in ("gelu", "relu"):
                for tied in (False, True):
                    seed += 1
                    m = falcon_model(seed, n_head_kv=n_head_kv, new_arch=new_arch,
                                     activation=activation)
                    self.compare(m, tied=tied, down_t=activation == "relu" and not tied)

    def test_pwri_without_key_is_relu(self):
        m = falcon_model(300, activation="relu")
        self.compare(m, down_t=True, activation_key=False)

    def test_negative_controls(self):
        # HF's QKV order without the rearrangement (only differs with several KV groups),
        # and the activation the file does not say: both must break the agreement.
        m = falcon_model(301, n_head_kv=2)
        self.assertGreater(self.compare(m, tol=None, rearrange=False), 1e-2)
        m = falcon_model(302, activation="relu")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.gguf")
            export_falcon(m, path, activation_key=False)  # GGUF magic, no key: gelu
            got = LlamaRef(path).forward(TOKENS[:14])
        want = falcon_forward(m, TOKENS[:14])
        self.assertGreater(float(np.abs(got - want).max() / np.abs(want).max()), 1e-2)


if __name__ == "__main__":
    unittest.main()

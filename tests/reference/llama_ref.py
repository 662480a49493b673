#!/usr/bin/env python3
"""An independent numpy forward pass for llama-family and falcon GGUF files (the C++ engine's
referee).

Reads the file with tools/pigguf.py (not the C++ reader) and computes float32 logits for a
token sequence, all positions at once with a causal mask:

  h = token_embd[tokens]
  per layer:  x = rmsnorm(h) * attn_norm;  q,k,v = Wq x, Wk x, Wv x
              RoPE "normal" (adjacent pairs (2i, 2i+1), first rope.dimension_count dims of
              each head, angle pos * freq_base^(-2i/n_rot)) on q and k; with llama.cpp's
              scaling: pos / rope.scaling.factor (rope.scaling.type linear or absent; none:
              unscaled), the angle of pair i divided by rope_freqs.weight[i] (Llama 3.1)
              GQA: query head j reads kv head j // (n_head / n_head_kv); causal softmax
              h += Wo attn
              x = rmsnorm(h) * ffn_norm
              silu:  a = silu(Wg x) * (Wu x)
              relu:  a = relu(Wg x) * (Wu x)
              drelu: a = relu(Wg x) * relu(Wu x)
              h += Wdown a     (ffn_down [n_ff, n_embd]; or ffn_down_t [n_embd, n_ff], the
                                PowerInfer transposed copy whose row i is neuron i)
  logits = output (or token_embd when output.weight is absent) @ (rmsnorm(h) * output_norm)

qwen2 (llama.cpp's): the llama layers with q,k,v = Wq x + bq, Wk x + bk, Wv x + bv
(attn_q/k/v.bias) and RoPE NeoX (pairs (i, i + n_rot/2)). qwen3: no biases; each head of q
and k RMS-normed over head_dim (attn_q_norm / attn_k_norm, eps the model's) before RoPE NeoX.

gemma2 (llm_build_gemma2): h = token_embd[tokens] * sqrt(n_embd); h += rmsnorm(Wo attn) *
post_attention_norm, h += rmsnorm(Wdown a) * post_ffw_norm; a = gelu_tanh(Wg x) * (Wu x);
scores (q.k / sqrt(head_dim); 27B, 46 layers: / sqrt(n_embd / n_head)) capped as
cap * tanh(s / cap) with attn_logit_softcapping (default 50), the logits likewise with
final_logit_softcapping (default 30); layers 0, 2, 4, ... attend only to keys j > i - window
(attention.sliding_window, default 4096); RoPE NeoX. gemma3: the same with qwen3's head norms,
no caps (final_logit_softcapping if the file has one), layers il % 6 < 5 slide and rotate with
base 10000 unscaled (27B: 62 layers). phi3: llama's layers with attn_qkv split [q | k | v] and
ffn_up split [gate rows | up rows], RoPE NeoX, every layer sliding (attention.sliding_window).

Falcon (llama.cpp's llm_build_falcon), per layer, from the layer input h:
              x = layernorm(h) * attn_norm + attn_norm.bias       (ggml_norm, then w, b)
              qkv = attn_qkv x, split [q: n_embd | k: kv_dim | v: kv_dim] ("jploski")
              RoPE NeoX (pairs (i, i + n_rot/2)) on q and k; attention as above
              x2 = layernorm(h) * attn_norm_2 + attn_norm_2.bias  (40B; else x2 = x)
              relu: a = relu(Wup x2);  gelu: a = gelu_tanh(Wup x2)   (no gate)
              h = h + Wo attn + Wdown a                          (parallel residual)
  logits = output @ (layernorm(h) * output_norm + output_norm.bias); eps from
  falcon.attention.layer_norm_epsilon; n_ff from feed_forward_length, else ffn_up's rows.

Activation: "pi.ffn_activation" if present; else PWRI magic -> relu (bamboo -> drelu);
else arch default (bamboo -> drelu, falcon -> gelu, others silu).

ggml semantics for quantized weights: when a weight is Q8_0 or Q4_0, the activation vector
it multiplies is first rounded through Q8_0 blocks (ggml quantizes src1 to the weight's
vec_dot type, Q8_0 for both). The engine does the same for every other block format
(Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), where ggml would use Q8_1 or Q8_K. ffn_down_t products are not activation-quantized (the engine
dequantizes the weight row and accumulates f32 activation * weight).

Usage:  llama_ref.py MODEL.gguf 1,5,9,...  [--out logits.f32]
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import pigguf  # noqa: E402

QUANTIZED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K")


def kv_cache_round(x, cache_type):
    """x [T, heads, head_dim] as a KV cache of row type cache_type (f32, f16, q8_0) holds it:
    f16 by IEEE rounding, q8_0 per 32-element block of each head's row."""
    if cache_type == "f32":
        return x
    if cache_type == "f16":
        return x.astype(np.float16).astype(np.float32)
    if cache_type == "q8_0":
        return pigguf.q8_0_roundtrip(x.reshape(-1, x.shape[-1])).reshape(x.shape)
    raise ValueError("unknown KV cache type %s" % cache_type)


def q8_0_boundary_distance(x):
    """Per row of x [n, k]: how close its Q8_0 rounding comes to going the other way.

    Returns (q, s): q = min over elements of the distance of x/d to a rounding boundary
    (|frac| vs 0.5), in quanta; s = min over blocks of the relative distance of the f32
    scale d to the midpoint between two f16 values (where its f16 rounding flips). Another
    implementation whose x differs by a few ulps may round such a value the other way: a
    legitimate one-quantum (or one-f16-ulp-of-scale) difference."""
    b = np.asarray(x, dtype=np.float32).reshape(-1, pigguf.QK)
    d = np.abs(b).max(axis=1) / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = b * idv[:, None]
    q = np.abs(np.abs(v - np.trunc(v)) - 0.5).reshape(x.shape[0], -1).min(axis=1)
    h = d.astype(np.float16)
    other = np.nextafter(h, np.where(d > h, np.float16(np.inf), np.float16(-np.inf)))
    mid = (h.astype(np.float64) + other.astype(np.float64)) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(d > 0, np.abs(d - mid) / d, np.inf)
    return q, rel.reshape(x.shape[0], -1).min(axis=1)


class Weight:
    """A matrix as float32 numpy [rows, cols] plus whether products quantize activations."""

    def __init__(self, tensor, owner=None):
        self.name = tensor.name
        self.dtype = tensor.dtype
        self.w = tensor.to_f32().astype(np.float32)
        self.quant_act = tensor.dtype in QUANTIZED
        self.owner = owner

    def row_range(self, a, b):
        """Rows [a, b) as a Weight of their own (a fused matrix's part)."""
        part = object.__new__(Weight)
        part.__dict__.update(self.__dict__)
        part.w = self.w[a:b]
        return part

    def matmul(self, x):
        """x: [n_tokens, cols] -> [n_tokens, rows]."""
        if self.quant_act:
            if self.owner is not None and self.owner.q8_boundary is not None:
                self.owner.note_q8_boundary(x)
            x = pigguf.q8_0_roundtrip(x)
        # float64 accumulation: the reference should be closer to exact than either side.
        return (x.astype(np.float64) @ self.w.T.astype(np.float64)).astype(np.float32)


class LlamaRef:
    def __init__(self, path, cache_type_k="f32", cache_type_v="f32"):
        self.cache_type_k, self.cache_type_v = cache_type_k, cache_type_v
        r = pigguf.GGUFReader(path)
        self.reader = r
        md = r.metadata
        arch = md["general.architecture"]
        self.arch = arch

        def get(key, default=None):
            v = md.get("%s.%s" % (arch, key), default)
            if v is None:
                raise KeyError("missing metadata %s.%s" % (arch, key))
            return v

        self.n_embd = int(get("embedding_length"))
        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.n_head_kv = int(get("attention.head_count_kv", self.n_head))
        self.head_dim = int(get("attention.key_length", self.n_embd // self.n_head))
        self.falcon = arch == "falcon"
        # qwen2: llama's layers plus Q/K/V biases, rotated NeoX-style (pairs (i, i + n_rot/2)).
        self.neox = arch not in ("llama", "bamboo")
        self.gemma = arch in ("gemma2", "gemma3")
        self.embd_scale = math.sqrt(self.n_embd) if self.gemma else 1.0
        self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        if self.gemma and self.n_layer == (46 if arch == "gemma2" else 62):
            self.attn_scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        self.attn_softcap = float(md.get(arch + ".attn_logit_softcapping", 50.0)) \
            if arch == "gemma2" else 0.0
        self.final_softcap = float(md.get(arch + ".final_logit_softcapping",
                                          30.0 if arch == "gemma2" else 0.0))
        window_default = {"gemma2": 4096}.get(arch, 0)
        self.window = int(md.get(arch + ".attention.sliding_window", window_default))
        if arch == "gemma3" and self.window == 0:
            raise KeyError("gemma3 without attention.sliding_window")
        self.swa_pattern = {"gemma2": 2, "gemma3": 6}.get(arch, 0)
        self.local_base = 10000.0 if arch == "gemma3" else None
        if self.falcon and "falcon.feed_forward_length" not in md:
            self.n_ff = int(r.tensors["blk.0.ffn_up.weight"].ne[1])
        else:
            self.n_ff = int(get("feed_forward_length"))
        self.n_rot = int(get("rope.dimension_count", self.head_dim))
        self.freq_base = float(get("rope.freq_base", 10000.0))
        scaling = md.get(arch + ".rope.scaling.type", "linear")
        if scaling not in ("none", "linear"):
            raise ValueError("rope.scaling.type %r" % scaling)
        factor = float(md.get(arch + ".rope.scaling.factor", 0.0) or
                       md.get(arch + ".rope.scale_linear", 0.0))
        self.pos_scale = 1.0 / factor if factor and scaling == "linear" else 1.0
        self.rope_factors = (r.tensors["rope_freqs.weight"].to_f32().astype(np.float64)
                             if "rope_freqs.weight" in r.tensors else None)
        self.eps = float(get("attention.layer_norm_epsilon" if self.falcon
                             else "attention.layer_norm_rms_epsilon", 1e-5))
        if self.falcon and md.get("falcon.tensor_data_layout", "jploski") != "jploski":
            raise ValueError("falcon.tensor_data_layout must be jploski")

        act = md.get("pi.ffn_activation")
        if act is None:
            if arch == "bamboo":
                act = "drelu"
            elif r.sparse_magic:
                act = "relu"
            elif self.falcon or self.gemma:
                act = "gelu"
            else:
                act = "silu"
        if act not in (("relu", "gelu") if self.falcon else ("silu", "relu", "drelu", "gelu")):
            raise ValueError("pi.ffn_activation %r is not valid for arch %s" % (act, arch))
        self.activation = act

        t = r.tensors
        self.token_embd = t["token_embd.weight"].to_f32().astype(np.float32)
        self.n_vocab = self.token_embd.shape[0]
        self.output_norm = t["output_norm.weight"].to_f32().astype(np.float32)
        self.output_norm_b = (t["output_norm.bias"].to_f32().astype(np.float32)
                              if self.falcon else None)
        self.tied = "output.weight" not in t
        # Per position, after forward(): see q8_0_boundary_distance.
        self.q8_boundary = None
        self.q8_scale_boundary = None
        self.output = Weight(t["token_embd.weight"] if self.tied else t["output.weight"], self)
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            if self.falcon:
                L = {"attn_norm": t[p + "attn_norm.weight"].to_f32(),
                     "attn_norm_b": t[p + "attn_norm.bias"].to_f32()}
                if p + "attn_norm_2.weight" in t:
                    L["attn_norm_2"] = t[p + "attn_norm_2.weight"].to_f32()
                    L["attn_norm_2_b"] = t[p + "attn_norm_2.bias"].to_f32()
                qkv = Weight(t[p + "attn_qkv.weight"], self)
                qd, kvd = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
                if qkv.w.shape != (qd + 2 * kvd, self.n_embd):
                    raise ValueError("attn_qkv has shape %s" % (qkv.w.shape,))
                L["attn_q"] = qkv.row_range(0, qd)
                L["attn_k"] = qkv.row_range(qd, qd + kvd)
                L["attn_v"] = qkv.row_range(qd + kvd, qd + 2 * kvd)
                for name in ("attn_output", "ffn_up"):
                    L[name] = Weight(t[p + name + ".weight"], self)
            else:
                L = {
                    "attn_norm": t[p + "attn_norm.weight"].to_f32(),
                    "ffn_norm": t[p + "ffn_norm.weight"].to_f32(),
                }
                if self.gemma:
                    L["attn_post_norm"] = t[p + "post_attention_norm.weight"].to_f32()
                    L["ffn_post_norm"] = t[p + "post_ffw_norm.weight"].to_f32()
                if arch == "phi3":  # fused: [q | k | v] rows, [gate | up] rows
                    qkv = Weight(t[p + "attn_qkv.weight"], self)
                    qd, kvd = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
                    L["attn_q"] = qkv.row_range(0, qd)
                    L["attn_k"] = qkv.row_range(qd, qd + kvd)
                    L["attn_v"] = qkv.row_range(qd + kvd, qd + 2 * kvd)
                    gate_up = Weight(t[p + "ffn_up.weight"], self)
                    if gate_up.w.shape != (2 * self.n_ff, self.n_embd):
                        raise ValueError("phi3 ffn_up has shape %s" % (gate_up.w.shape,))
                    L["ffn_gate"] = gate_up.row_range(0, self.n_ff)
                    L["ffn_up"] = gate_up.row_range(self.n_ff, 2 * self.n_ff)
                    L["attn_output"] = Weight(t[p + "attn_output.weight"], self)
                else:
                    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                 "ffn_up"):
                        L[name] = Weight(t[p + name + ".weight"], self)
                for name in ("attn_q", "attn_k", "attn_v"):
                    if p + name + ".bias" in t:
                        L[name + "_b"] = t[p + name + ".bias"].to_f32().astype(np.float32)
                    elif arch == "qwen2":
                        raise KeyError("qwen2 without %s%s.bias" % (p, name))
                if arch in ("qwen3", "gemma3"):  # per-head RMSNorm of Q and K, [head_dim]
                    L["q_norm"] = t[p + "attn_q_norm.weight"].to_f32().astype(np.float32)
                    L["k_norm"] = t[p + "attn_k_norm.weight"].to_f32().astype(np.float32)
            if p + "ffn_down.weight" in t:
                L["ffn_down"] = Weight(t[p + "ffn_down.weight"], self)
            else:
                # [n_embd, n_ff] in ggml order = numpy [n_ff, n_embd]: row i = neuron i.
                L["ffn_down_t"] = t[p + "ffn_down_t.weight"].to_f32().astype(np.float32)
            self.layers.append(L)

    def rmsnorm(self, x, w):
        x64 = x.astype(np.float64)
        scale = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + self.eps)
        return (x64 * scale * w.astype(np.float64)).astype(np.float32)

    def layernorm(self, x, w, b):
        """ggml_norm (x - mean) / sqrt(var + eps), then * w + b (falcon)."""
        x64 = x.astype(np.float64)
        c = x64 - np.mean(x64, axis=-1, keepdims=True)
        scale = 1.0 / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + self.eps)
        return (c * scale * w.astype(np.float64) + b.astype(np.float64)).astype(np.float32)

    def sliding(self, il):
        """Whether layer il attends to a sliding window (llama.cpp's pattern rule)."""
        if self.window <= 0:
            return False
        return self.swa_pattern == 0 or il % self.swa_pattern < self.swa_pattern - 1

    def rope(self, x, positions, local=False):
        """x: [n_tokens, n_heads, head_dim]; rotates pairs (2i, 2i+1) for 2i < n_rot
        (llama's "normal" RoPE), or for falcon pairs (i, i + n_rot/2) for i < n_rot/2 (NeoX),
        pair i by angle pos * freq_base^(-2i/n_rot) in both. local: gemma3's sliding layers,
        base 10000, no scaling."""
        out = x.astype(np.float64).copy()
        half = self.n_rot // 2
        base = self.local_base if local else self.freq_base
        inv = base ** (-2.0 * np.arange(half) / self.n_rot)
        if self.rope_factors is not None and not local:
            inv = inv / self.rope_factors
        pos_scale = 1.0 if local else self.pos_scale
        ang = (positions[:, None].astype(np.float64) * pos_scale) * inv[None, :]  # [T, half]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        if self.neox:
            first, second = slice(0, half), slice(half, 2 * half)
        else:
            first, second = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
        x0 = out[:, :, first].copy()
        x1 = out[:, :, second].copy()
        out[:, :, first] = x0 * cos - x1 * sin
        out[:, :, second] = x0 * sin + x1 * cos
        return out.astype(np.float32)

    def ffn_activations(self, L, x, threshold=None, x_gate=None):
        """The FFN's hidden activations a [n_tokens, n_ff] for normalized input x. With a
        threshold (--sparse cats), a neuron whose activated gate has |act(gate x)| <= it is
        left out (0); self.gate_margin[t] records, per position, how near a neuron came to
        it (relative), where the two sides' rounding might put it on either side. x_gate:
        what the gate reads instead of x (--sparse teal's thresholded input)."""
        if self.falcon:
            u = L["ffn_up"].matmul(x).astype(np.float64)
            if self.activation == "relu":
                a = np.maximum(u, 0).astype(np.float32)
            else:
                k = math.sqrt(2.0 / math.pi)  # ggml_gelu's tanh form
                a = (0.5 * u * (1.0 + np.tanh(k * u * (1.0 + 0.044715 * u * u)))).astype(
                    np.float32)
            return self.cut_below(a, a, threshold)
        g = L["ffn_gate"].matmul(x if x_gate is None else x_gate)
        u = L["ffn_up"].matmul(x)
        if self.activation == "gelu":  # GeGLU, ggml_gelu's tanh form
            g64 = g.astype(np.float64)
            k = math.sqrt(2.0 / math.pi)
            g = (0.5 * g64 * (1.0 + np.tanh(k * g64 * (1.0 + 0.044715 * g64 * g64)))).astype(
                np.float32)
            return self.cut_below(g, (g * u).astype(np.float32), threshold)
        if self.activation == "silu":
            with np.errstate(over="ignore"):
                g = (g / (1.0 + np.exp(-g.astype(np.float64)))).astype(np.float32)
            return self.cut_below(g, (g * u).astype(np.float32), threshold)
        g = np.maximum(g, 0)
        if self.activation == "relu":
            return self.cut_below(g, (g * u).astype(np.float32), threshold)
        return self.cut_below(g, (g * np.maximum(u, 0)).astype(np.float32), threshold)

    def cut_below(self, gate, a, threshold):
        """a with the neurons whose |gate| <= threshold zeroed (None: a as it is)."""
        if threshold is None:
            return a
        mag = np.abs(gate.astype(np.float64))
        margin = np.abs(mag - threshold) / max(float(threshold), 1e-30)
        np.minimum(self.gate_margin, margin.min(axis=1), out=self.gate_margin)
        return np.where(mag > threshold, a, np.float32(0)).astype(np.float32)

    def note_q8_boundary(self, x):
        """Records, per position (row of x [T, k]), how near x's Q8_0 rounding is to a
        boundary (q8_0_boundary_distance)."""
        q, sc = q8_0_boundary_distance(x)
        np.minimum(self.q8_boundary, q, out=self.q8_boundary)
        np.minimum(self.q8_scale_boundary, sc, out=self.q8_scale_boundary)

    def cut_input(self, x, threshold):
        """--sparse teal: x with the entries of |x| <= threshold zeroed (None: x as it is);
        gate_margin records how near an entry came to the threshold."""
        if threshold is None:
            return x
        return self.cut_below(x, x, float(threshold))

    def forward(self, tokens, return_ffn=False, gate_thresholds=None, input_thresholds=None):
        """Logits [n_tokens, n_vocab] (float32) for tokens at positions 0..n-1. With
        return_ffn, also the per-layer FFN activations (list of [n_tokens, n_ff]). With
        gate_thresholds (one per layer), every position's FFN as --sparse cats computes a
        decoded token's: only neurons with |act(gate x)| above the layer's threshold. With
        input_thresholds too (three lists, one value per layer: the attention's input, its
        heads' output, the FFN's input), as --sparse teal: q, k and v read only the entries
        of the normed input above the first, o only those of the heads' output above the
        second, the gate only those of the FFN's normed input above the third (up reads it
        whole)."""
        teal = input_thresholds is not None
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        T = len(tokens)
        pos = np.arange(T)
        # Closest approach, per position, of an activation to a Q8_0 rounding boundary
        # (inf when no quantized product); a flip there changes this and later positions.
        self.q8_boundary = np.full(T, np.inf)
        self.q8_scale_boundary = np.full(T, np.inf)
        self.gate_margin = np.full(T, np.inf)
        h = (self.token_embd[tokens].astype(np.float64) * self.embd_scale).astype(np.float32)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_head_kv
        group = nh // nkv
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        ffn_acts = []
        for il, L in enumerate(self.layers):
            if self.falcon:
                x = self.layernorm(h, L["attn_norm"], L["attn_norm_b"])
            else:
                x = self.rmsnorm(h, L["attn_norm"])
            xa = self.cut_input(x, input_thresholds[0][il] if teal else None)
            q, k, v = (L[n].matmul(xa) + L.get(n + "_b", np.float32(0))
                       for n in ("attn_q", "attn_k", "attn_v"))
            q, k = q.reshape(T, nh, hd), k.reshape(T, nkv, hd)
            if "q_norm" in L:  # qwen3: each head RMS-normed over head_dim, before RoPE
                q, k = self.rmsnorm(q, L["q_norm"]), self.rmsnorm(k, L["k_norm"])
            local = self.local_base is not None and self.sliding(il)
            q = self.rope(q, pos, local)
            k = self.rope(k, pos, local)
            layer_mask = mask
            if self.sliding(il):  # key j is seen from i only when i - j < window
                layer_mask = np.where(pos[:, None] - pos[None, :] >= self.window, -np.inf, mask)
            v = v.reshape(T, nkv, hd)
            # The KV cache stores K and V rounded to its row types; a Q8_0 key cache
            # is read by a Q8_0 dot product, so q is rounded to Q8_0 too.
            # Values rounded to Q8_0 here are as near a rounding boundary as any
            # activation a quantized product reads (q8_boundary).
            for x_q8, type_q8 in ((k, self.cache_type_k), (v, self.cache_type_v),
                                  (q, self.cache_type_k)):
                if type_q8 == "q8_0":
                    self.note_q8_boundary(x_q8.reshape(T, -1))
            k = kv_cache_round(k, self.cache_type_k)
            v = kv_cache_round(v, self.cache_type_v)
            if self.cache_type_k == "q8_0":
                q = kv_cache_round(q, "q8_0")
            att = np.empty((T, nh, hd), np.float32)
            for j in range(nh):
                kv = j // group
                s = (q[:, j, :].astype(np.float64) @ k[:, kv, :].T.astype(np.float64))
                s = s * self.attn_scale
                if self.attn_softcap > 0:
                    s = self.attn_softcap * np.tanh(s / self.attn_softcap)
                s = s + layer_mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, j, :] = (s @ v[:, kv, :].astype(np.float64)).astype(np.float32)
            att = self.cut_input(att.reshape(T, nh * hd), input_thresholds[1][il] if teal else None)
            attn_out = L["attn_output"].matmul(att)

            if self.falcon:
                # Parallel residual: the FFN reads the layer input too.
                if "attn_norm_2" in L:
                    x = self.layernorm(h, L["attn_norm_2"], L["attn_norm_2_b"])
            else:
                if "attn_post_norm" in L:
                    attn_out = self.rmsnorm(attn_out, L["attn_post_norm"])
                h = h + attn_out
                x = self.rmsnorm(h, L["ffn_norm"])
            a = self.ffn_activations(L, x, None if gate_thresholds is None
                                     else float(gate_thresholds[il]),
                                     self.cut_input(x, input_thresholds[2][il]) if teal else None)
            if return_ffn:
                ffn_acts.append(a)
            if "ffn_down" in L:
                y = L["ffn_down"].matmul(a)
            else:
                y = (a.astype(np.float64) @ L["ffn_down_t"].astype(np.float64)).astype(np.float32)
            if "ffn_post_norm" in L:
                y = self.rmsnorm(y, L["ffn_post_norm"])
            h = (h + attn_out + y) if self.falcon else (h + y)
        if self.falcon:
            x = self.layernorm(h, self.output_norm, self.output_norm_b)
        else:
            x = self.rmsnorm(h, self.output_norm)
        self.hidden = x  # the final-normed hidden states (what the head reads: embeddings)
        logits = self.output.matmul(x)
        if self.final_softcap > 0:
            logits = (self.final_softcap * np.tanh(logits.astype(np.float64) / self.final_softcap)
                      ).astype(np.float32)
        return (logits, ffn_acts) if return_ffn else logits


def main():
    ap = argparse.ArgumentParser(description="numpy reference logits for a llama GGUF")
    ap.add_argument("model")
    ap.add_argument("tokens", help="comma-separated token ids")
    ap.add_argument("--out", help="write float32 [n_tokens, n_vocab] row-major here")
    args = ap.parse_args()
    ref = LlamaRef(args.model)
    tokens = [int(t) for t in args.tokens.split(",") if t]
    logits = ref.forward(tokens)
    if args.out:
        logits.astype("<f4").tofile(args.out)
    for i, row in enumerate(logits):
        top = np.argsort(-row)[:5]
        print("pos %d token %d: top5 %s" % (i, tokens[i], ", ".join(
            "%d:%.4f" % (t, row[t]) for t in top)))


if __name__ == "__main__":
    main()

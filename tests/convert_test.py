#!/usr/bin/env python3
"""pi-convert: Hugging Face folders made here with torch (random weights, safetensors written
by hand, one file or shards with an index) become GGUF files whose logits equal a torch
forward pass of the same weights (Hugging Face's llama: rotate-half RoPE, GQA, RMSNorm, a
gated FFN), in every mode the engine runs them:

- llama-ReLU (SentencePiece tokenizer.model, sharded) as f32, then --down-t: a PWRI file whose
  --sparse oracle logits equal torch's too, which pi-train-predictor trains and pi-run runs
  with --sparse predictor; as q8_0 it loads and its top tokens match;
- llama-SiLU with GQA and tied embeddings (a BPE tokenizer.json);
- Mistral-shaped (MistralForCausalLM, GQA) with --ffn-activation relu overriding hidden_act;
- Qwen2 (Qwen2ForCausalLM: Q/K/V biases, rotate-half RoPE kept, tied), Qwen3 (head norms,
  head_dim apart from hidden_size / heads; attention biases refused), Gemma 2 and Gemma 3
  (Hugging Face's modeling_gemma2/3 written out here: (1 + w) norms, post-norms, GeGLU, soft-caps,
  sliding windows, head norms and a local RoPE base; a query scale llama.cpp would not compute
  refused), Phi-3 (fused qkv_proj and gate_up_proj, a window on every layer; LongRoPE refused),
  and Llama 3.1's and linear rope_scaling: logits equal torch's;
- dReLU (BambooForCausalLM, as Bamboo and TurboSparse-Mistral say it: hidden_act relu, applied
  to gate and up both): arch bamboo, pi.ffn_activation drelu, dense and --sparse oracle logits,
  greedy tokens as torch's;
- Falcon (FalconForCausalLM, Hugging Face's FalconModel written out here: LayerNorm with bias,
  fused query_key_value in each of its three layouts — multi-query, one KV per head, the new
  decoder architecture's groups with ln_attn/ln_mlp —, rotate-half RoPE, attention and FFN in
  parallel): relu and gelu (torch's tanh form, which the engine runs; the exact erf GELU that
  config.json's "gelu" names is measured against too), greedy tokens as torch's; alibi, bias and
  sequential attention each refused naming the key;
- a file naming the wrong activation: --ffn-activation on the tools (a local cpu worker too)
  and pi-quantize --set-activation give torch's logits back;
- the SentencePiece vocabulary: on 300 lines of text the converted file tokenizes exactly as
  the demo model (whose vocabulary the same tokenizer.model made);
- the BPE vocabulary: on ASCII strings it tokenizes as a byte-level BPE reference written here;
- the original's predictors (model_N.pt) and activation counts (activation_N.pt) of a 12-layer
  model land in the right layers (10 sorts before 2 by name), with the predictor's threshold;
  the stats feed pi-place, the predictors pi-run; a code-running pickle is refused unexecuted;
- malformed folders, each with its own error: a missing tensor, an unknown architecture, a
  shape that disagrees with config.json, a truncated safetensors header, an index naming a
  shard that lacks the tensor, no tokenizer.

Usage: convert_test.py BIN_DIR
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from served_process import check, finish  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "reference"))
from check_tokenizer import bytes_to_unicode  # noqa: E402  (GPT-2's byte alphabet)

SPM = os.path.join(ROOT, "models", "demo-tokenizer.model")
DEMO = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")


# ---- a Hugging Face llama in torch ---------------------------------------------------------

def make_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def r(*shape, scale=0.08):
        return torch.randn(*shape, generator=g) * scale

    w = {"model.embed_tokens.weight": r(cfg["vocab_size"], d, scale=0.5),
         "model.norm.weight": 1 + r(d, scale=0.1)}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        w[p + "input_layernorm.weight"] = 1 + r(d, scale=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + r(d, scale=0.1)
        w[p + "self_attn.q_proj.weight"] = r(q, d)
        w[p + "self_attn.k_proj.weight"] = r(kv, d)
        w[p + "self_attn.v_proj.weight"] = r(kv, d)
        w[p + "self_attn.o_proj.weight"] = r(d, q)
        # A bias toward negative gate values: a ReLU model then fires sparsely.
        w[p + "mlp.gate_proj.weight"] = r(ff, d) - 0.01
        w[p + "mlp.up_proj.weight"] = r(ff, d)
        w[p + "mlp.down_proj.weight"] = r(d, ff)
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = r(cfg["vocab_size"], d, scale=0.3)
    return w


def scaled_inv_freq(inv, scaling):
    """transformers' rope_scaling of the inverse frequencies: linear divides them all by the
    factor; llama3 (_compute_llama3_parameters) divides the slow ones by it and blends the
    middle band."""
    if not scaling:
        return inv
    factor = scaling["factor"]
    if scaling["rope_type"] == "linear":
        return inv / factor
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    wavelen = 2 * torch.pi / inv
    out = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, out)


def rotate_half_rope(n, hd, theta, scaling=None):
    """RoPE over positions 0..n-1 as Hugging Face's llama and falcon apply it: x [heads, n, hd]
    rotated by halves (the GGUF side permutes llama's Q/K rows to match)."""
    pos = torch.arange(n, dtype=torch.float64)
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    inv = scaled_inv_freq(inv, scaling)
    ang = torch.outer(pos, inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(x):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin
    return rope


def torch_forward(cfg, w, tokens):
    """Hugging Face LlamaForCausalLM's forward in float64: logits [n, vocab]. _act drelu is
    BambooMLP's: the activation on the gate and the up projection both."""
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // nh)
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    W = {k: v.double() for k, v in w.items()}
    act = {"relu": torch.relu, "silu": torch.nn.functional.silu, "drelu": torch.relu}[cfg["_act"]]
    up_act = torch.relu if cfg["_act"] == "drelu" else (lambda x: x)

    def norm(x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g

    n = len(tokens)
    rope = rotate_half_rope(n, hd, theta, cfg.get("rope_scaling"))

    h = W["model.embed_tokens.weight"][tokens]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    if cfg.get("_window"):  # Phi-3's sliding window, every layer
        mask = sliding_mask(n, cfg["_window"])
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        x = norm(h, W[p + "input_layernorm.weight"])
        # Qwen2's projections have biases (Qwen2Attention: bias=True on q, k, v).
        q, k, v = (x @ W[p + "self_attn.%s_proj.weight" % c].T +
                   W.get(p + "self_attn.%s_proj.bias" % c, 0) for c in "qkv")
        q, k = q.view(n, nh, hd), k.view(n, nkv, hd)
        if p + "self_attn.q_norm.weight" in W:  # Qwen3Attention: each head normed, before RoPE
            q, k = norm(q, W[p + "self_attn.q_norm.weight"]), norm(k, W[p + "self_attn.k_norm.weight"])
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = v.view(n, nkv, hd).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(nh // nkv, 0)
        v = v.repeat_interleave(nh // nkv, 0)
        a = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, -1) @ v
        h = h + a.transpose(0, 1).reshape(n, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        x = norm(h, W[p + "post_attention_layernorm.weight"])
        f = act(x @ W[p + "mlp.gate_proj.weight"].T) * up_act(x @ W[p + "mlp.up_proj.weight"].T)
        h = h + f @ W[p + "mlp.down_proj.weight"].T
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return (norm(h, W["model.norm.weight"]) @ head.T).numpy()


# ---- Hugging Face's Gemma 2 / Gemma 3 in torch ---------------------------------------------

def gemma_weights(cfg, seed):
    """make_weights' tensors under Gemma's names: norms stored as w with (1 + w) applied
    (GemmaRMSNorm), a norm before and after the FFN and after attention, Gemma 3's head
    norms, a tied head."""
    w = make_weights(cfg, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    d, hd = cfg["hidden_size"], cfg["head_dim"]
    out = {}
    for k, v in w.items():
        out[k] = v - 1 if k.endswith("norm.weight") else v
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):
            out[p + n + ".weight"] = torch.randn(d, generator=g) * 0.3
        out[p + "post_attention_layernorm.weight"] = torch.randn(d, generator=g) * 0.3
        if cfg["architectures"][0] == "Gemma3ForCausalLM":
            for c in "qk":
                out[p + "self_attn.%s_norm.weight" % c] = torch.randn(hd, generator=g) * 0.3
    return out


def sliding_mask(n, window):
    """Causal, and a query at i sees keys j > i - window only (Gemma's sliding layers)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    keep = (j <= i) & (i - j < window)
    return torch.where(keep, 0.0, float("-inf")).double()


def gemma_forward(cfg, w, tokens):
    """Gemma2ForCausalLM / Gemma3ForCausalLM's forward (transformers' modeling_gemma2/3) in
    float64: embeddings * sqrt(hidden_size); (1 + w) RMS norms; q.k * query_pre_attn_scalar
    ** -0.5, soft-capped (Gemma 2); Gemma 3's q/k head norms and local RoPE base on sliding
    layers; post-attention and post-FFN norms; gelu_pytorch_tanh(gate) * up; logits
    soft-capped (Gemma 2)."""
    gemma3 = cfg["architectures"][0] == "Gemma3ForCausalLM"
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = cfg["head_dim"], cfg.get("rms_norm_eps", 1e-6)
    W = {k: v.double() for k, v in w.items()}
    n = len(tokens)

    def norm(x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1 + g)

    rope_global = rotate_half_rope(n, hd, cfg["rope_theta"], cfg.get("rope_scaling"))
    rope_local = rotate_half_rope(n, hd, cfg.get("rope_local_base_freq", 10000.0))
    causal = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    window = sliding_mask(n, cfg["sliding_window"])
    cap_attn, cap_final = cfg.get("attn_logit_softcapping"), cfg.get("final_logit_softcapping")
    h = W["model.embed_tokens.weight"][tokens] * d ** 0.5
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        sliding = bool((l + 1) % cfg["sliding_window_pattern"]) if gemma3 else l % 2 == 0
        x = norm(h, W[p + "input_layernorm.weight"])
        q, k, v = (x @ W[p + "self_attn.%s_proj.weight" % c].T for c in "qkv")
        q, k, v = q.view(n, nh, hd), k.view(n, nkv, hd), v.view(n, nkv, hd)
        if gemma3:
            q, k = norm(q, W[p + "self_attn.q_norm.weight"]), norm(k, W[p + "self_attn.k_norm.weight"])
        rope = rope_local if gemma3 and sliding else rope_global
        q, k, v = rope(q.transpose(0, 1)), rope(k.transpose(0, 1)), v.transpose(0, 1)
        k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
        s = q @ k.transpose(1, 2) * cfg["query_pre_attn_scalar"] ** -0.5
        if cap_attn:
            s = torch.tanh(s / cap_attn) * cap_attn
        a = torch.softmax(s + (window if sliding else causal), -1) @ v
        a = a.transpose(0, 1).reshape(n, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = h + norm(a, W[p + "post_attention_layernorm.weight"])
        x = norm(h, W[p + "pre_feedforward_layernorm.weight"])
        gate = torch.nn.functional.gelu(x @ W[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        f = (gate * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        h = h + norm(f, W[p + "post_feedforward_layernorm.weight"])
    logits = norm(h, W["model.norm.weight"]) @ W["model.embed_tokens.weight"].T
    if cap_final:
        logits = torch.tanh(logits / cap_final) * cap_final
    return logits.numpy()


# ---- a Hugging Face falcon in torch -------------------------------------------------------

def falcon_kv(cfg):
    """FalconAttention's KV head count: num_kv_heads only with the new decoder architecture."""
    if cfg.get("new_decoder_architecture"):
        return cfg.get("num_kv_heads", cfg["num_attention_heads"])
    return 1 if cfg.get("multi_query", True) else cfg["num_attention_heads"]


def make_falcon_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, nkv, ff = d // nh, falcon_kv(cfg), cfg.get("ffn_hidden_size", 4 * d)

    def r(*shape, scale=0.08):
        return torch.randn(*shape, generator=g) * scale

    w = {"transformer.word_embeddings.weight": r(cfg["vocab_size"], d, scale=0.5),
         "transformer.ln_f.weight": 1 + r(d, scale=0.1), "transformer.ln_f.bias": r(d, scale=0.1)}
    two = cfg.get("new_decoder_architecture") and cfg.get("num_ln_in_parallel_attn", 2) == 2
    for l in range(cfg["num_hidden_layers"]):
        p = "transformer.h.%d." % l
        for n in (("ln_attn", "ln_mlp") if two else ("input_layernorm",)):
            w[p + n + ".weight"] = 1 + r(d, scale=0.1)
            w[p + n + ".bias"] = r(d, scale=0.1)
        w[p + "self_attention.query_key_value.weight"] = r((nh + 2 * nkv) * hd, d)
        w[p + "self_attention.dense.weight"] = r(d, d)
        w[p + "mlp.dense_h_to_4h.weight"] = r(ff, d) - 0.01
        w[p + "mlp.dense_4h_to_h.weight"] = r(d, ff)
    if cfg.get("tie_word_embeddings") is False:
        w["lm_head.weight"] = r(cfg["vocab_size"], d, scale=0.3)
    return w


def falcon_forward(cfg, w, tokens, gelu="tanh"):
    """Hugging Face FalconForCausalLM's forward in float64 (its _split_heads, rotary
    embedding, decoder layer): logits [n, vocab]. gelu: "tanh" (the engine's, llama.cpp's)
    or "none" (nn.GELU's exact erf, what config.json's "gelu" means)."""
    d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, nkv = d // nh, falcon_kv(cfg)
    eps, theta = cfg.get("layer_norm_epsilon", 1e-5), cfg.get("rope_theta", 10000.0)
    W = {k: v.double() for k, v in w.items()}
    if cfg.get("activation", "gelu") == "relu":
        act = torch.relu
    else:
        act = lambda x: torch.nn.functional.gelu(x, approximate=gelu)  # noqa: E731
    new_arch = cfg.get("new_decoder_architecture", False)
    two = new_arch and cfg.get("num_ln_in_parallel_attn", 2) == 2

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (d,), W[name + ".weight"], W[name + ".bias"], eps)

    n = len(tokens)
    rope = rotate_half_rope(n, hd, theta)

    def split_heads(fused):  # FalconAttention._split_heads, batch dropped: [n, heads, hd] x 3
        if new_arch:
            qkv = fused.view(n, -1, nh // nkv + 2, hd)
            q, k, v = qkv[:, :, :-2], qkv[:, :, [-2]], qkv[:, :, [-1]]
            k, v = torch.broadcast_to(k, q.shape), torch.broadcast_to(v, q.shape)
            return [x.flatten(1, 2) for x in (q, k, v)]
        if not cfg.get("multi_query", True):
            qkv = fused.view(n, nh, 3, hd)
            return qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        qkv = fused.view(n, nh + 2, hd)
        return qkv[:, :-2], qkv[:, [-2]].expand(n, nh, hd), qkv[:, [-1]].expand(n, nh, hd)

    h = W["transformer.word_embeddings.weight"][tokens]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = "transformer.h.%d." % l
        xa = ln(h, p + "ln_attn") if two else ln(h, p + "input_layernorm")
        xm = ln(h, p + "ln_mlp") if two else xa
        q, k, v = split_heads(xa @ W[p + "self_attention.query_key_value.weight"].T)
        q, k, v = rope(q.transpose(0, 1)), rope(k.transpose(0, 1)), v.transpose(0, 1)
        a = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, -1) @ v
        attn = a.transpose(0, 1).reshape(n, d) @ W[p + "self_attention.dense.weight"].T
        mlp = act(xm @ W[p + "mlp.dense_h_to_4h.weight"].T) @ W[p + "mlp.dense_4h_to_h.weight"].T
        h = h + attn + mlp
    head = W.get("lm_head.weight", W["transformer.word_embeddings.weight"])
    return (ln(h, "transformer.ln_f") @ head.T).numpy()


# ---- writing a Hugging Face folder -------------------------------------------------------

def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        arr = t.numpy().astype(np.float32 if dtype == "F32" else np.float16)
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_folder(dir, cfg, w, tokenizer, shards=1, dtype="F32"):
    os.makedirs(dir, exist_ok=True)
    with open(os.path.join(dir, "config.json"), "w") as f:
        json.dump({k: v for k, v in cfg.items() if not k.startswith("_")}, f)
    names = list(w)
    if shards == 1:
        write_safetensors(os.path.join(dir, "model.safetensors"), w, dtype)
    else:
        weight_map = {}
        for s in range(shards):
            part = {n: w[n] for n in names[s::shards]}
            fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            write_safetensors(os.path.join(dir, fname), part, dtype)
            weight_map.update({n: fname for n in part})
        with open(os.path.join(dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    if tokenizer == "spm":
        shutil.copy(SPM, os.path.join(dir, "tokenizer.model"))
    else:
        with open(os.path.join(dir, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f)


# ---- a byte-level BPE tokenizer.json and its reference encoder ----------------------------

def make_bpe(text, n_merges):
    """A tokenizer.json: the 256 byte tokens, merges learned greedily on `text`, two specials."""
    b2u = bytes_to_unicode()
    words = [[b2u[b] for b in w.encode()] for w in pretokenize(text)]
    vocab = {b2u[b]: i for i, b in enumerate(range(256))}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda k: (counts[k], k))
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                else:
                    i += 1
    specials = [{"id": len(vocab), "content": "<|begin|>", "special": True},
                {"id": len(vocab) + 1, "content": "<|end|>", "special": True}]
    return {"version": "1.0", "added_tokens": specials,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "model": {"type": "BPE", "vocab": vocab, "merges": [a + " " + b for a, b in merges]}}


GPT2_ASCII = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def pretokenize(text):
    return GPT2_ASCII.findall(text)


def bpe_encode(tok, text):
    b2u = bytes_to_unicode()
    vocab = tok["model"]["vocab"]
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(tok["model"]["merges"])}
    out = []
    for word in pretokenize(text):
        w = [b2u[b] for b in word.encode()]
        while len(w) > 1:
            pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(w, w[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            w[i:i + 2] = [w[i] + w[i + 1]]
        out.extend(vocab[p] for p in w)
    return out


# ---- running the tools --------------------------------------------------------------------

def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600)


def dump_logits(bin_dir, model, tokens, tmp, sparse="off"):
    out = os.path.join(tmp, "logits.bin")
    p = run(os.path.join(bin_dir, "pi-dump-logits"), "-m", model, "--tokens",
            ",".join(map(str, tokens)), "--out", out, "-ctk", "f32", "-ctv", "f32", "-t", "2",
            "--sparse", sparse)
    if p.returncode != 0:
        return None, p.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1), ""


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def convert_logits(bin_dir, tmp, src, out, tokens, *args):
    """pi-convert SRC -o OUT ARGS, then OUT's logits: (process, logits or None, error text)."""
    p = run(os.path.join(bin_dir, "pi-convert"), src, "-o", out, *args)
    if p.returncode != 0:
        return p, None, p.stderr
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    return p, got, err


def check_logits(what, got, err, want, ok=True):
    """`what`'s logits equal torch's `want` within 1e-4 relative (and `ok` holds)."""
    check(ok and got is not None and rel_err(got, want) < 1e-4,
          f"{what}: logits equal torch's within 1e-4 "
          f"({rel_err(got, want) if got is not None else err!r})")


def tokenize_jsonl(bin_dir, model, lines, tmp, bos):
    path = os.path.join(tmp, "lines.jsonl")
    with open(path, "w") as f:
        for s in lines:
            f.write(json.dumps(s) + "\n")
    p = run(os.path.join(bin_dir, "pi-tokenize"), "-m", model, "--ids-jsonl", path,
            "--bos" if bos else "--no-bos")
    return [json.loads(l) for l in p.stdout.splitlines()] if p.returncode == 0 else p.stderr


def torch_greedy(forward, prompt, n):
    """Greedy decoding by full forward passes: the n tokens after prompt."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(forward(ids)[-1].argmax()))
    return ids[len(prompt):]


def pi_greedy(bin_dir, model, n, *args):
    """pi-run's greedy continuation of a fixed prompt: (prompt ids, generated ids) or an error."""
    q = run(os.path.join(bin_dir, "pi-run"), "-m", model, "-p", "In the beginning", "-n", str(n),
            "--temp", "0", "--ignore-eos", "--json", "-t", "2", *args)
    if q.returncode != 0:
        return None, q.stderr[-300:]
    j = json.loads(q.stdout)
    return j["prompt_tokens"], j["generated_tokens"]


def check_drelu(bin_dir, tmp, base, tokens):
    """Bamboo / TurboSparse-Mistral: BambooForCausalLM, hidden_act relu on gate and up both."""
    import pigguf
    convert = os.path.join(bin_dir, "pi-convert")
    cfg = dict(base, architectures=["BambooForCausalLM"], model_type="bamboo", hidden_act="relu",
               _act="drelu", num_key_value_heads=2)
    w = make_weights(cfg, 7)
    want = torch_forward(cfg, w, tokens)
    src = os.path.join(tmp, "bamboo")
    write_folder(src, cfg, w, "spm")
    out, out_t = os.path.join(tmp, "bamboo.gguf"), os.path.join(tmp, "bamboo-down-t.gguf")
    p = run(convert, src, "-o", out, "--outtype", "f32")
    q = run(convert, src, "-o", out_t, "--outtype", "f32", "--down-t")
    check(p.returncode == 0 and q.returncode == 0, f"Bamboo (dReLU) converts ({(p.stderr + q.stderr)[-300:]!r})")
    m = pigguf.GGUFReader(out).metadata
    check(m["general.architecture"] == "bamboo" and m["pi.ffn_activation"] == "drelu",
          f"Bamboo: arch bamboo, pi.ffn_activation drelu ({m['general.architecture']}, "
          f"{m['pi.ffn_activation']})")
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    check(got is not None and rel_err(got, want) < 1e-4,
          f"Bamboo dReLU: logits equal torch's (relu on gate and up) within 1e-4 "
          f"({rel_err(got, want) if got is not None else err!r})")
    relu_only = torch_forward(dict(cfg, _act="relu"), w, tokens)
    check(got is not None and rel_err(got, relu_only) > 1e-2,
          f"... and not a ReLU-gate model's ({rel_err(got, relu_only) if got is not None else err!r})")
    got, err = dump_logits(bin_dir, out_t, tokens, tmp, sparse="oracle")
    check_logits("Bamboo --down-t, --sparse oracle", got, err, want)
    prompt, ids = pi_greedy(bin_dir, out_t, 10, "--sparse", "oracle")
    ref = torch_greedy(lambda t: torch_forward(cfg, w, t), prompt, 10) if prompt else None
    check(prompt is not None and ids == ref,
          f"Bamboo --sparse oracle: pi-run's greedy tokens are torch's ({ids} / {ref})")


def check_qwen2(bin_dir, tmp, base, tokens):
    """Qwen2ForCausalLM: llama's layers with Q/K/V biases and rotate-half RoPE, kept as it is
    (arch qwen2: NeoX, no row permutation); tied embeddings as Qwen2's small models."""
    import pigguf
    cfg = dict(base, architectures=["Qwen2ForCausalLM"], hidden_act="silu", _act="silu",
               num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0)
    w = make_weights(cfg, 11)
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    g = torch.Generator().manual_seed(12)
    for l in range(cfg["num_hidden_layers"]):
        for c, heads in (("q", cfg["num_attention_heads"]), ("k", 2), ("v", 2)):
            w["model.layers.%d.self_attn.%s_proj.bias" % (l, c)] = \
                torch.randn(heads * hd, generator=g) * 0.5
    want = torch_forward(cfg, w, tokens)
    unbiased = torch_forward(cfg, {k: v for k, v in w.items() if not k.endswith(".bias")}, tokens)
    src = os.path.join(tmp, "qwen2")
    write_folder(src, cfg, w, "spm")
    out = os.path.join(tmp, "qwen2.gguf")
    p = run(os.path.join(bin_dir, "pi-convert"), src, "-o", out, "--outtype", "f32")
    check(p.returncode == 0, f"Qwen2 converts ({p.stderr[-300:]!r})")
    m = pigguf.GGUFReader(out).metadata if p.returncode == 0 else {}
    check(m.get("general.architecture") == "qwen2", f"Qwen2: arch qwen2 "
                                                    f"({m.get('general.architecture')})")
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    check(rel_err(unbiased, want) > 1e-2, f"Qwen2's biases move torch's logits "
                                          f"({rel_err(unbiased, want):.1e})")
    check_logits("Qwen2 (biases, NeoX RoPE, tied)", got, err, want)


def check_qwen3(bin_dir, tmp, base, tokens):
    """Qwen3ForCausalLM: llama's layers with each Q and K head RMS-normed before rotate-half
    RoPE (arch qwen3: NeoX, rows not permuted), and a head_dim (32) apart from hidden_size /
    heads (16): llama.cpp's attention.key_length."""
    import pigguf
    cfg = dict(base, architectures=["Qwen3ForCausalLM"], hidden_act="silu", _act="silu",
               num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, rope_theta=1000000.0)
    w = make_weights(cfg, 13)
    g = torch.Generator().manual_seed(14)
    for l in range(cfg["num_hidden_layers"]):
        for c in "qk":
            w["model.layers.%d.self_attn.%s_norm.weight" % (l, c)] = \
                1 + torch.randn(32, generator=g) * 0.3
    want = torch_forward(cfg, w, tokens)
    unnormed = torch_forward(cfg, {k: v for k, v in w.items() if "_norm.weight" not in k or
                                   "layernorm" in k or k == "model.norm.weight"}, tokens)
    src = os.path.join(tmp, "qwen3")
    write_folder(src, cfg, w, "spm")
    out = os.path.join(tmp, "qwen3.gguf")
    p = run(os.path.join(bin_dir, "pi-convert"), src, "-o", out, "--outtype", "f32")
    check(p.returncode == 0, f"Qwen3 converts ({p.stderr[-300:]!r})")
    m = pigguf.GGUFReader(out).metadata if p.returncode == 0 else {}
    check(m.get("general.architecture") == "qwen3" and m.get("qwen3.attention.key_length") == 32,
          f"Qwen3: arch qwen3, key_length 32 ({m.get('general.architecture')}, "
          f"{m.get('qwen3.attention.key_length')})")
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    check(rel_err(unnormed, want) > 1e-2, f"Qwen3's head norms move torch's logits "
                                          f"({rel_err(unnormed, want):.1e})")
    check_logits("Qwen3 (head norms, head_dim 32 x 4 heads != 64, NeoX RoPE, tied)", got, err, want)
    biased = dict(w, **{"model.layers.0.self_attn.q_proj.bias": torch.zeros(4 * 32)})
    write_folder(src + "-bias", cfg, biased, "spm")
    p = run(os.path.join(bin_dir, "pi-convert"), src + "-bias", "-o", out + ".b", "--outtype", "f32")
    check(p.returncode != 0 and "attention biases" in p.stderr,
          f"Qwen3 with attention biases: refused, not dropped ({p.stderr[-200:]!r})")


def check_gemma(bin_dir, tmp, base, tokens, cls):
    """Gemma2ForCausalLM / Gemma3ForCausalLM against gemma_forward: every feature bites on
    these 12 tokens (a window of 4, small caps, a global layer among Gemma 3's three), and a
    query scale llama.cpp's graph would not compute is refused."""
    import pigguf
    gemma3 = cls == "Gemma3ForCausalLM"
    cfg = dict(base, architectures=[cls], hidden_activation="gelu_pytorch_tanh",
               num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
               tie_word_embeddings=True, sliding_window=4)
    cfg.pop("hidden_act", None)
    if gemma3:
        cfg.update(num_hidden_layers=6, sliding_window_pattern=6, rope_theta=1000000.0,
                   rope_local_base_freq=10000.0, final_logit_softcapping=None,
                   rope_scaling={"rope_type": "linear", "factor": 8.0})
    else:
        cfg.update(attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    w = gemma_weights(cfg, 15 if gemma3 else 16)
    want = gemma_forward(cfg, w, tokens)
    wide = gemma_forward(dict(cfg, sliding_window=64), w, tokens)
    check(rel_err(wide, want) > 1e-2, f"{cls}'s window moves torch's logits "
                                      f"({rel_err(wide, want):.1e})")
    name = "gemma3" if gemma3 else "gemma2"
    src = os.path.join(tmp, name)
    write_folder(src, cfg, w, "spm")
    out = os.path.join(tmp, name + ".gguf")
    p = run(os.path.join(bin_dir, "pi-convert"), src, "-o", out, "--outtype", "f32")
    check(p.returncode == 0, f"{cls} converts ({p.stderr[-300:]!r})")
    m = pigguf.GGUFReader(out).metadata if p.returncode == 0 else {}
    check(m.get("general.architecture") == name and m.get(name + ".attention.sliding_window") == 4
          and m.get("pi.ffn_activation") == "gelu",
          f"{cls}: arch {name}, window 4, gelu ({m.get('general.architecture')}, "
          f"{m.get(name + '.attention.sliding_window')}, {m.get('pi.ffn_activation')})")
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    check_logits(f"{cls} (1 + w norms, post-norms, GeGLU, window, "
                 f"{'head norms, local RoPE' if gemma3 else 'soft-caps'}, tied)", got, err, want)
    bad = dict(cfg, query_pre_attn_scalar=48)
    write_folder(src + "-scale", bad, w, "spm")
    p = run(os.path.join(bin_dir, "pi-convert"), src + "-scale", "-o", out + ".s", "--outtype", "f32")
    check(p.returncode != 0 and "query_pre_attn_scalar" in p.stderr,
          f"{cls} with a query scale llama.cpp does not compute: refused ({p.stderr[-200:]!r})")


def check_phi3(bin_dir, tmp, base, tokens):
    """Phi3ForCausalLM: llama's layers with qkv_proj = [q; k; v] and gate_up_proj = [gate; up]
    fused (kept fused: arch phi3), rotate-half RoPE, every layer attending to a window."""
    import pigguf
    cfg = dict(base, architectures=["Phi3ForCausalLM"], hidden_act="silu", _act="silu",
               num_key_value_heads=2, sliding_window=5, tie_word_embeddings=False)
    w = make_weights(cfg, 17)
    fused = {}
    for k, v in w.items():
        if ".self_attn.k_proj" in k or ".self_attn.v_proj" in k or ".mlp.up_proj" in k:
            continue
        if ".self_attn.q_proj" in k:
            p = k[:k.index("q_proj")]
            fused[p + "qkv_proj.weight"] = torch.cat([w[p + c + "_proj.weight"] for c in "qkv"])
        elif ".mlp.gate_proj" in k:
            p = k[:k.index("gate_proj")]
            fused[p + "gate_up_proj.weight"] = torch.cat([v, w[p + "up_proj.weight"]])
        else:
            fused[k] = v
    want = torch_forward(dict(cfg, _window=5), w, tokens)
    wide = torch_forward(cfg, w, tokens)
    check(rel_err(wide, want) > 1e-2, f"Phi-3's window moves torch's logits "
                                      f"({rel_err(wide, want):.1e})")
    src = os.path.join(tmp, "phi3")
    write_folder(src, cfg, fused, "spm")
    out = os.path.join(tmp, "phi3.gguf")
    p = run(os.path.join(bin_dir, "pi-convert"), src, "-o", out, "--outtype", "f32")
    check(p.returncode == 0, f"Phi3 converts ({p.stderr[-300:]!r})")
    m = pigguf.GGUFReader(out) if p.returncode == 0 else None
    check(m is not None and m.metadata.get("general.architecture") == "phi3"
          and list(m.tensors["blk.0.ffn_up.weight"].ne) == [64, 2 * 192]
          and "blk.0.attn_qkv.weight" in m.tensors,
          "Phi3: arch phi3, attn_qkv and the fused ffn_up [64, 384] kept")
    got, err = dump_logits(bin_dir, out, tokens, tmp)
    check_logits("Phi3 (fused QKV and gate+up, NeoX RoPE, window 5)", got, err, want)
    longrope = dict(cfg, rope_scaling={"type": "longrope", "long_factor": [1.0] * 8,
                                       "short_factor": [1.0] * 8})
    write_folder(src + "-long", longrope, fused, "spm")
    p = run(os.path.join(bin_dir, "pi-convert"), src + "-long", "-o", out + ".l", "--outtype", "f32")
    check(p.returncode != 0 and "longrope" in p.stderr,
          f"Phi3 with LongRoPE: refused by name ({p.stderr[-200:]!r})")


def check_falcon(bin_dir, tmp, tokens):
    """FalconForCausalLM in each fused-QKV layout, relu and gelu; unsupported variants refused."""
    import pigguf
    convert = os.path.join(bin_dir, "pi-convert")
    base = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 4096,
            "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1,
            "eos_token_id": 2, "parallel_attn": True, "alibi": False, "bias": False}
    cases = [("relu-multi-query", dict(base, activation="relu", multi_query=True,
                                       tie_word_embeddings=False)),
             ("gelu-multi-query-untied", dict(base, activation="gelu", multi_query=True,
                                              tie_word_embeddings=False, ffn_hidden_size=192)),
             ("relu-kv-per-head", dict(base, activation="relu", multi_query=False)),
             ("relu-new-arch", dict(base, activation="relu", new_decoder_architecture=True,
                                    num_kv_heads=2)),
             ("gelu-new-arch-1ln", dict(base, new_decoder_architecture=True, num_kv_heads=2,
                                        num_ln_in_parallel_attn=1))]
    for seed, (name, cfg) in enumerate(cases):
        w = make_falcon_weights(cfg, 20 + seed)
        want = falcon_forward(cfg, w, tokens)
        src = os.path.join(tmp, "falcon-" + name)
        write_folder(src, cfg, w, "spm")
        out = src + ".gguf"
        p, got, err = convert_logits(bin_dir, tmp, src, out, tokens, "--outtype", "f32")
        m = pigguf.GGUFReader(out).metadata if p.returncode == 0 else {}
        check_logits(f"falcon {name}", got, err, want,
                     ok=m.get("general.architecture") == "falcon")
        if cfg.get("activation", "gelu") == "gelu":
            exact = falcon_forward(cfg, w, tokens, gelu="none")
            check(got is not None and rel_err(got, exact) < 1e-2 and "erf" in p.stderr and
                  np.array_equal(got.argmax(1), exact.argmax(1)),
                  f"falcon {name}: against the exact erf GELU config.json names, said at conversion: "
                  f"{rel_err(got, exact) if got is not None else err!r}, same top tokens")
        prompt, ids = pi_greedy(bin_dir, out, 10)
        ref = torch_greedy(lambda t: falcon_forward(cfg, w, t), prompt, 10) if prompt else None
        check(prompt is not None and ids == ref,
              f"falcon {name}: pi-run's greedy tokens are torch's ({ids} / {ref})")
        if name == "relu-multi-query":
            out_t = src + "-down-t.gguf"
            p = run(convert, src, "-o", out_t, "--outtype", "f32", "--down-t")
            got, err = dump_logits(bin_dir, out_t, tokens, tmp, sparse="oracle")
            check_logits(f"falcon {name} --down-t, --sparse oracle", got, err, want)

    # RWForCausalLM (configuration_RW.py): the same weights under the first releases' config
    # keys and defaults — falcon-7b's RefinedWebModel (multi_query set) and falcon-40b's
    # RefinedWeb (the new decoder architecture implied, n_head_kv) — give the same logits.
    rw_base = {"architectures": ["RWForCausalLM"], "n_embed": 64, "n_layer": 2, "n_head": 4,
               "vocab_size": 4096, "layer_norm_epsilon": 1e-5, "bos_token_id": 1,
               "eos_token_id": 2, "alibi": False, "bias": False}
    rw_cases = [("rw-7b", dict(rw_base, model_type="RefinedWebModel", multi_query=True,
                                parallel_attn=True),
                 dict(base, multi_query=True)),
                ("rw-40b", dict(rw_base, model_type="RefinedWeb", n_head_kv=2),
                 dict(base, new_decoder_architecture=True, num_kv_heads=2))]
    for seed, (name, rw_cfg, cfg) in enumerate(rw_cases):
        w = make_falcon_weights(cfg, 40 + seed)
        want = falcon_forward(cfg, w, tokens)
        src = os.path.join(tmp, "falcon-" + name)
        write_folder(src, rw_cfg, w, "spm")
        p, got, err = convert_logits(bin_dir, tmp, src, src + ".gguf", tokens, "--outtype", "f32")
        check_logits(f"falcon {name} (RWForCausalLM)", got, err, want)
    # configuration_RW.py's parallel_attn default is false: a 7B-style config without it is
    # refused, as the sequential layer it would mean is not the engine's.
    src = os.path.join(tmp, "falcon-rw-sequential")
    write_folder(src, dict(rw_base, model_type="RefinedWebModel", multi_query=True),
                 make_falcon_weights(dict(base, multi_query=True), 42), "spm")
    p = run(convert, src, "-o", src + ".gguf")
    check(p.returncode == 1 and '"parallel_attn": false is not supported' in p.stderr,
          f"RWForCausalLM without parallel_attn: refused ({p.stderr.strip()[-120:]!r})")

    # Falcon's tokenizer.json: its pre-tokenizer sequence is llama.cpp's "falcon" (not gpt2's);
    # Falcon 3's (single digits) is refused rather than misread.
    bpe = make_bpe("In the beginning God created the heaven and the earth. 1234 $5+3=8", 40)
    bpe["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated",
         "invert": False}]}
    cfg = dict(base, activation="relu", vocab_size=len(bpe["model"]["vocab"]) + 2,
               bos_token_id=len(bpe["model"]["vocab"]), eos_token_id=len(bpe["model"]["vocab"]) + 1)
    w = make_falcon_weights(cfg, 31)
    src = os.path.join(tmp, "falcon-bpe")
    write_folder(src, cfg, w, bpe)
    p = run(convert, src, "-o", src + ".gguf")
    m = pigguf.GGUFReader(src + ".gguf").metadata if p.returncode == 0 else {}
    check(m.get("tokenizer.ggml.pre") == "falcon",
          f"falcon's tokenizer.json pre-tokenizer -> tokenizer.ggml.pre falcon "
          f"({m.get('tokenizer.ggml.pre')!r} {p.stderr[-200:]!r})")
    bpe["pre_tokenizer"]["pretokenizers"][2]["individual_digits"] = True
    del bpe["pre_tokenizer"]["pretokenizers"][3]
    write_folder(src, cfg, w, bpe)
    p = run(convert, src, "-o", src + "-3.gguf")
    check(p.returncode == 1 and "a pre-tokenizer this tool does not know (falcon's is)" in p.stderr,
          f"Falcon 3's single-digit pre-tokenizer is refused ({p.stderr.strip()[-160:]!r})")

    # What the engine's falcon cannot run: refused, naming config.json's key, nothing written.
    cfg = dict(base, activation="relu")
    w = make_falcon_weights(cfg, 30)
    for key, value in (("alibi", True), ("bias", True), ("parallel_attn", False)):
        src = os.path.join(tmp, "falcon-bad-" + key)
        write_folder(src, dict(cfg, **{key: value}), w, "spm")
        out = src + ".gguf"
        p = run(convert, src, "-o", out)
        msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check(p.returncode == 1 and f'"{key}": {str(value).lower()} is not supported' in msg
              and not os.path.exists(out), f"falcon {key}={value}: refused ({msg!r})")


def main():
    bin_dir = sys.argv[1]
    convert = os.path.join(bin_dir, "pi-convert")
    tokens = [1, 17, 250, 3000, 42, 7, 999, 5, 64, 128, 4000, 11]
    with tempfile.TemporaryDirectory() as tmp:
        base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 192,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                "vocab_size": 4096, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2}

        # llama-ReLU, SentencePiece, two shards.
        relu = dict(base, hidden_act="relu", _act="relu")
        w = make_weights(relu, 1)
        want = torch_forward(relu, w, tokens)
        src = os.path.join(tmp, "relu-llama")
        write_folder(src, relu, w, "spm", shards=2)
        out = os.path.join(tmp, "relu-f32.gguf")
        p = run(convert, src, "-o", out, "--outtype", "f32")
        check(p.returncode == 0, f"relu-llama (2 shards, SentencePiece) converts ({p.stderr[-300:]!r})")
        got, err = dump_logits(bin_dir, out, tokens, tmp)
        check_logits("relu-llama f32", got, err, want)
        out_t = os.path.join(tmp, "relu-down-t.gguf")
        p = run(convert, src, "-o", out_t, "--outtype", "f32", "--down-t")
        with open(out_t, "rb") as f:
            magic = f.read(4)
        check(p.returncode == 0 and magic == b"PWRI", f"--down-t writes a PWRI file ({magic!r})")
        got, err = dump_logits(bin_dir, out_t, tokens, tmp, sparse="oracle")
        check_logits("relu-llama --down-t, --sparse oracle", got, err, want)
        # The dead end this tool removes: the converted file trains predictors and runs them.
        pred = os.path.join(tmp, "relu-pred.gguf")
        p = run(os.path.join(bin_dir, "pi-train-predictor"), "-m", out_t, "-f",
                os.path.join(ROOT, "models", "kjv-valid.txt"), "-o", pred, "--max-tokens", "2000",
                "--epochs", "2", "--rank", "32")
        q = run(os.path.join(bin_dir, "pi-run"), "-m", pred, "--sparse", "predictor", "-p",
                "In the beginning", "-n", "8") if p.returncode == 0 else p
        r2 = run(os.path.join(bin_dir, "pi-train-predictor"), "-m", pred, "-f",
                 os.path.join(ROOT, "models", "kjv-valid.txt"), "-o", pred + ".2.gguf",
                 "--max-tokens", "600", "--epochs", "1", "--rank", "32")
        check(r2.returncode == 0 and "already has predictors for 2 of 2 layers" in r2.stderr,
              f"pi-train-predictor says when it replaces a file's predictors ({r2.stderr[-300:]!r})")
        check(p.returncode == 0 and q.returncode == 0,
              f"--down-t output: pi-train-predictor trains it, pi-run --sparse predictor runs it "
              f"({(p.stderr + q.stderr)[-200:]!r})")
        out_q = os.path.join(tmp, "relu-q8.gguf")
        p = run(convert, src, "-o", out_q, "--outtype", "q8_0", "--down-t")
        got, err = dump_logits(bin_dir, out_q, tokens, tmp, sparse="oracle")
        agree = got is not None and np.mean(got.argmax(1) == want.argmax(1))
        check(p.returncode == 0 and got is not None and agree >= 0.9 and rel_err(got, want) < 0.05,
              f"relu-llama q8_0 --down-t: loads, runs sparse, top tokens agree "
              f"({agree}, {rel_err(got, want) if got is not None else err!r})")

        # RoPE scaling: Llama 3.1's llama3 (llama.cpp's rope_freqs.weight; an original context
        # of 8 so that these 12 positions feel it) and linear (rope.scaling.type, .factor).
        for scaling in ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
                        {"rope_type": "linear", "factor": 4.0}):
            scaled = dict(relu, rope_scaling=scaling)
            want_s = torch_forward(scaled, w, tokens)
            src_s = os.path.join(tmp, "rope-" + scaling["rope_type"])
            write_folder(src_s, scaled, w, "spm")
            out_s = src_s + ".gguf"
            p = run(convert, src_s, "-o", out_s, "--outtype", "f32")
            check(p.returncode == 0, f"rope_scaling {scaling['rope_type']} converts "
                                     f"({p.stderr[-300:]!r})")
            got, err = dump_logits(bin_dir, out_s, tokens, tmp)
            check(rel_err(want_s, want) > 1e-2, f"rope_scaling {scaling['rope_type']} moves "
                                                f"torch's logits ({rel_err(want_s, want):.1e})")
            check_logits("relu-llama, rope_scaling " + scaling["rope_type"], got, err, want_s)

        # A file that names the wrong activation (as llama.cpp's, which names none, reads
        # as SiLU): --ffn-activation on the tools, local workers included, or the file fixed
        # once with pi-quantize --set-activation.
        wrong = os.path.join(tmp, "relu-as-silu.gguf")
        p = run(convert, src, "-o", wrong, "--outtype", "f32", "--down-t", "--ffn-activation", "silu")
        got, err = dump_logits(bin_dir, wrong, tokens, tmp)
        check(p.returncode == 0 and got is not None and rel_err(got, want) > 1e-2,
              "a relu model stored as silu gives other logits")
        out_w = os.path.join(tmp, "logits.bin")
        p = run(os.path.join(bin_dir, "pi-dump-logits"), "-m", wrong, "--tokens",
                ",".join(map(str, tokens)), "--out", out_w, "-ctk", "f32", "-ctv", "f32",
                "--ffn-activation", "relu")
        got = np.fromfile(out_w, dtype=np.float32).reshape(len(tokens), -1) if p.returncode == 0 else None
        check(got is not None and rel_err(got, want) < 1e-4 and "overrides the file's silu" in p.stderr,
              f"--ffn-activation relu: torch's logits again, with a warning ({p.stderr[-200:]!r})")
        fixed = os.path.join(tmp, "relu-fixed.gguf")
        p = run(os.path.join(bin_dir, "pi-quantize"), wrong, fixed, "f16", "--set-activation", "relu")
        got, err = dump_logits(bin_dir, fixed, tokens, tmp, sparse="oracle")
        check(p.returncode == 0 and got is not None and rel_err(got, want) < 1e-2,
              f"pi-quantize --set-activation relu fixes the file ({err or p.stderr[-200:]!r})")
        p = run(os.path.join(bin_dir, "pi-quantize"), wrong, os.path.join(tmp, "x.gguf"), "f16",
                "--set-activation", "tanh")
        check(p.returncode == 2 and "this gated FFN takes silu, relu, drelu or gelu" in p.stderr,
              "--set-activation tanh on a gated FFN is refused")

        def greedy(*args):
            q = run(os.path.join(bin_dir, "pi-run"), "-p", "In the beginning", "-n", "12", "--temp",
                    "0", "--ignore-eos", "--json", "-t", "2", *args)
            return json.loads(q.stdout)["generated_tokens"] if q.returncode == 0 else q.stderr

        a = greedy("-m", fixed, "--sparse", "oracle")
        b = greedy("-m", wrong, "--sparse", "oracle", "--ffn-activation", "relu", "--cpu-workers", "1")
        check(isinstance(a, list) and a == b,
              f"--ffn-activation reaches the local cpu worker: the fixed file's tokens ({a} / {b})")

        # The SentencePiece vocabulary: as the demo model's (made from the same file).
        with open(os.path.join(ROOT, "models", "kjv-valid.txt")) as f:
            lines = [l.rstrip("\n") for l in f][:300]
        a = tokenize_jsonl(bin_dir, out, lines, tmp, True)
        b = tokenize_jsonl(bin_dir, DEMO, lines, tmp, True)
        check(isinstance(a, list) and a == b and len(a) == 300,
              "SentencePiece: 300 lines tokenize as with the demo model's vocabulary")

        # llama-SiLU, GQA, tied embeddings, BPE tokenizer.json, F16 safetensors.
        bpe = make_bpe(" ".join(lines), 300)
        silu = dict(base, hidden_act="silu", _act="silu", num_key_value_heads=2,
                    tie_word_embeddings=True, vocab_size=len(bpe["model"]["vocab"]) + 2,
                    bos_token_id=len(bpe["model"]["vocab"]), eos_token_id=len(bpe["model"]["vocab"]) + 1)
        w = make_weights(silu, 2)
        w = {k: v.half().float() for k, v in w.items()}  # what F16 files hold
        btok = [t % silu["vocab_size"] for t in tokens]
        want = torch_forward(silu, w, btok)
        src = os.path.join(tmp, "silu-llama")
        write_folder(src, silu, w, bpe, dtype="F16")
        out = os.path.join(tmp, "silu-f32.gguf")
        p, got, err = convert_logits(bin_dir, tmp, src, out, btok, "--outtype", "f32")
        check_logits("silu-llama (GQA, tied, BPE, F16 safetensors)", got, err, want)
        ascii_lines = [l for l in lines if all(ord(c) < 128 for c in l)][:200]
        a = tokenize_jsonl(bin_dir, out, ascii_lines, tmp, False)
        check(isinstance(a, list) and a == [bpe_encode(bpe, s) for s in ascii_lines],
              f"BPE: {len(ascii_lines)} lines tokenize as the byte-level BPE reference")

        # Mistral-shaped, hidden_act silu overridden to relu.
        mistral = dict(base, architectures=["MistralForCausalLM"], hidden_act="silu", _act="relu",
                       num_key_value_heads=2)
        w = make_weights(mistral, 3)
        want = torch_forward(mistral, w, tokens)
        src = os.path.join(tmp, "mistral")
        write_folder(src, mistral, w, "spm")
        out = os.path.join(tmp, "mistral.gguf")
        p, got, err = convert_logits(bin_dir, tmp, src, out, tokens, "--outtype", "f32",
                                     "--ffn-activation", "relu")
        check_logits("Mistral-shaped, --ffn-activation relu (the override said)", got, err, want,
                     ok="overrides" in p.stderr)

        # generation_config.json: its ids win over config.json's, a list's second id is the
        # end of turn (generation stops there too); sampling defaults are not kept.
        with open(os.path.join(src, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": [2, 5, 6], "temperature": 0.6}, f)
        out_g = os.path.join(tmp, "mistral-gen.gguf")
        p = run(convert, src, "-o", out_g, "--outtype", "f32", "--ffn-activation", "relu")
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import pigguf
        m = pigguf.GGUFReader(out_g).metadata if p.returncode == 0 else {}
        check(m.get("tokenizer.ggml.eos_token_id") == 2 and m.get("tokenizer.ggml.eot_token_id") == 5
              and "lists 3 end ids" in p.stderr,
              f"generation_config.json's eos list -> eos 2, eot 5, the third named "
              f"({m.get('tokenizer.ggml.eos_token_id')}, {m.get('tokenizer.ggml.eot_token_id')}, "
              f"{p.stderr.strip()[-160:]!r})")
        with open(os.path.join(src, "generation_config.json"), "w") as f:
            f.write('{"eos_token_id": "two"}')
        p = run(convert, src, "-o", out_g + "2")
        check(p.returncode == 1 and 'generation_config.json: "eos_token_id" must be a token id'
              in p.stderr and not os.path.exists(out_g + "2"),
              f"a bad generation_config.json is named ({p.stderr.strip()[-120:]!r})")
        os.remove(os.path.join(src, "generation_config.json"))

        check_drelu(bin_dir, tmp, base, tokens)
        check_qwen2(bin_dir, tmp, base, tokens)
        check_qwen3(bin_dir, tmp, base, tokens)
        check_gemma(bin_dir, tmp, base, tokens, "Gemma2ForCausalLM")
        check_gemma(bin_dir, tmp, base, tokens, "Gemma3ForCausalLM")
        check_phi3(bin_dir, tmp, base, tokens)
        check_falcon(bin_dir, tmp, tokens)

        # The original's torch files: predictors and activation counts of a 12-layer model
        # (layer 10 sorts before layer 2 by name: they must land by number).
        deep = dict(base, hidden_act="relu", _act="relu", num_hidden_layers=12, hidden_size=32,
                    intermediate_size=64, num_attention_heads=2, num_key_value_heads=2)
        w = make_weights(deep, 5)
        src = os.path.join(tmp, "deep")
        write_folder(src, deep, w, "spm")
        preds, acts = os.path.join(tmp, "predictor"), os.path.join(tmp, "activation")
        os.makedirs(preds)
        os.makedirs(acts)
        g = torch.Generator().manual_seed(6)
        fc = {}
        for l in range(12):
            fc[l] = (torch.randn(16, 32, generator=g), torch.randn(64, 16, generator=g))
            torch.save({"fc1.weight": fc[l][0], "fc2.weight": fc[l][1]},
                       os.path.join(preds, "model_%d.pt" % l))
            torch.save(torch.arange(64, dtype=torch.int64) * (l + 1) % 97,
                       os.path.join(acts, "activation_%d.pt" % l))
        with open(os.path.join(preds, "config.json"), "w") as f:
            json.dump({"sparse_threshold": 0.25}, f)
        out = os.path.join(tmp, "deep.gguf")
        p = run(convert, src, "-o", out, "--down-t", "--predictors", preds, "--activations", acts)
        check(p.returncode == 0, f"--predictors and --activations convert ({p.stderr[-300:]!r})")
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import pigguf
        r = pigguf.GGUFReader(out) if p.returncode == 0 else None
        same = r is not None and all(
            np.allclose(r.tensors["blk.%d.fc1.weight" % l].to_f32(), fc[l][0].numpy(), atol=1e-3) and
            np.allclose(r.tensors["blk.%d.fc2.weight" % l].to_f32(), fc[l][1].numpy(), atol=1e-3)
            for l in range(12))
        check(same and abs(r.metadata["powerinfer.sparse_threshold"] - 0.25) < 1e-6,
              "each layer's fc1/fc2 as saved (by number: layer 10 is model_10.pt), the threshold")
        stats = out[:-len(".gguf")] + ".stats.gguf"
        s_r = pigguf.GGUFReader(stats) if os.path.exists(stats) else None
        check(s_r is not None and all(
            np.array_equal(np.frombuffer(s_r.tensors["blk.%d.ffn_fire_count" % l].data, "<i4"),
                           np.arange(64) * (l + 1) % 97) for l in range(12)),
              "activation_N.pt -> the stats file's layer N counts")
        q = run(os.path.join(bin_dir, "pi-place"), "-m", out, "--vram-budget", "2M", "-o",
                os.path.join(tmp, "deep.plan.gguf"))
        check(q.returncode == 0, f"pi-place takes the imported statistics ({q.stderr[-200:]!r})")
        q = run(os.path.join(bin_dir, "pi-run"), "-m", out, "--sparse", "predictor", "-p", "In the",
                "-n", "4")
        check(q.returncode == 0, f"pi-run --sparse predictor runs it ({q.stderr[-300:]!r})")
        os.remove(os.path.join(preds, "model_5.pt"))
        p = run(convert, src, "-o", os.path.join(tmp, "deep2.gguf"), "--down-t", "--predictors", preds)
        check(p.returncode == 1 and "model_5.pt is missing" in p.stderr,
              f"a missing predictor file is named ({p.stderr.strip()[-160:]!r})")
        # A pickle that would run code is refused, not run.
        marker = os.path.join(tmp, "pwned")

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch " + marker,))
        torch.save({"fc1.weight": Evil(), "fc2.weight": fc[5][1]}, os.path.join(preds, "model_5.pt"))
        p = run(convert, src, "-o", os.path.join(tmp, "deep3.gguf"), "--down-t", "--predictors", preds)
        check(p.returncode == 1 and "cannot load as plain tensors" in p.stderr
              and not os.path.exists(marker),
              f"a code-running pickle is refused, unexecuted ({p.stderr.strip()[-160:]!r})")
        p = run(convert, src, "-o", os.path.join(tmp, "deep4.gguf"), "--predictors", preds)
        check(p.returncode == 1 and "--predictors needs --down-t" in p.stderr,
              "--predictors without --down-t is refused")

        # Malformed folders: each its own error, nothing written.
        def error_of(edit, name):
            d = os.path.join(tmp, "bad-" + name)
            cfg = dict(relu)
            ww = make_weights(cfg, 4)
            write_folder(d, cfg, ww, "spm")
            edit(d, cfg, ww)
            o = os.path.join(tmp, "bad-%s.gguf" % name)
            p = run(convert, d, "-o", o)
            return p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "", os.path.exists(o)

        def drop_tensor(d, cfg, ww):
            del ww["model.layers.1.mlp.up_proj.weight"]
            write_safetensors(os.path.join(d, "model.safetensors"), ww)

        def arch(d, cfg, ww):
            cfg["architectures"] = ["GPTNeoXForCausalLM"]
            write_folder(d, cfg, ww, "spm")

        def shape(d, cfg, ww):
            cfg["intermediate_size"] = 256
            write_folder(d, cfg, ww, "spm")

        def truncate(d, cfg, ww):
            path = os.path.join(d, "model.safetensors")
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:100])

        def bad_index(d, cfg, ww):
            write_folder(d, cfg, ww, "spm", shards=2)
            os.remove(os.path.join(d, "model.safetensors"))
            idx = os.path.join(d, "model.safetensors.index.json")
            with open(idx) as f:
                j = json.load(f)
            j["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
            j["weight_map"]["model.layers.0.input_layernorm.weight"] = "model-00002-of-00002.safetensors"
            with open(idx, "w") as f:
                json.dump(j, f)

        def no_tokenizer(d, cfg, ww):
            os.remove(os.path.join(d, "tokenizer.model"))

        for edit, name, words in ((drop_tensor, "missing", "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
                                  (arch, "arch", "architecture GPTNeoXForCausalLM is not one pi-convert knows"),
                                  (shape, "shape", "has shape [192, 64], config.json implies [256, 64]"),
                                  (truncate, "truncated", "truncated"),
                                  (bad_index, "index", "which does not hold it"),
                                  (no_tokenizer, "tokenizer", "no tokenizer.model or tokenizer.json")):
            rc, msg, wrote = error_of(edit, name)
            check(rc == 1 and words in msg and not wrote, f"{name}: refused ({msg!r})")
    finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Trains the demo model (a small sparse ReLU llama on the KJV Bible) and exports it as GGUF.

One command, deterministic for a seed:

    /usr/bin/python3 tools/train_demo_model.py            # full run (~35 min on 1 core)
    /usr/bin/python3 tools/train_demo_model.py --stage tokenizer   # only the tokenizer

Stages, in order: text (from Debian's `bible` program, bible-kjv), tokenizer (sentencepiece
BPE, saved first because other work depends on it), model training (torch, CPU), GGUF export
through tools/pigguf.py, and a check that the independent numpy reference
(tests/reference/llama_ref.py) reproduces the torch logits from the exported file.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

VALID_EVERY = 50  # every 50th verse (1-based index % 50 == 0) is held out for validation
BIBLE_RANGE = "Genesis 1:1-Revelation 22:21"
VERSE_REF = re.compile(r"^[1-3]?[A-Za-z]+\d+:\d+ ")


# --------------------------------------------------------------------------- text

def load_verses():
    """Returns the KJV as a list of verses, references stripped, in canonical order."""
    raw = subprocess.run(["bible", "-f", BIBLE_RANGE], check=True, capture_output=True,
                         text=True).stdout
    verses = []
    for line in raw.splitlines():
        m = VERSE_REF.match(line)
        if not m:
            raise RuntimeError("unexpected line from bible: %r" % line[:80])
        verses.append(line[m.end():].strip())
    if len(verses) != 31102:
        raise RuntimeError("expected 31102 verses, got %d" % len(verses))
    return verses


def split_verses(verses):
    train = [v for i, v in enumerate(verses) if (i + 1) % VALID_EVERY != 0]
    valid = [v for i, v in enumerate(verses) if (i + 1) % VALID_EVERY == 0]
    return train, valid


# --------------------------------------------------------------------------- tokenizer

def train_tokenizer(train_verses, model_path, vocab_size):
    import io
    import sentencepiece as spm
    # Sentences from an iterator and the model into memory: the model file then records no
    # temporary paths, so it is byte-identical from run to run.
    model = io.BytesIO()
    # identity normalization: llama.cpp's SPM algorithm (which our C++ tokenizer reproduces)
    # matches sentencepiece BPE only without NFKC.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_verses), model_writer=model, model_type="bpe",
        vocab_size=vocab_size, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
        num_threads=1, minloglevel=2)
    write_if_changed(model_path, model.getvalue())


def write_if_changed(path, data):
    """Other tools read these files while a training run may be starting: leave an identical
    file alone, and replace a different one atomically."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def encode_text(sp, verses):
    """The token stream a llama.cpp-style tool sees for the text file: the verses joined by
    newlines, encoded as ONE string (one dummy-prefix space at the start; a verse after a
    newline starts without the space; the newline itself is the byte token <0x0A>)."""
    return np.asarray(sp.encode("\n".join(verses) + "\n"), dtype=np.int64)


# --------------------------------------------------------------------------- model

class Config:
    def __init__(self, **kw):
        self.n_vocab = 4096
        self.n_embd = 256
        self.n_layer = 6
        self.n_head = 8
        self.n_head_kv = 4
        self.n_ff = 768
        self.n_ctx = 256
        self.rope_theta = 10000.0
        self.norm_eps = 1e-5
        self.activation = "relu"  # "silu" | "relu" | "drelu"
        self.tied = False
        self.__dict__.update(kw)

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


def matmul_ops(use_mkldnn):
    """(linear, bmm_t): y = x W^T and C = A B^T (batched), with autograd.

    Debian's torch does dense products through netlib's reference BLAS (~6 GFLOP/s on one
    core); oneDNN, which the same torch links, runs them ~25x faster. So when it is there,
    both products and their gradients go through torch's mkldnn_linear."""
    import torch
    import torch.nn.functional as F
    if not use_mkldnn:
        return F.linear, lambda a, b: a @ b.transpose(-1, -2)
    L = torch._C._nn.mkldnn_linear

    def mm_t(a, b):  # a [M, K] @ b[P, K]^T
        return L(a.contiguous().to_mkldnn(), b.contiguous()).to_dense()

    def bmm_t(a, b):  # a [N, M, K] @ b [N, P, K]^T, looped (no batched oneDNN entry point)
        return torch.stack([mm_t(a[i], b[i]) for i in range(a.shape[0])])

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            x2 = x.reshape(-1, x.shape[-1])
            ctx.save_for_backward(x2, w)
            ctx.shape = x.shape
            return mm_t(x2, w).reshape(*x.shape[:-1], w.shape[0])

        @staticmethod
        def backward(ctx, dy):
            x2, w = ctx.saved_tensors
            dy2 = dy.reshape(-1, w.shape[0])
            dx = mm_t(dy2, w.t()).reshape(ctx.shape)
            dw = mm_t(dy2.t(), x2.t())
            return dx, dw

    class BmmT(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return bmm_t(a, b)

        @staticmethod
        def backward(ctx, dc):
            a, b = ctx.saved_tensors
            return bmm_t(dc, b.transpose(1, 2)), bmm_t(dc.transpose(1, 2), a.transpose(1, 2))

    def bmm4(a, b):  # [B, H, M, K] x [B, H, P, K] -> [B, H, M, P]
        B, H = a.shape[0], a.shape[1]
        out = BmmT.apply(a.reshape(B * H, a.shape[2], a.shape[3]),
                         b.reshape(B * H, b.shape[2], b.shape[3]))
        return out.reshape(B, H, a.shape[2], b.shape[2])

    return Linear.apply, bmm4


def build_model(cfg, use_mkldnn=True):
    """A llama-family torch model laid out exactly as llama.cpp's arch "llama" expects:
    Linear weights are [out, in] (= GGUF ne [in, out]); RoPE rotates adjacent pairs, so
    Wq/Wk export with no permutation."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    use_mkldnn = use_mkldnn and torch.backends.mkldnn.is_available()
    linear, bmm_t = matmul_ops(use_mkldnn)

    class Linear(nn.Linear):
        def forward(self, x):
            return linear(x, self.weight)

    class RMSNorm(nn.Module):
        def __init__(self, d, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rope(x, cos, sin):
        # x: [B, H, T, hd]; pairs (2i, 2i+1) rotate by angle pos * theta^(-2i/hd).
        x0 = x[..., 0::2]
        x1 = x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, hd = cfg.n_embd, cfg.head_dim
            self.attn_norm = RMSNorm(d, cfg.norm_eps)
            self.wq = Linear(d, cfg.n_head * hd, bias=False)
            self.wk = Linear(d, cfg.n_head_kv * hd, bias=False)
            self.wv = Linear(d, cfg.n_head_kv * hd, bias=False)
            self.wo = Linear(cfg.n_head * hd, d, bias=False)
            self.ffn_norm = RMSNorm(d, cfg.norm_eps)
            self.gate = Linear(d, cfg.n_ff, bias=False)
            self.up = Linear(d, cfg.n_ff, bias=False)
            self.down = Linear(cfg.n_ff, d, bias=False)

        def forward(self, h, cos, sin, mask, acts):
            B, T, _ = h.shape
            hd, nh, nkv = cfg.head_dim, cfg.n_head, cfg.n_head_kv
            x = self.attn_norm(h)
            q = rope(self.wq(x).view(B, T, nh, hd).transpose(1, 2), cos, sin)
            k = rope(self.wk(x).view(B, T, nkv, hd).transpose(1, 2), cos, sin)
            v = self.wv(x).view(B, T, nkv, hd).transpose(1, 2)
            if nkv != nh:  # query head j reads kv head j // (nh / nkv), as llama.cpp
                k = k.repeat_interleave(nh // nkv, dim=1)
                v = v.repeat_interleave(nh // nkv, dim=1)
            s = bmm_t(q, k) * (1.0 / math.sqrt(hd)) + mask[:T, :T]
            a = bmm_t(F.softmax(s, dim=-1), v.transpose(-1, -2))
            a = a.transpose(1, 2).reshape(B, T, nh * hd)
            h = h + self.wo(a)
            x = self.ffn_norm(h)
            g = self.gate(x)
            u = self.up(x)
            if cfg.activation == "silu":
                f = F.silu(g) * u
            elif cfg.activation == "relu":
                f = F.relu(g) * u
            else:
                f = F.relu(g) * F.relu(u)
            if acts is not None:
                acts.append((g, f))
            return h + self.down(f)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.tok = nn.Embedding(cfg.n_vocab, cfg.n_embd)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
            self.out = None if cfg.tied else Linear(cfg.n_embd, cfg.n_vocab, bias=False)
            half = cfg.head_dim // 2
            inv = cfg.rope_theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / cfg.head_dim)
            ang = torch.arange(cfg.n_ctx, dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", torch.cos(ang).float(), persistent=False)
            self.register_buffer("sin", torch.sin(ang).float(), persistent=False)
            self.register_buffer("mask", torch.triu(torch.full((cfg.n_ctx, cfg.n_ctx),
                                                               float("-inf")), 1),
                                 persistent=False)
            std = 0.02
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, std)
                    if name.endswith("wo.weight") or name.endswith("down.weight"):
                        p.data.mul_(1.0 / math.sqrt(2 * cfg.n_layer))

        def forward(self, idx, acts=None):
            T = idx.shape[1]
            h = self.tok(idx)
            cos, sin = self.cos[:T], self.sin[:T]
            for b in self.blocks:
                h = b(h, cos, sin, self.mask, acts)
            h = self.norm(h)
            return linear(h, self.tok.weight) if self.out is None else self.out(h)

    return Model()


# --------------------------------------------------------------------------- export

def tokenizer_metadata(tok_path):
    """(key, type, value) triples for the GGUF tokenizer keys. Uses tools/spm_vocab.py (the
    tokenizer's own exporter) when present; otherwise the same thing written here."""
    try:
        from spm_vocab import spm_gguf_metadata
        return spm_gguf_metadata(tok_path), "tools/spm_vocab.py"
    except ImportError:
        pass
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    md = [
        ("tokenizer.ggml.model", "string", "llama"),
        ("tokenizer.ggml.tokens", "string", tokens),
        ("tokenizer.ggml.scores", "f32", scores),
        ("tokenizer.ggml.token_type", "i32", types),
        ("tokenizer.ggml.bos_token_id", "u32", sp.bos_id()),
        ("tokenizer.ggml.eos_token_id", "u32", sp.eos_id()),
        ("tokenizer.ggml.unknown_token_id", "u32", sp.unk_id()),
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", False),
        ("tokenizer.ggml.add_space_prefix", "bool", True),
    ]
    return md, "train_demo_model.py (tools/spm_vocab.py not found)"


def export_gguf(model, cfg, path, name, tok_path=None, wtype="f16", down_t=False):
    """Writes the model as a llama GGUF: `wtype` matrices, f32 norms. down_t: store the FFN
    down projection as PowerInfer's ffn_down_t ([n_embd, n_ff], row i = neuron i) instead."""
    import pigguf
    w = pigguf.GGUFWriter(path, "llama")
    w.add_string("general.name", name)
    w.add_u32("general.file_type", pigguf.FILE_TYPE[wtype])
    w.add_u32("llama.context_length", cfg.n_ctx)
    w.add_u32("llama.embedding_length", cfg.n_embd)
    w.add_u32("llama.block_count", cfg.n_layer)
    w.add_u32("llama.feed_forward_length", cfg.n_ff)
    w.add_u32("llama.attention.head_count", cfg.n_head)
    w.add_u32("llama.attention.head_count_kv", cfg.n_head_kv)
    w.add_u32("llama.rope.dimension_count", cfg.head_dim)
    w.add_f32("llama.rope.freq_base", cfg.rope_theta)
    w.add_f32("llama.attention.layer_norm_rms_epsilon", cfg.norm_eps)
    w.add_u32("llama.vocab_size", cfg.n_vocab)
    w.add_string("pi.ffn_activation", cfg.activation)
    source = None
    if tok_path:
        md, source = tokenizer_metadata(tok_path)
        for key, typ, value in md:
            if isinstance(value, (list, tuple)):
                w.add_array(key, value, typ)
            else:
                getattr(w, "add_" + {"string": "string", "u32": "u32", "i32": "i32",
                                     "f32": "f32", "bool": "bool", "u64": "u64"}[typ])(key, value)

    def t(x):
        return x.detach().cpu().float().numpy()

    w.add_tensor("token_embd.weight", t(model.tok.weight), wtype)
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", t(b.attn_norm.weight), "f32")
        w.add_tensor(p + "attn_q.weight", t(b.wq.weight), wtype)
        w.add_tensor(p + "attn_k.weight", t(b.wk.weight), wtype)
        w.add_tensor(p + "attn_v.weight", t(b.wv.weight), wtype)
        w.add_tensor(p + "attn_output.weight", t(b.wo.weight), wtype)
        w.add_tensor(p + "ffn_norm.weight", t(b.ffn_norm.weight), "f32")
        w.add_tensor(p + "ffn_gate.weight", t(b.gate.weight), wtype)
        w.add_tensor(p + "ffn_up.weight", t(b.up.weight), wtype)
        if down_t:
            w.add_tensor(p + "ffn_down_t.weight", t(b.down.weight).T.copy(), wtype)
        else:
            w.add_tensor(p + "ffn_down.weight", t(b.down.weight), wtype)
    w.add_tensor("output_norm.weight", t(model.norm.weight), "f32")
    if model.out is not None:
        w.add_tensor("output.weight", t(model.out.weight), wtype)
    w.write()
    return source


def rounded_copy(model, cfg, wtype):
    """A copy of the model whose matrices went through `wtype` and back (norms stay f32):
    the torch twin of the exported file, for a tight comparison with the reference."""
    import copy
    import torch
    import pigguf
    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2:
                a = p.detach().numpy()
                p.copy_(torch.from_numpy(
                    pigguf.decode(pigguf.encode(a, wtype), wtype, a.size).reshape(a.shape)))
    return m


def verify_export(model, cfg, path, tokens, wtype):
    """The numpy reference on the exported file vs the torch model, same tokens."""
    import torch
    from llama_ref import LlamaRef
    ref = LlamaRef(path).forward(tokens)
    with torch.no_grad():
        idx = torch.tensor([tokens])
        exact = model(idx)[0].numpy()
        twin = rounded_copy(model, cfg, wtype)(idx)[0].numpy()
    scale = float(np.abs(twin).max())
    return (float(np.abs(ref - twin).max()) / scale, float(np.abs(ref - exact).max()) / scale,
            scale)


# --------------------------------------------------------------------------- training

def batches(stream, bos, batch, seq, rng):
    """Random windows; each sample is [BOS] + seq-1 stream tokens, predicting the stream."""
    n = len(stream) - seq
    while True:
        starts = rng.integers(0, n, size=batch)
        y = np.stack([stream[s:s + seq] for s in starts])
        x = np.concatenate([np.full((batch, 1), bos), y[:, :-1]], axis=1)
        yield x, y


def evaluate(model, stream, bos, seq, max_windows=None):
    """Mean next-token loss over consecutive windows of the stream (each led by BOS) and
    per-layer FFN sparsity: the fraction of (token, neuron) whose gate is <= 0 (relu
    output exactly 0, the neuron is skipped), and of exact zeros in the hidden activation."""
    import torch
    import torch.nn.functional as F
    n_win = (len(stream)) // seq
    if max_windows:
        n_win = min(n_win, max_windows)
    tot, cnt = 0.0, 0
    L = model.cfg.n_layer
    gate_zero = np.zeros(L)
    act_zero = np.zeros(L)
    n_act = 0
    model.eval()
    with torch.no_grad():
        for b0 in range(0, n_win, 16):
            ws = range(b0, min(n_win, b0 + 16))
            y = np.stack([stream[w * seq:(w + 1) * seq] for w in ws])
            x = np.concatenate([np.full((len(ws), 1), bos), y[:, :-1]], axis=1)
            acts = []
            logits = model(torch.from_numpy(x), acts)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   torch.from_numpy(y).reshape(-1), reduction="sum")
            tot += float(loss)
            cnt += y.size
            for li, (g, f) in enumerate(acts):
                gate_zero[li] += float((g <= 0).sum())
                act_zero[li] += float((f == 0).sum())
            n_act += y.size * model.cfg.n_ff
    model.train()
    return tot / cnt, gate_zero / n_act, act_zero / n_act


def generate(model, sp, prompt, n_new):
    import torch
    ids = [sp.bos_id()] + sp.encode(prompt)
    model.eval()
    with torch.no_grad():
        for _ in range(n_new):
            ctx = ids[-model.cfg.n_ctx:]
            nxt = int(model(torch.tensor([ctx]))[0, -1].argmax())
            if nxt == sp.eos_id():
                break
            ids.append(nxt)
    model.train()
    return ids, sp.decode(ids[1:])


def train(args, cfg, sp, train_stream, valid_stream, log):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = build_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log("model: %d params (%.2fM); %d layers, n_embd %d, heads %d/%d, n_ff %d, ctx %d, %s"
        % (n_params, n_params / 1e6, cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv,
           cfg.n_ff, cfg.n_ctx, cfg.activation))
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    bos = sp.bos_id()
    it = batches(train_stream, bos, args.batch, args.seq, rng)
    warm = max(1, int(args.steps * 0.03))
    l1_warm = max(1, int(args.steps * args.l1_warmup))
    t0 = time.time()
    tok_per_step = args.batch * args.seq
    ema = None
    for step in range(1, args.steps + 1):
        if step <= warm:
            lr = args.lr * step / warm
        else:
            frac = (step - warm) / max(1, args.steps - warm)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(it)
        acts = []
        logits = model(torch.from_numpy(x), acts)
        ce = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), torch.from_numpy(y).reshape(-1))
        # L1 on the FFN hidden activation (relu(gate)*up), ramped in so the network first
        # learns, then concentrates its FFN on few neurons per token.
        l1 = sum(f.abs().mean() for _, f in acts) / cfg.n_layer
        coef = args.l1 * min(1.0, step / l1_warm)
        loss = ce + coef * l1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = float(ce) if ema is None else 0.95 * ema + 0.05 * float(ce)
        if step % args.log_every == 0 or step == args.steps:
            el = time.time() - t0
            spars = np.mean([float((g <= 0).float().mean()) for g, _ in acts])
            log("step %5d/%d  ce %.4f (ema %.4f)  l1 %.4f  gate<=0 %.3f  lr %.2e  %.0f tok/s  "
                "elapsed %.0fs  ETA %.0fs" % (step, args.steps, float(ce), ema, float(l1), spars,
                                               lr, step * tok_per_step / el, el,
                                               el / step * (args.steps - step)))
        if args.eval_every and step % args.eval_every == 0 and step != args.steps:
            vl, gz, _ = evaluate(model, valid_stream, bos, args.seq, max_windows=64)
            log("  eval @%d: val loss %.4f (ppl %.2f), gate<=0 per layer %s"
                % (step, vl, math.exp(vl), " ".join("%.3f" % z for z in gz)))
    return model, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["text", "tokenizer", "all"], default="all",
                    help="'text': only write the texts; 'tokenizer': also "
                         "models/demo-tokenizer.model")
    ap.add_argument("--train-text", help="also write the training verses here, one per line "
                                         "(the corpus the demo's predictors are trained on)")
    ap.add_argument("--models-dir", default=os.path.join(REPO, "models"))
    ap.add_argument("--out", help="GGUF path (default MODELS_DIR/demo-kjv-f16.gguf)")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256, help="training window (<= n_ctx)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--l1", type=float, default=0.15,
                    help="coefficient of the L1 penalty on FFN activations (0 = off)")
    ap.add_argument("--l1-warmup", type=float, default=0.2,
                    help="fraction of the steps over which the L1 coefficient ramps up")
    ap.add_argument("--activation", choices=["relu", "silu", "drelu"], default="relu",
                    help="the FFN's gate activation (silu: a dense model like Llama's, for "
                         "--sparse cats; train it with --l1 0)")
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-head-kv", type=int, default=4)
    ap.add_argument("--n-ff", type=int, default=768)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--name", default="pi-demo-kjv")
    ap.add_argument("--checkpoint", help="also save the torch state dict here")
    ap.add_argument("--load", help="skip training: load this state dict, evaluate, export")
    args = ap.parse_args()

    def log(msg):
        print(msg, flush=True)

    t0 = time.time()
    verses = load_verses()
    train_v, valid_v = split_verses(verses)
    os.makedirs(args.models_dir, exist_ok=True)
    write_if_changed(os.path.join(args.models_dir, "kjv-valid.txt"),
                     ("\n".join(valid_v) + "\n").encode("utf-8"))
    if args.train_text:
        write_if_changed(args.train_text, ("\n".join(train_v) + "\n").encode("utf-8"))
    if args.stage == "text":
        return
    tok_path = os.path.join(args.models_dir, "demo-tokenizer.model")
    train_tokenizer(train_v, tok_path, args.vocab)
    log("tokenizer: %s (%.1f s)" % (tok_path, time.time() - t0))
    if args.stage == "tokenizer":
        return

    import sentencepiece as spm
    import torch
    torch.set_num_threads(args.threads)
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    train_stream = encode_text(sp, train_v)
    valid_stream = encode_text(sp, valid_v)
    log("text: %d train verses (%d tokens), %d valid verses (%d tokens)"
        % (len(train_v), len(train_stream), len(valid_v), len(valid_stream)))

    cfg = Config(n_vocab=sp.get_piece_size(), n_embd=args.n_embd, n_layer=args.n_layer,
                 n_head=args.n_head, n_head_kv=args.n_head_kv, n_ff=args.n_ff,
                 n_ctx=args.n_ctx, activation=args.activation)
    assert args.seq <= cfg.n_ctx
    if args.load:
        model = build_model(cfg)
        model.load_state_dict(torch.load(args.load))
        log("loaded %s (no training)" % args.load)
    else:
        model, train_s = train(args, cfg, sp, train_stream, valid_stream, log)
        log("training: %d steps x %d x %d tokens in %.0f s (%d threads)"
            % (args.steps, args.batch, args.seq, train_s, args.threads))
        if args.checkpoint:
            torch.save(model.state_dict(), args.checkpoint)
            log("checkpoint: %s" % args.checkpoint)

    vl, gz, az = evaluate(model, valid_stream, bos=sp.bos_id(), seq=args.seq)
    log("validation: loss %.4f, ppl %.2f (%d tokens, windows of %d)"
        % (vl, math.exp(vl), len(valid_stream) // args.seq * args.seq, args.seq))
    log("sparsity (fraction of FFN neurons with relu(gate x) = 0, validation set):")
    for i, (g, a) in enumerate(zip(gz, az)):
        log("  layer %d: %.1f%%  (hidden activation exactly 0: %.1f%%)" % (i, 100 * g, 100 * a))
    log("  mean:    %.1f%%" % (100 * np.mean(gz)))

    out = args.out or os.path.join(args.models_dir, "demo-kjv-f16.gguf")
    tmp_out = out + ".tmp%d" % os.getpid()  # replaces `out` only once verified
    source = export_gguf(model, cfg, tmp_out, args.name, tok_path, "f16")
    log("exported %s (%.1f MB); tokenizer metadata from %s"
        % (out, os.path.getsize(tmp_out) / 1e6, source))
    sentence = valid_v[0]
    checks = [("%r" % sentence[:40], [sp.bos_id()] + sp.encode(sentence)),
              ("the first validation window", [sp.bos_id()] + list(valid_stream[:cfg.n_ctx - 1]))]
    ok = True
    for what, tokens in checks:
        rel_twin, rel_exact, scale = verify_export(model, cfg, tmp_out, tokens, "f16")
        log("verify: numpy reference (tests/reference/llama_ref.py) on the GGUF vs torch, "
            "%d tokens of %s:" % (len(tokens), what))
        log("  vs torch with f16-rounded weights: max |diff| / max |logit| = %.2e" % rel_twin)
        log("  vs torch f32 weights:              max |diff| / max |logit| = %.2e  "
            "(max |logit| %.1f)" % (rel_exact, scale))
        ok = ok and rel_twin <= 1e-4
    if not ok:
        log("VERIFY FAILED: %s left for inspection" % tmp_out)
        sys.exit(1)
    os.replace(tmp_out, out)
    log("wrote %s" % out)
    for prompt in ("In the beginning", "And the LORD said unto Moses"):
        _, text = generate(model, sp, prompt, 48)
        log("sample (greedy): %r" % text)
    log("total %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks pi-tokenize against independent tokenizers on a few hundred varied strings.

SPM: Debian's python3-sentencepiece on the demo tokenizer (models/demo-tokenizer.model),
exported to a vocab-only GGUF with tools/spm_vocab.py. For every string: ids must equal
sentencepiece's exactly; pi-tokenize's decode of them must give the string back (and equal
sentencepiece's decode); streaming them token by token (TokenToPiece + Utf8Stream) must give
the same text plus the prefix space; with --bos the ids start with bos.

BPE: a small GPT-2 style vocabulary trained here on KJV text (a few hundred merges over the
byte alphabet), written as a gpt2 GGUF; a short reference encoder (python3-regex with the
GPT-2 / Llama 3 / Falcon patterns, the byte alphabet, lowest-rank-first merges) gives the
expected ids for pre-tokenizers "gpt2", "llama-bpe" and "falcon".

    /usr/bin/python3 tests/reference/check_tokenizer.py --pi-tokenize build/bin/pi-tokenize

Prints "N passed, M failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))

import pigguf  # noqa: E402
import spm_vocab  # noqa: E402


# --------------------------------------------------------------------------- test strings

SCRIPTS = [
    "Ἐν ἀρχῇ ἦν ὁ λόγος",                 # Greek (with combining-free precomposed marks)
    "В начале сотворил Бог небо и землю",  # Cyrillic
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים",             # Hebrew with points
    "في البدء خلق الله السماوات والأرض",    # Arabic
    "起初神创造天地。",                     # CJK
    "太初に神は天と地とを創造された",        # Japanese
    "태초에 하나님이 천지를 창조하시니라",   # Hangul
    "आदि में परमेश्वर ने आकाश और पृथ्वी की सृष्टि की",  # Devanagari
    "ในปฐมกาลพระเจ้าทรงเนรมิตสร้างฟ้าและแผ่นดิน",        # Thai
    "Au commencement, Dieu créa les cieux et la terre.",
    "Im Anfang schuf Gott Himmel und Erde. Straße Größe",
    "e\u0301 n\u0303 a\u030a",                                    # combining marks
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙",                                            # non-BMP letters
]
EMOJI = ["😀", "🙏", "👍🏽", "👨‍👩‍👧", "🇬🇧", "❤️", "✝", "🕊️", "🔥🔥🔥", "☃"]
WORDS = ("the and of to in that he shall unto for his i a lord they be is him not them it "
         "with all thou was which my me said but ye their have will thee from as are when "
         "this out were upon by man you israel king son up there people came had house on "
         "into one down god hath your before went so day men land also hand").split()
PUNCT = list(".,;:!?'\"()-[]{}<>/\\|@#$%^&*_+=~`")


def kjv_verses():
    path = os.path.join(REPO, "models", "kjv-valid.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    out = subprocess.run(["bible", "-f", "Genesis 1:1-Genesis 5:32"], check=True,
                         capture_output=True, text=True).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if " " in line]


def test_strings(verses, seed=1234):
    rng = random.Random(seed)
    s = ["", " ", "  ", "\n", "\t", "a", " a", "a ", "  leading", "trailing  ",
         "  both  ", "multiple   spaces   inside", "tab\tseparated\tvalues", "\t\tindent",
         "line1\nline2\n", "\n\nparagraph\n\n", "crlf\r\nline", "mixed \t \n whitespace",
         "0", "7", "42", "2024", "3.14159", "1,000,000", "v1.2.3", "12 345 6789",
         "Genesis 1:1", "Psalm 23:1-6", "I'M you're WE'LL they've she'd it's DON'T",
         "'quoted'", "\"double quoted\"", "ALL CAPS TEXT", "MiXeD CaSe", "a\u00a0b",
         "x\u2003y\u3000z", "<s>", "</s>", "<unk>", "<0x41>", "\u2581already escaped",
         "a" * 50, " " * 17 + "x", "!" * 9, "…", "«guillemets»", "– — ‑"]
    s += SCRIPTS
    s += EMOJI
    s += ["%s %s" % (a, b) for a, b in zip(SCRIPTS, EMOJI)]
    # Verses as they are, and varied: lower/upper case, doubled spaces, newlines, indents.
    for i, v in enumerate(verses[::4][:120]):
        kind = i % 6
        if kind == 1:
            v = v.lower()
        elif kind == 2:
            v = v.upper()
        elif kind == 3:
            v = v.replace(" ", "  ")
        elif kind == 4:
            v = v.replace(", ", ",\n").replace("; ", ";\t")
        elif kind == 5:
            v = "   " + v + "  "
        s.append(v)
    # Random ASCII word salad with punctuation, digits and whitespace.
    for _ in range(80):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.6:
                w = rng.choice(WORDS)
                parts.append(w.capitalize() if rng.random() < 0.2 else w)
            elif r < 0.75:
                parts.append(rng.choice(PUNCT) * rng.randint(1, 3))
            elif r < 0.9:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
            else:
                parts.append(rng.choice(EMOJI))
        seps = [" ", " ", " ", "", "  ", "\t", "\n", " \n "]
        text = "".join(p + rng.choice(seps) for p in parts)
        s.append(text)
    # Random code point soup from several blocks.
    pool = ("abcxyzABCXYZ0189 \t\n.,'!" + "".join(SCRIPTS) + "".join(EMOJI) +
            "\u00e9\u00df\u0153\u2603\u20ac\u00a9\u00b2\u00bd\u2160")
    for _ in range(60):
        s.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 30))))
    return s


# --------------------------------------------------------------------------- pi-tokenize

def run_jsonl(binary, model, mode, lines, extra=()):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False,
                                     encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
        path = f.name
    try:
        r = subprocess.run([binary, "-m", model, "--" + mode, path] + list(extra),
                           capture_output=True)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        raise RuntimeError("pi-tokenize --%s failed (%d): %s" %
                           (mode, r.returncode, r.stderr.decode("utf-8", "replace")))
    out = [json.loads(x) for x in r.stdout.decode("utf-8").splitlines()]
    if len(out) != len(lines):
        raise RuntimeError("pi-tokenize --%s: %d lines in, %d out" % (mode, len(lines),
                                                                       len(out)))
    return out


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.shown = 0

    def check(self, ok, what, detail):
        if ok:
            self.passed += 1
            return
        self.failed += 1
        if self.shown < 15:
            print("FAIL %s: %s" % (what, detail))
            self.shown += 1


# --------------------------------------------------------------------------- SPM

def check_spm(binary, model_path, strings, tally, tmp):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    gguf = os.path.join(tmp, "spm.gguf")
    w = pigguf.GGUFWriter(gguf, "llama")
    spm_vocab.add_to_writer(w, spm_vocab.spm_gguf_metadata(model_path))
    w.write()

    want = [sp.encode(s) for s in strings]
    got = run_jsonl(binary, gguf, "ids-jsonl", strings, ["--no-bos"])
    for s, w_ids, g_ids in zip(strings, want, got):
        tally.check(w_ids == g_ids, "spm encode %r" % s[:60],
                    "sentencepiece %s\n     pi-tokenize   %s" % (w_ids, g_ids))

    decoded = run_jsonl(binary, gguf, "decode-jsonl", got)
    for s, ids, d in zip(strings, got, decoded):
        # A literal U+2581 in the text comes back as a space, in sentencepiece too.
        tally.check(d == sp.decode(ids) and (d == s or "\u2581" in s),
                    "spm decode(encode(%r))" % s[:60],
                    "got %r, sentencepiece %r" % (d, sp.decode(ids)))

    streamed = run_jsonl(binary, gguf, "stream-jsonl", got)
    for s, ids, st in zip(strings, got, streamed):
        # Token by token, the first piece keeps the space that Encode prepended.
        lead = " " if ids and sp.id_to_piece(ids[0]).startswith("\u2581") else ""
        tally.check(st == lead + sp.decode(ids), "spm stream %r" % s[:60], "got %r" % st)

    few = strings[:40]
    with_bos = run_jsonl(binary, gguf, "ids-jsonl", few, ["--bos"])
    default = run_jsonl(binary, gguf, "ids-jsonl", few)  # add_bos_token is true
    for s, b, d in zip(few, with_bos, default):
        w_ids = [sp.bos_id()] + sp.encode(s)
        tally.check(b == w_ids and d == w_ids, "spm bos %r" % s[:40], "%s / %s" % (b, d))


# --------------------------------------------------------------------------- BPE reference

GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|"""
                r"""\s+(?!\S)|\s+""")
# llama.cpp's spelling of the Llama 3 pattern (case-insensitive contractions in ASCII).
LLAMA3_PATTERN = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"""
                  r"""[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

# llama.cpp's Falcon pre-tokenizer: three regexes in sequence (unicode_regex_split), each
# splitting every piece of the previous pass into its matches and the text between them.
FALCON_PATTERNS = [r"""[\p{P}\$\+<=>\^~\|`]+""",
                   r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)""",
                   r"""[0-9][0-9][0-9]"""]

# Strings full of what Falcon's punctuation and digit passes split.
FALCON_TRAIN = ["a+b=c; x<y>z ^~|` $5 $$x", "don't, 'tis it's", "1234567 12,345 ¹²³ ٣٤٥٦",
                "«quoted» — dash… ¿¡ (x)", "x  $$  y\t\tz ==> <= !=", "€100 ©2024 a_b 99999",
                "v1.2.3 10:30 2024-01-02 3.14159 +1000000", "a...b,,c;;d ''e'' \"f\""]


def pre_split(text, pattern):
    """Words of `text`: regex.findall for one pattern; for a list, the sequential split."""
    import regex
    if isinstance(pattern, str):
        return regex.findall(pattern, text)
    pieces = [text]
    for pat in pattern:
        out = []
        for p in pieces:
            pos = 0
            for m in regex.finditer(pat, p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


def bytes_to_unicode():
    """GPT-2's byte alphabet (encoder.py in openai/gpt-2)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()


def byte_spell(text):
    return "".join(BYTE_CHAR[b] for b in text.encode("utf-8"))


def train_bpe(texts, pattern, n_merges):
    """Classic BPE training over pre-tokenized, byte-spelled words; deterministic."""
    counts = {}
    for t in texts:
        for w in pre_split(t, pattern):
            key = tuple(byte_spell(w))
            counts[key] = counts.get(key, 0) + 1
    words = list(counts.items())
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words:
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = best[0] + best[1]
        new_words = []
        for w, c in words:
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words.append((tuple(out), c))
        words = new_words
    return merges


def bpe_reference_encode(text, pattern, ranks, vocab, ignore_merges):
    ids = []
    for w in pre_split(text, pattern):
        word = byte_spell(w)
        if ignore_merges and word in vocab:
            ids.append(vocab[word])
            continue
        parts = list(word)
        while len(parts) > 1:
            pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in
                     enumerate(zip(parts, parts[1:]))]
            rank, _ = min(pairs)
            if rank == 1 << 30:
                break
            pair = next((parts[i], parts[i + 1]) for r, i in pairs if r == rank)
            out, i = [], 0
            while i < len(parts):  # merge every occurrence, left to right (GPT-2's bpe())
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        for p in parts:
            if p in vocab:
                ids.append(vocab[p])
            else:
                ids.extend(vocab[c] for c in p)
    return ids


def check_bpe(binary, verses, strings, tally, tmp):
    for pre, pattern in (("gpt2", GPT2_PATTERN), ("llama-bpe", LLAMA3_PATTERN),
                         ("falcon", FALCON_PATTERNS)):
        # Falcon's passes split digits and punctuation apart: train on text full of them
        # (the corner cases below), so that merges across a wrong boundary change the ids.
        texts = verses[:300] + (FALCON_TRAIN * 5 if pre == "falcon" else [])
        merges = train_bpe(texts, pattern, 400 if pre != "falcon" else 700)
        tokens = [BYTE_CHAR[b] for b in range(256)]
        for a, b in merges:
            if a + b not in tokens:
                tokens.append(a + b)
        tokens.append("<|endoftext|>")
        types = [1] * (len(tokens) - 1) + [3]
        vocab = {t: i for i, t in enumerate(tokens)}
        ranks = {m: i for i, m in enumerate(merges)}
        gguf = os.path.join(tmp, "bpe-%s.gguf" % pre)
        w = pigguf.GGUFWriter(gguf, "gpt2")
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", pre)
        w.add_array("tokenizer.ggml.tokens", tokens, "string")
        w.add_array("tokenizer.ggml.token_type", types, "i32")
        w.add_array("tokenizer.ggml.merges", ["%s %s" % m for m in merges], "string")
        w.add_u32("tokenizer.ggml.bos_token_id", len(tokens) - 1)
        w.add_u32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
        w.write()

        # Test strings plus pre-tokenizer corner cases.
        extra = FALCON_TRAIN + ["I'M you'Re WE'LL they'VE", "a\r\n\r\nb", "x.\n\ny  \n z", "(hello",
                 "12345678", "\t\tword", "word\t\t", " \n ", "a  \n\n  b", "¿Qué?",
                 "DON'T 'S 's", "3rd 2nd 100th"]
        cases = strings + extra
        want = [bpe_reference_encode(s, pattern, ranks, vocab, pre == "llama-bpe")
                for s in cases]
        got = run_jsonl(binary, gguf, "ids-jsonl", cases, ["--no-bos"])
        for s, w_ids, g_ids in zip(cases, want, got):
            tally.check(w_ids == g_ids, "bpe[%s] encode %r" % (pre, s[:60]),
                        "reference   %s\n     pi-tokenize %s" % (w_ids, g_ids))
        decoded = run_jsonl(binary, gguf, "decode-jsonl", got)
        for s, d in zip(cases, decoded):
            tally.check(d == s, "bpe[%s] decode(encode(%r))" % (pre, s[:60]), "got %r" % d)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pi-tokenize", default=os.path.join(REPO, "build", "bin", "pi-tokenize"))
    ap.add_argument("--spm-model", default=os.path.join(REPO, "models", "demo-tokenizer.model"))
    args = ap.parse_args()
    for path, what in ((args.pi_tokenize, "pi-tokenize binary"),
                       (args.spm_model, "sentencepiece model")):
        if not os.path.exists(path):
            print("check_tokenizer: missing %s: %s" % (what, path), file=sys.stderr)
            return 2

    verses = kjv_verses()
    strings = test_strings(verses)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        check_spm(args.pi_tokenize, args.spm_model, strings, tally, tmp)
        check_bpe(args.pi_tokenize, verses, strings, tally, tmp)
    print("%d strings; %d passed, %d failed" % (len(strings), tally.passed, tally.failed))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())

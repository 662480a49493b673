#!/usr/bin/env python3
"""spm_vocab: a sentencepiece .model file -> llama.cpp's tokenizer.ggml.* GGUF metadata.

    from spm_vocab import spm_gguf_metadata, add_to_writer
    entries = spm_gguf_metadata("models/demo-tokenizer.model")
    # [(key, type, value)]: a scalar type ("string", "u32", "bool") with a scalar value, or
    # an array's element type ("string", "f32", "i32") with a list value.
    add_to_writer(gguf_writer, entries)

Command line: writes a vocab-only GGUF (general.architecture = "llama" plus the tokenizer
keys), which is what `pi-tokenize -m` needs:

    /usr/bin/python3 tools/spm_vocab.py models/demo-tokenizer.model models/demo-tokenizer.gguf

The .model file is a protobuf (sentencepiece_model.proto). It is parsed here directly from
the wire format, so neither python3-protobuf nor the sentencepiece module is needed, and the
piece types come out exactly as stored (the sentencepiece API cannot tell a user-defined
piece from a normal one). Sentencepiece's piece types use the same numbers as GGUF's
token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
"""

import os
import struct
import sys

# ModelProto field numbers (sentencepiece_model.proto).
_MODEL_PIECES = 1
_MODEL_NORMALIZER = 3
# ModelProto.SentencePiece
_PIECE_PIECE = 1
_PIECE_SCORE = 2
_PIECE_TYPE = 3
# NormalizerSpec
_NORM_NAME = 1
_NORM_ADD_DUMMY_PREFIX = 3
_NORM_REMOVE_EXTRA_WS = 4
_NORM_ESCAPE_WS = 5

TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = 1, 2, 3, 4, 5, 6


def _varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint at byte %d" % pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long at byte %d" % pos)


def _fields(buf):
    """Yields (field_number, wire_type, value) for one protobuf message.

    value is an int for varints, bytes for length-delimited fields and fixed32/fixed64.
    """
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("field %d runs past the end (byte %d)" % (field, pos))
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d for field %d" % (wire, field))
        yield field, wire, value


def read_model(model_path):
    """Returns (pieces, normalizer): pieces is a list of (piece, score, type); normalizer a
    dict with name, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces."""
    with open(model_path, "rb") as f:
        buf = f.read()
    pieces = []
    # proto2 defaults of NormalizerSpec.
    normalizer = {"name": "", "add_dummy_prefix": True, "remove_extra_whitespaces": True,
                  "escape_whitespaces": True}
    for field, wire, value in _fields(buf):
        if field == _MODEL_PIECES and wire == 2:
            piece, score, ptype = "", 0.0, TYPE_NORMAL
            for f2, w2, v2 in _fields(value):
                if f2 == _PIECE_PIECE and w2 == 2:
                    piece = v2.decode("utf-8")
                elif f2 == _PIECE_SCORE and w2 == 5:
                    score = struct.unpack("<f", v2)[0]
                elif f2 == _PIECE_TYPE and w2 == 0:
                    ptype = v2
            pieces.append((piece, score, ptype))
        elif field == _MODEL_NORMALIZER and wire == 2:
            for f2, w2, v2 in _fields(value):
                if f2 == _NORM_NAME and w2 == 2:
                    normalizer["name"] = v2.decode("utf-8")
                elif f2 == _NORM_ADD_DUMMY_PREFIX and w2 == 0:
                    normalizer["add_dummy_prefix"] = bool(v2)
                elif f2 == _NORM_REMOVE_EXTRA_WS and w2 == 0:
                    normalizer["remove_extra_whitespaces"] = bool(v2)
                elif f2 == _NORM_ESCAPE_WS and w2 == 0:
                    normalizer["escape_whitespaces"] = bool(v2)
    if not pieces:
        raise ValueError("%s: no pieces (not a sentencepiece model?)" % model_path)
    return pieces, normalizer


def spm_gguf_metadata(model_path):
    """The tokenizer.ggml.* entries for a sentencepiece model, as (key, type, value)."""
    pieces, norm = read_model(model_path)
    if norm["name"] not in ("identity", ""):
        # The C++ tokenizer (like llama.cpp's SPM) applies no normalization rule.
        print("spm_vocab: warning: %s uses normalization %r; only 'identity' is reproduced"
              % (model_path, norm["name"]), file=sys.stderr)
    if not norm["escape_whitespaces"]:
        print("spm_vocab: warning: escape_whitespaces is off; spaces will still become U+2581",
              file=sys.stderr)

    def find_type(t):
        ids = [i for i, p in enumerate(pieces) if p[2] == t]
        return ids

    unk = find_type(TYPE_UNKNOWN)
    if len(unk) != 1:
        raise ValueError("%s: expected one unknown piece, found %d" % (model_path, len(unk)))

    def find_piece(text, default):
        for i, p in enumerate(pieces):
            if p[0] == text and p[2] == TYPE_CONTROL:
                return i
        return default

    # sentencepiece names bos/eos "<s>"/"</s>" unless told otherwise; the ids are only in the
    # trainer spec, which the pieces mirror as control pieces.
    bos = find_piece("<s>", None)
    eos = find_piece("</s>", None)
    entries = [
        ("tokenizer.ggml.model", "string", "llama"),
        ("tokenizer.ggml.tokens", "string", [p[0] for p in pieces]),
        ("tokenizer.ggml.scores", "f32", [float(p[1]) for p in pieces]),
        ("tokenizer.ggml.token_type", "i32", [int(p[2]) for p in pieces]),
        ("tokenizer.ggml.unknown_token_id", "u32", unk[0]),
    ]
    if bos is not None:
        entries.append(("tokenizer.ggml.bos_token_id", "u32", bos))
    if eos is not None:
        entries.append(("tokenizer.ggml.eos_token_id", "u32", eos))
    entries += [
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", False),
        ("tokenizer.ggml.add_space_prefix", "bool", bool(norm["add_dummy_prefix"])),
        ("tokenizer.ggml.remove_extra_whitespaces", "bool",
         bool(norm["remove_extra_whitespaces"])),
    ]
    return entries


def add_to_writer(writer, entries):
    """Adds spm_gguf_metadata()'s entries to a pigguf.GGUFWriter."""
    for key, vtype, value in entries:
        if isinstance(value, list):
            writer.add_array(key, value, vtype)
        else:
            getattr(writer, "add_" + vtype)(key, value)


def main(argv):
    if len(argv) != 3:
        print("usage: spm_vocab.py TOKENIZER.model OUT.gguf", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pigguf
    w = pigguf.GGUFWriter(argv[2], "llama")
    w.add_string("general.name", os.path.splitext(os.path.basename(argv[1]))[0])
    add_to_writer(w, spm_gguf_metadata(argv[1]))
    w.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

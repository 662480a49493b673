#!/usr/bin/env python3
"""pigguf: a small numpy GGUF v3 writer and reader (llama.cpp's model container).

Independent of the C++ code: tests use it as a second implementation. Quantizers follow
ggml's reference ones (quantize_row_q8_0_ref / quantize_row_q4_0_ref in ggml-quants.c)
bit for bit; ggml's docs/gguf.md describes the format.

Shapes: a numpy array of shape [rows, cols] is a ggml tensor with ne = [cols, rows]
(ne[0] is the contiguous axis; quant blocks run along it). In general ne = reversed(shape).

    w = GGUFWriter("m.gguf", "llama")
    w.add_u32("llama.block_count", 2)
    w.add_array("tokenizer.ggml.tokens", ["a", "b"], "string")
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((768, 256), np.float32), "q8_0")
    w.write()

    r = GGUFReader("m.gguf")
    r.metadata["llama.block_count"]              # 2
    r.tensors["blk.0.ffn_up.weight"].ne          # [256, 768]
    r.tensors["blk.0.ffn_up.weight"].to_f32()    # numpy float32 [768, 256]

Command line: `pigguf.py FILE` prints the metadata and tensor table.
"""

import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
PWRI_MAGIC = b"PWRI"  # PowerInfer's sparse-model files: same layout, other magic
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32
QK = 32  # weights per Q8_0 / Q4_0 block

# Metadata value types (ggml gguf_type).
_VT = {
    "u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
    "string": 8, "array": 9, "u64": 10, "i64": 11, "f64": 12,
}
_VT_NAME = {v: k for k, v in _VT.items()}
_SCALAR_FMT = {
    "u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i",
    "f32": "<f", "bool": "<?", "u64": "<Q", "i64": "<q", "f64": "<d",
}

# Tensor types (ggml_type): name -> (id, weights per block, bytes per block).
TENSOR_TYPES = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "q4_0": (2, 32, 18),
    "q8_0": (8, 32, 34),
    # Read only (decode): the formats llama.cpp's own files hold.
    "q4_1": (3, 32, 20),
    "q5_0": (6, 32, 22),
    "q5_1": (7, 32, 24),
    "q4_K": (12, 256, 144),
    "q5_K": (13, 256, 176),
    "q6_K": (14, 256, 210),
    "i8": (24, 1, 1),
    "i16": (25, 1, 2),
    "i32": (26, 1, 4),
    "bf16": (30, 1, 2),
}
_TT_BY_ID = {v[0]: k for k, v in TENSOR_TYPES.items()}

# general.file_type values (llama_ftype) for the dominant type.
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}


def row_bytes(dtype, ne0):
    _, blck, nb = TENSOR_TYPES[dtype]
    if ne0 % blck:
        raise ValueError("row of %d elements is not a whole number of %s blocks" % (ne0, dtype))
    return ne0 // blck * nb


# --------------------------------------------------------------------------- conversions

def _roundf(x):
    """C roundf (half away from zero) on float32, without the x + 0.5 rounding trap."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def fp32_to_bf16_bits(x):
    """ggml's GGML_FP32_TO_BF16: round to nearest even, NaNs kept quiet."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 64, rounded).astype(np.uint16)


def bf16_bits_to_fp32(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def quantize_q8_0(x):
    """x: float32 [..., n] (n a multiple of 32) -> bytes of block_q8_0, row-major."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.reshape(-1, QK)
    amax = np.max(np.abs(b), axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _roundf(b * idv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(data, n):
    blocks = np.frombuffer(data, np.uint8, count=n // QK * 34).reshape(-1, 34)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def quantize_q4_0(x):
    """x: float32 [..., n] (n a multiple of 32) -> bytes of block_q4_0, row-major."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.reshape(-1, QK)
    # The signed value of largest magnitude (the first one on ties), as ggml picks it.
    idx = np.argmax(np.abs(b), axis=1)
    vmax = b[np.arange(b.shape[0]), idx]
    d = vmax / np.float32(-8)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    xs = b * idv[:, None] + np.float32(8.5)
    qi = np.minimum(15, np.trunc(xs)).astype(np.uint8)  # (int8_t) cast truncates
    out = np.empty((b.shape[0], 18), np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = qi[:, :16] | (qi[:, 16:] << 4)
    return out.tobytes()


def dequantize_q4_0(data, n):
    blocks = np.frombuffer(data, np.uint8, count=n // QK * 18).reshape(-1, 18)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 2:]
    lo = (qs & 0x0F).astype(np.float32) - 8
    hi = (qs >> 4).astype(np.float32) - 8
    return (np.concatenate([lo, hi], axis=1) * d).reshape(-1)


def _f16(col):
    """An [nblocks, 2] uint8 column pair as float32 [nblocks, 1]."""
    return col.copy().view(np.float16).astype(np.float32)


def _fifth_bits(qh):
    """[nblocks, 4] uint8 (a little-endian uint32, bit j for weight j) -> [nblocks, 32] 0/16."""
    bits = qh.copy().view("<u4").astype(np.uint32)
    return (((bits >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def dequantize_legacy(data, n, dtype):
    """q4_1 (d*q + m), q5_0 (d*(q - 16)), q5_1 (d*q + m): nibble j is weight j, the high
    nibble weight j + 16 (ggml's dequantize_row_q4_1 / q5_0 / q5_1)."""
    _, _, nb = TENSOR_TYPES[dtype]
    b = np.frombuffer(data, np.uint8, count=n // QK * nb).reshape(-1, nb)
    qs = b[:, nb - 16:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    if dtype != "q4_1":
        q = q | _fifth_bits(b[:, nb - 20:nb - 16])
    d = _f16(b[:, 0:2])
    if dtype == "q5_0":
        return ((q.astype(np.float32) - 16) * d).reshape(-1)
    return (q.astype(np.float32) * d + _f16(b[:, 2:4])).reshape(-1)


def _scale_min_k4(sc12):
    """[nblocks, 12] packed 6-bit scales and mins (ggml's get_scale_min_k4) -> two [nblocks, 8]."""
    q = sc12.astype(np.uint8)
    sc = np.empty((q.shape[0], 8), np.uint8)
    m = np.empty((q.shape[0], 8), np.uint8)
    sc[:, :4] = q[:, 0:4] & 63
    m[:, :4] = q[:, 4:8] & 63
    sc[:, 4:] = (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)
    m[:, 4:] = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def dequantize_q45_k(data, n, dtype):
    """q4_K / q5_K: 8 sub-blocks of 32, sub-block s = d*sc[s]*q - dmin*m[s]; the 32 bytes of
    chunk c hold sub-block 2c in their low nibbles and 2c+1 in the high ones; q5_K's fifth
    bit of weight l of sub-block s is bit s of qh[l]."""
    nb = TENSOR_TYPES[dtype][2]
    b = np.frombuffer(data, np.uint8, count=n // 256 * nb).reshape(-1, nb)
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, m = _scale_min_k4(b[:, 4:16])
    qs = b[:, nb - 128:].reshape(-1, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)  # [block, sub-block, l]
    if dtype == "q5_K":
        qh = b[:, 16:48]
        q = q | (((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4)
    y = (d * sc)[:, :, None] * q.astype(np.float32) - (dmin * m)[:, :, None]
    return y.reshape(-1)


def dequantize_q6_k(data, n):
    """q6_K: 16 groups of 16, group g = d*sc[g]*(q - 32); each half of 128 weights: weights
    l, l+32, l+64, l+96 from the low nibbles of ql[l], ql[l+32], their high nibbles, and bit
    pairs 0, 2, 4, 6 of qh[l] on top."""
    b = np.frombuffer(data, np.uint8, count=n // 256 * 210).reshape(-1, 210)
    d = _f16(b[:, 208:210])
    sc = b[:, 192:208].copy().view(np.int8).astype(np.float32)
    out = np.empty((b.shape[0], 256), np.float32)
    for h in range(2):
        ql = b[:, 64 * h:64 * h + 64]
        qh = b[:, 128 + 32 * h:128 + 32 * h + 32]
        parts = [(ql[:, :32] & 0xF) | ((qh & 3) << 4),
                 (ql[:, 32:] & 0xF) | (((qh >> 2) & 3) << 4),
                 (ql[:, :32] >> 4) | (((qh >> 4) & 3) << 4),
                 (ql[:, 32:] >> 4) | (((qh >> 6) & 3) << 4)]
        for k, q in enumerate(parts):
            g = 8 * h + 2 * k + np.arange(32) // 16  # the group of each of the 32 weights
            out[:, 128 * h + 32 * k:128 * h + 32 * k + 32] = \
                d * sc[:, g] * (q.astype(np.float32) - 32)
    return out.reshape(-1)


def q8_0_roundtrip(x):
    """What ggml does to an activation before a quantized matmul: quantize to Q8_0, back."""
    x = np.asarray(x, dtype=np.float32)
    return dequantize_q8_0(quantize_q8_0(x), x.size).reshape(x.shape)


def encode(x, dtype):
    """float array -> the bytes of a `dtype` tensor (rows along the last axis)."""
    x = np.asarray(x)
    if dtype == "f32":
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "f16":
        with np.errstate(over="ignore"):  # beyond f16 range -> inf, as ggml's conversion
            return np.ascontiguousarray(x, dtype=np.float32).astype("<f2").tobytes()
    if dtype == "bf16":
        return fp32_to_bf16_bits(x).astype("<u2").tobytes()
    if dtype == "q8_0":
        return quantize_q8_0(x)
    if dtype == "q4_0":
        return quantize_q4_0(x)
    if dtype in ("i8", "i16", "i32"):
        return np.ascontiguousarray(x, dtype="<" + dtype).tobytes()
    raise ValueError("unsupported tensor type %r" % dtype)


def decode(data, dtype, n):
    """The first `n` values of a `dtype` tensor's bytes, as a flat float32 array."""
    if dtype == "f32":
        return np.frombuffer(data, "<f4", count=n).astype(np.float32)
    if dtype == "f16":
        return np.frombuffer(data, "<f2", count=n).astype(np.float32)
    if dtype == "bf16":
        return bf16_bits_to_fp32(np.frombuffer(data, "<u2", count=n))
    if dtype == "q8_0":
        return dequantize_q8_0(data, n)
    if dtype == "q4_0":
        return dequantize_q4_0(data, n)
    if dtype in ("q4_1", "q5_0", "q5_1"):
        return dequantize_legacy(data, n, dtype)
    if dtype in ("q4_K", "q5_K"):
        return dequantize_q45_k(data, n, dtype)
    if dtype == "q6_K":
        return dequantize_q6_k(data, n)
    if dtype in ("i8", "i16", "i32"):
        return np.frombuffer(data, "<" + dtype, count=n).astype(np.float32)
    raise ValueError("unsupported tensor type %r" % dtype)


# --------------------------------------------------------------------------- writer

def _pack_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _pack_value(vtype, value):
    if vtype == "string":
        return _pack_string(value)
    if vtype == "bool":
        return struct.pack("<B", 1 if value else 0)
    return struct.pack(_SCALAR_FMT[vtype], value)


class GGUFWriter:
    """Collects metadata and tensors, then write() produces a GGUF v3 file.

    general.architecture is the first key; general.alignment (u32 32) follows it.
    general.quantization_version (2) is added when a tensor is quantized.
    """

    def __init__(self, path, arch, sparse_magic=False, alignment=DEFAULT_ALIGNMENT):
        self.path = path
        self.arch = arch
        self.sparse_magic = sparse_magic
        self.alignment = alignment
        self._kv = {}  # key -> bytes (type + value); insertion-ordered
        self._tensors = []  # (name, ne, type id, data bytes)
        self._names = set()
        self.add_string("general.architecture", arch)
        self.add_u32("general.alignment", alignment)

    # Metadata. Adding an existing key replaces its value (keeps its position).
    def _add(self, key, vtype, value):
        self._kv[key] = struct.pack("<I", _VT[vtype]) + _pack_value(vtype, value)

    def add_string(self, key, value):
        self._add(key, "string", value)

    def add_u8(self, key, value):
        self._add(key, "u8", value)

    def add_u32(self, key, value):
        self._add(key, "u32", value)

    def add_i32(self, key, value):
        self._add(key, "i32", value)

    def add_u64(self, key, value):
        self._add(key, "u64", value)

    def add_i64(self, key, value):
        self._add(key, "i64", value)

    def add_f32(self, key, value):
        self._add(key, "f32", value)

    def add_f64(self, key, value):
        self._add(key, "f64", value)

    def add_bool(self, key, value):
        self._add(key, "bool", value)

    def add_array(self, key, values, elem_type):
        """elem_type: 'string', 'f32', 'i32', 'u32' (or any other scalar type name)."""
        if elem_type not in _VT or elem_type == "array":
            raise ValueError("unsupported array element type %r" % elem_type)
        values = list(values)
        parts = [struct.pack("<I", _VT["array"]), struct.pack("<IQ", _VT[elem_type], len(values))]
        if elem_type == "string":
            parts.extend(_pack_string(v) for v in values)
        elif elem_type == "bool":
            parts.append(np.asarray(values, dtype=bool).astype(np.uint8).tobytes())
        else:
            parts.append(np.asarray(values, dtype=_SCALAR_FMT[elem_type]).tobytes())
        self._kv[key] = b"".join(parts)

    def add_raw_kv(self, key, raw):
        """A pre-encoded value: u32 type then value bytes (for tests of bad files)."""
        self._kv[key] = bytes(raw)

    # Tensors.
    def add_tensor(self, name, array, dtype="f32"):
        """array: numpy [rows, cols] (any rank <= 4); stored with ne = reversed(shape)."""
        array = np.asarray(array)
        if array.ndim < 1 or array.ndim > 4:
            raise ValueError("tensor %s: rank %d not in 1..4" % (name, array.ndim))
        ne = list(reversed(array.shape))
        row_bytes(dtype, ne[0])  # validates the block multiple
        self.add_tensor_raw(name, ne, dtype, encode(array, dtype))

    def add_tensor_raw(self, name, ne, dtype, data):
        """Already encoded bytes; dtype a name from TENSOR_TYPES or a raw ggml type id."""
        if name in self._names:
            raise ValueError("duplicate tensor name %s" % name)
        self._names.add(name)
        type_id = dtype if isinstance(dtype, int) else TENSOR_TYPES[dtype][0]
        self._tensors.append((name, list(ne), type_id, bytes(data)))

    def to_bytes(self):
        if any(t[2] in (TENSOR_TYPES["q8_0"][0], TENSOR_TYPES["q4_0"][0])
               for t in self._tensors) and "general.quantization_version" not in self._kv:
            self.add_u32("general.quantization_version", 2)
        a = self.alignment
        out = [PWRI_MAGIC if self.sparse_magic else GGUF_MAGIC,
               struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv))]
        for key, val in self._kv.items():
            out.append(_pack_string(key))
            out.append(val)
        offset = 0
        for name, ne, type_id, data in self._tensors:
            out.append(_pack_string(name))
            out.append(struct.pack("<I", len(ne)))
            out.append(struct.pack("<%dQ" % len(ne), *ne))
            out.append(struct.pack("<IQ", type_id, offset))
            offset += (len(data) + a - 1) // a * a
        head = b"".join(out)
        blob = [head, b"\0" * ((-len(head)) % a)]
        for _, _, _, data in self._tensors:
            blob.append(data)
            blob.append(b"\0" * ((-len(data)) % a))
        return b"".join(blob)

    def write(self):
        with open(self.path, "wb") as f:
            f.write(self.to_bytes())


# --------------------------------------------------------------------------- reader

class GGUFTensor:
    """One tensor of a GGUFReader: .name, .dtype ('f16', ...), .type_id, .ne (ggml order),
    .shape (numpy order), .offset (in the data blob), .data (raw bytes, a memoryview)."""

    def __init__(self, name, ne, type_id, offset):
        self.name = name
        self.ne = ne
        self.type_id = type_id
        self.dtype = _TT_BY_ID.get(type_id, "type%d" % type_id)
        self.offset = offset
        self.data = None

    @property
    def shape(self):
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def nbytes(self):
        _, blck, nb = TENSOR_TYPES[self.dtype]
        return self.n_elements // blck * nb

    def to_f32(self):
        """The values as float32 in numpy order (shape = reversed(ne)); quant types dequantized."""
        return decode(self.data, self.dtype, self.n_elements).reshape(self.shape)

    def __repr__(self):
        return "GGUFTensor(%s, %s, ne=%s)" % (self.name, self.dtype, self.ne)


class GGUFReader:
    """Parses a GGUF (or PowerInfer PWRI) file: .metadata (key -> python value; arrays are
    lists), .metadata_types (key -> 'u32' | 'array[string]' | ...), .tensors (name ->
    GGUFTensor, in file order), .version, .sparse_magic, .alignment, .data_offset."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self._buf = f.read()
        self.path = path
        self._pos = 0
        self._parse()

    def _need(self, n, what):
        if n < 0 or self._pos + n > len(self._buf):
            raise ValueError("%s: truncated reading %s at byte %d" % (self.path, what, self._pos))

    def _unpack(self, fmt, what):
        n = struct.calcsize(fmt)
        self._need(n, what)
        v = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += n
        return v[0] if len(v) == 1 else v

    def _string(self, what):
        n = self._unpack("<Q", what + " length")
        self._need(n, what)
        s = self._buf[self._pos:self._pos + n]
        self._pos += n
        return s.decode("utf-8")

    def _value(self, vt, key):
        name = _VT_NAME.get(vt)
        if name is None:
            raise ValueError("%s: key %s: bad value type %d at byte %d"
                             % (self.path, key, vt, self._pos))
        if name == "string":
            return self._string("value of " + key), "string"
        if name == "array":
            et, n = self._unpack("<IQ", "array header of " + key)
            ename = _VT_NAME.get(et)
            if ename is None:
                raise ValueError("%s: key %s: bad array element type %d" % (self.path, key, et))
            if ename in _SCALAR_FMT:
                size = struct.calcsize(_SCALAR_FMT[ename])
                self._need(n * size, "array of " + key)
                arr = np.frombuffer(self._buf, _SCALAR_FMT[ename], count=n, offset=self._pos)
                self._pos += n * size
                return arr.tolist(), "array[%s]" % ename
            vals = []
            sub = None
            for _ in range(n):
                v, sub = self._value(et, key)
                vals.append(v)
            return vals, "array[%s]" % ename if ename != "array" else "array[%s]" % sub
        v = self._unpack(_SCALAR_FMT[name], "value of " + key)
        if name == "bool":
            v = bool(v)
        return v, name

    def _parse(self):
        magic = self._buf[:4]
        if magic not in (GGUF_MAGIC, PWRI_MAGIC):
            raise ValueError("%s: bad magic %r" % (self.path, magic))
        self.sparse_magic = magic == PWRI_MAGIC
        self._pos = 4
        self.version, n_tensors, n_kv = self._unpack("<IQQ", "header")
        if self.version not in (2, 3):
            raise ValueError("%s: unsupported GGUF version %d" % (self.path, self.version))
        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = self._string("key")
            if key in self.metadata:
                raise ValueError("%s: duplicate key %s" % (self.path, key))
            vt = self._unpack("<I", "type of " + key)
            self.metadata[key], self.metadata_types[key] = self._value(vt, key)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string("tensor name")
            n_dims = self._unpack("<I", "n_dims of " + name)
            if n_dims > 4:
                raise ValueError("%s: tensor %s has %d dims" % (self.path, name, n_dims))
            self._need(8 * n_dims, "dims of " + name)
            ne = list(struct.unpack_from("<%dQ" % n_dims, self._buf, self._pos))
            self._pos += 8 * n_dims
            type_id, offset = self._unpack("<IQ", "type/offset of " + name)
            if name in self.tensors:
                raise ValueError("%s: duplicate tensor %s" % (self.path, name))
            self.tensors[name] = GGUFTensor(name, ne, type_id, offset)
        a = self.alignment
        self.data_offset = (self._pos + a - 1) // a * a
        view = memoryview(self._buf)
        for t in self.tensors.values():
            start = self.data_offset + t.offset
            if t.dtype in TENSOR_TYPES:
                end = start + t.nbytes
                if end > len(self._buf):
                    raise ValueError("%s: tensor %s data [%d, %d) beyond end of file (%d)"
                                     % (self.path, t.name, start, end, len(self._buf)))
                t.data = view[start:end]


def copy_with_metadata(src, dst, **kv):
    """Writes src's GGUF to dst with the keys of kv added or replaced (a str value as a
    string, an int as u32); keys are spelled with "__" for "." (tokenizer__chat_template)."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.metadata["general.architecture"], sparse_magic=r.sparse_magic,
                   alignment=r.alignment)
    for key, value in r.metadata.items():
        kind = r.metadata_types[key]
        if kind.startswith("array["):
            w.add_array(key, value, kind[len("array["):-1])
        else:
            getattr(w, "add_" + kind)(key, value)
    for key, value in kv.items():
        key = key.replace("__", ".")
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_u32(key, value)
    for name, t in r.tensors.items():
        w.add_tensor_raw(name, t.ne, t.type_id, t.data)
    w.write()


def _main(argv):
    if len(argv) != 2:
        print("usage: pigguf.py FILE.gguf", file=sys.stderr)
        return 2
    r = GGUFReader(argv[1])
    print("%s: version %d%s, %d keys, %d tensors" % (argv[1], r.version,
          " (PWRI)" if r.sparse_magic else "", len(r.metadata), len(r.tensors)))
    for k, v in r.metadata.items():
        if isinstance(v, list) and len(v) > 8:
            v = "%s ... (%d)" % (v[:8], len(v))
        print("  %-45s %-14s %s" % (k, r.metadata_types[k], v))
    for t in r.tensors.values():
        print("  %-32s %-5s %s" % (t.name, t.dtype, t.ne))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))

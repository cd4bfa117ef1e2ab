"""GGUF (version 3) writer and reader, written for kvserve from the published format description
(header, typed key/value metadata, tensor infos, aligned tensor data). Our own code: no gguf-py
dependency, so the exporter runs with Debian's python3 + numpy only.

File layout (all little-endian):

    "GGUF" | u32 version=3 | u64 n_tensors | u64 n_kv
    n_kv x (string key | u32 value_type | value)                 string = u64 length + bytes
    n_tensors x (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset)
    zero padding to `general.alignment` (32)
    tensor data, each tensor starting at data_start + offset (offset a multiple of alignment)

`ne` lists dimensions fastest-varying first, so a numpy array of shape (rows, cols) has
ne = [cols, rows].
"""
import struct

import numpy as np

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)

# ggml tensor types this tool writes.
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
GGML_TYPE_SIZE = {GGML_F32: 4, GGML_F16: 2, GGML_BF16: 2}

_SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
           T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d"}
_ARRAY_NUMPY = {T_INT32: "<i4", T_FLOAT32: "<f4", T_UINT32: "<u4"}


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, value) -> bytes:
    if vtype == T_STRING:
        return _string(value)
    if vtype == T_ARRAY:
        etype, items = value
        out = [struct.pack("<IQ", etype, len(items))]
        if etype in _ARRAY_NUMPY:
            out.append(np.asarray(items, dtype=_ARRAY_NUMPY[etype]).tobytes())
        else:
            out.extend(_value(etype, x) for x in items)
        return b"".join(out)
    return struct.pack(_SCALAR[vtype], value)


class GgufWriter:
    """Collects metadata and tensors, then writes the file in one pass. Tensor data are numpy
    arrays whose dtype already matches the ggml type (float32, float16, or uint16 holding bf16
    bits); the writer does no conversion."""

    def __init__(self):
        self.kv = []        # (key, type, value)
        self.tensors = []   # (name, ggml_type, array)

    def add(self, key: str, vtype: int, value):
        self.kv.append((key, vtype, value))

    def add_array(self, key: str, etype: int, items):
        self.kv.append((key, T_ARRAY, (etype, items)))

    def add_tensor(self, name: str, ggml_type: int, array: np.ndarray):
        want = {GGML_F32: np.float32, GGML_F16: np.float16, GGML_BF16: np.uint16}[ggml_type]
        if array.dtype != want:
            raise ValueError(f"tensor {name}: dtype {array.dtype} does not match ggml type {ggml_type}")
        self.tensors.append((name, ggml_type, np.ascontiguousarray(array)))

    def write(self, path: str):
        header = [MAGIC, struct.pack("<IQQ", VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, value in self.kv:
            header += [_string(key), struct.pack("<I", vtype), _value(vtype, value)]
        offset = 0
        offsets = []
        for name, gtype, arr in self.tensors:
            offsets.append(offset)
            ne = list(reversed(arr.shape))
            header += [_string(name), struct.pack("<I", len(ne)), struct.pack(f"<{len(ne)}Q", *ne),
                       struct.pack("<IQ", gtype, offset)]
            offset += _pad(arr.nbytes)
        head = b"".join(header)
        with open(path, "wb") as f:
            f.write(head)
            f.write(b"\0" * (_pad(len(head)) - len(head)))
            for (_, _, arr), off in zip(self.tensors, offsets):
                data = arr.tobytes()
                f.write(data)
                f.write(b"\0" * (_pad(len(data)) - len(data)))


def _pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class GgufReader:
    """Reads what GgufWriter writes (and any GGUF v3 file with F32/F16/BF16 tensors): `kv` maps
    key -> value (arrays as lists), `tensors` maps name -> numpy array in numpy shape order."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            self.buf = memoryview(f.read())
        self.pos = 0
        if bytes(self.buf[:4]) != MAGIC:
            raise ValueError(f"{path}: not a GGUF file (magic {bytes(self.buf[:4])!r})")
        self.pos = 4
        version, n_tensors, n_kv = self._unpack("<IQQ")
        if version != VERSION:
            raise ValueError(f"{path}: GGUF version {version}, expected {VERSION}")
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            (vtype,) = self._unpack("<I")
            self.kv[key] = self._read_value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            (n_dims,) = self._unpack("<I")
            ne = self._unpack(f"<{n_dims}Q")
            gtype, offset = self._unpack("<IQ")
            infos.append((name, ne, gtype, offset))
        align = self.kv.get("general.alignment", ALIGNMENT)
        data_start = (self.pos + align - 1) // align * align
        self.tensors = {}
        self.types = {}
        for name, ne, gtype, offset in infos:
            if gtype not in GGML_TYPE_SIZE:
                raise ValueError(f"tensor {name}: ggml type {gtype} not supported by this reader")
            dtype = {GGML_F32: "<f4", GGML_F16: "<f2", GGML_BF16: "<u2"}[gtype]
            count = int(np.prod(ne))
            start = data_start + offset
            arr = np.frombuffer(self.buf[start:start + count * GGML_TYPE_SIZE[gtype]], dtype=dtype)
            self.tensors[name] = arr.reshape(tuple(reversed(ne)))
            self.types[name] = gtype

    def _unpack(self, fmt):
        size = struct.calcsize(fmt)
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return out

    def _str(self):
        (n,) = self._unpack("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def _read_value(self, vtype):
        if vtype == T_STRING:
            return self._str()
        if vtype == T_ARRAY:
            etype, n = self._unpack("<IQ")
            return [self._read_value(etype) for _ in range(n)]
        return self._unpack(_SCALAR[vtype])[0]

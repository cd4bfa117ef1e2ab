"""Minimal safetensors reader/writer (F32/F64 only), written from the spec:
8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(offsets relative to the end of the header), then the raw little-endian data."""
import json
import struct

import numpy as np

_DT = {"F32": np.float32, "F64": np.float64}


def write(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (float32)."""
    header = {}
    off = 0
    names = sorted(tensors)
    for n in names:
        a = np.ascontiguousarray(tensors[n])
        dt = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}[a.dtype]
        header[n] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    header["__metadata__"] = metadata or {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for n in names:
            f.write(np.ascontiguousarray(tensors[n]).astype("<" + tensors[n].dtype.str[1:]).tobytes())


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(buf[base + b:base + e], dtype=np.dtype(_DT[info["dtype"]]).newbyteorder("<"))
        out[name] = a.reshape(info["shape"]).copy()
    return out, header.get("__metadata__")

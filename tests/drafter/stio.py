"""safetensors reading and writing for the drafter tests.

Writing goes through the `safetensors` package (its TensorSpec path, which
takes BF16 too); reading parses the header here so the tests see the raw
bytes (the trunk hash) and BF16 without torch.
"""
import json
import struct
import sys

try:
    import numpy as np
    from safetensors import TensorSpec, serialize_file
except ImportError as e:  # pragma: no cover
    sys.stderr.write(f"the drafter tests need numpy and safetensors (pip install numpy safetensors): {e}\n")
    sys.exit(1)

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32,
       "I64": np.int64, "U8": np.uint8, "I8": np.int8}


def bf16_bits(x):
    """float array -> uint16 BF16 bits, rounded to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def stored(x, dtype):
    """The float64 values an F32/F16/BF16 array holds once stored."""
    if dtype == "F32":
        return np.asarray(x, np.float32).astype(np.float64)
    if dtype == "F16":
        return np.asarray(x, np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_value(bf16_bits(x)).astype(np.float64)
    raise ValueError(dtype)


def write(path, tensors, metadata=None):
    """tensors: name -> (dtype, array) with dtype F32/F16/BF16/I32/I64."""
    keep, specs = [], {}
    for name, (dtype, a) in tensors.items():
        if dtype == "BF16":
            raw = bf16_bits(a)
            tname = "bfloat16"
        else:
            raw = np.ascontiguousarray(a, dtype=_NP[dtype])
            tname = raw.dtype.name
        raw = np.ascontiguousarray(raw)
        keep.append(raw)
        specs[name] = TensorSpec(dtype=tname, shape=tuple(np.shape(a)), data_ptr=raw.ctypes.data,
                                 data_len=raw.nbytes)
    serialize_file(specs, str(path), metadata=metadata)


def read_raw(path):
    """-> (metadata dict, {name: (dtype, shape, bytes)})."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), blob[base + a:base + b])
    return meta, out


def read(path):
    """-> (metadata, {name: float64 or int array})."""
    meta, raw = read_raw(path)
    out = {}
    for name, (dtype, shape, data) in raw.items():
        if dtype == "BF16":
            a = bf16_value(np.frombuffer(data, np.uint16)).astype(np.float64)
        elif dtype in ("F32", "F16", "F64"):
            a = np.frombuffer(data, _NP[dtype]).astype(np.float64)
        else:
            a = np.frombuffer(data, _NP[dtype]).copy()
        out[name] = a.reshape(shape)
    return meta, out

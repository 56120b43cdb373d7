#!/usr/bin/env python3
"""gst-dflash — safetensors interop, both ways, against the official package.

  interop.py ST_DUMP

1. Python writes files with safetensors (numpy save_file for F32, F16, I32,
   I64, I8, U8 with metadata; serialize with raw bytes for BF16, which numpy
   has no dtype for); st-dump reads them with the C reader and prints every
   value; we compare bit for bit.
2. st-dump writes a file with the C writer; safe_open / deserialize read it;
   we compare against the same values computed here (F16 by numpy's rounding,
   BF16 by an integer round-to-nearest-even written out below).

Exits non-zero on any mismatch.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import save_file
except ImportError as exc:  # a clear failure, not a skip: the test needs them
    sys.exit("interop.py: needs the Python packages numpy and safetensors "
             f"(pip install numpy safetensors): {exc}")

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"MISMATCH: {what}", file=sys.stderr)


def f32_bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def bf16_rne(values):
    """float32 → bf16 bits, round to nearest even; NaN kept a quiet NaN."""
    u = f32_bits(values).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def run_dump(st_dump, path, keys=()):
    res = subprocess.run([st_dump, "read", path, *keys], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"interop.py: st-dump read {path} failed ({res.returncode}): {res.stderr}")
    meta, tensors = {}, {}
    order = []
    for line in res.stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "meta":
            meta[parts[1]] = parts[2]
        elif parts[0] == "tensor":
            _, name, dtype, shape, values = parts
            shape = tuple(int(d) for d in shape.split(",")) if shape else ()
            tensors[name] = (dtype, shape, values.split() if values else [])
            order.append(name)
    return meta, tensors, order


def compare_c_read(name, got, want_dtype, want):
    """`got` is st-dump's (dtype, shape, values); `want` a numpy array holding
    the values as the C side should see them (floats as float32)."""
    dtype, shape, values = got
    check(dtype == want_dtype, f"{name}: dtype {dtype}, expected {want_dtype}")
    check(shape == want.shape, f"{name}: shape {shape}, expected {want.shape}")
    flat = want.reshape(-1)
    check(len(values) == flat.size, f"{name}: {len(values)} values, expected {flat.size}")
    if want_dtype in ("F32", "F16", "BF16"):
        have = np.array([float(v) for v in values], dtype=np.float32)
        same = np.array_equal(f32_bits(have), f32_bits(flat.astype(np.float32)))
    else:
        have = np.array([int(v) for v in values], dtype=np.int64)
        same = np.array_equal(have, flat.astype(np.int64))
    check(same, f"{name}: values differ\n  C:      {values[:8]}\n  Python: {flat[:8]}")


def python_to_c(st_dump, tmp):
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    f32[0, :4] = [np.inf, -0.0, 1e-40, -3.0e38]
    tensors = {
        "model.embed_tokens.weight": f32,
        "half": np.array([1.0, -2.0, 6.0e-8, np.inf, 65504.0, 0.333], dtype=np.float16),
        "i32": np.array([[-(2**31), -1], [0, 2**31 - 1]], dtype=np.int32),
        "i64": np.array([-(2**63), 2**40 + 3, 2**63 - 1], dtype=np.int64),
        "i8": np.array([-128, -1, 0, 127], dtype=np.int8),
        "u8": np.array([0, 1, 200, 255], dtype=np.uint8),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "cube": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    }
    metadata = {"format": "np", "note": "written by safetensors.numpy"}
    path = os.path.join(tmp, "py.safetensors")
    save_file(tensors, path, metadata=metadata)

    meta, got, _ = run_dump(st_dump, path, ["format", "note", "absent"])
    check(meta == {"format": "np", "note": metadata["note"], "absent": "<none>"},
          f"metadata read by C: {meta}")
    check(set(got) == set(tensors), f"tensor names read by C: {sorted(got)}")
    kinds = {np.float32: "F32", np.float16: "F16", np.int32: "I32", np.int64: "I64",
             np.int8: "I8", np.uint8: "U8"}
    for name, arr in tensors.items():
        if name in got:
            compare_c_read(name, got[name], kinds[arr.dtype.type], arr.astype(
                np.float32) if arr.dtype == np.float16 else arr)

    # BF16: numpy has no such dtype, so hand the raw bits to serialize().
    bf_vals = np.array([1.0, -2.5, 1e-40, np.inf, 3.0e38, 0.1, -0.0, 1234.5], dtype=np.float32)
    bf_bits = bf16_rne(bf_vals)
    bf_bytes = bf_bits.astype("<u2").tobytes()
    f32_bytes = np.array([0.5, 1.5], dtype="<f4").tobytes()
    specs = {"bf": ("bfloat16", [2, 4], bf_bytes), "f": ("float32", [2], f32_bytes)}
    if hasattr(safetensors, "TensorSpec"):  # safetensors ≥ 0.8
        keep = {k: np.frombuffer(v[2], dtype=np.uint8) for k, v in specs.items()}
        arg = {k: safetensors.TensorSpec(dtype=v[0], shape=v[1], data_ptr=keep[k].ctypes.data,
                                         data_len=len(v[2])) for k, v in specs.items()}
    else:
        arg = {k: {"dtype": v[0], "shape": v[1], "data": v[2]} for k, v in specs.items()}
    raw = safetensors.serialize(arg, metadata={"kind": "bf16"})
    path = os.path.join(tmp, "py-bf16.safetensors")
    with open(path, "wb") as f:
        f.write(raw)
    meta, got, _ = run_dump(st_dump, path, ["kind"])
    check(meta == {"kind": "bf16"}, f"BF16 file metadata read by C: {meta}")
    if "bf" in got:
        compare_c_read("bf", got["bf"], "BF16", bf16_to_f32(bf_bits).reshape(2, 4))
    else:
        check(False, "C did not list tensor 'bf'")
    if "f" in got:
        compare_c_read("f", got["f"], "F32", np.array([0.5, 1.5], dtype=np.float32))


# The same cases as st-dump.c's float_cases, and its other tensors.
FLOAT_CASES = np.array([
    0.1, -2.5, 65504.0, 65519.0, 65520.0, 1e-7, 3e-8, 2.98023224e-8, -0.0,
    1.00048828125, 1.00146484375, 1.00390625, 1.01171875, 3.0e38, -1e-40, 12345.678,
], dtype=np.float32)


def f16_of(values):
    with np.errstate(over="ignore"):  # 65520 and 3e38 round to Inf on purpose
        return values.astype(np.float16)


def c_to_python(st_dump, tmp):
    path = os.path.join(tmp, "c.safetensors")
    res = subprocess.run([st_dump, "write", path], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"interop.py: st-dump write failed ({res.returncode}): {res.stderr}")

    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    check(hlen % 8 == 0, f"C header length {hlen} is not a multiple of 8")
    header_text = data[8:8 + hlen].decode("utf-8")
    check(header_text.rstrip(" ") == header_text.strip(), "C header padded with other than spaces")
    header = json.loads(header_text)
    names = [k for k in header if k != "__metadata__"]
    check(names == ["f32", "f16", "bf16", "i32", "i64", "i8", "u8", "scalar", "empty"],
          f"C header order {names}")
    pos = 0
    for n in names:  # insertion order, contiguous
        b, e = header[n]["data_offsets"]
        check(b == pos, f"{n}: data_offsets begin {b}, expected {pos}")
        pos = e
    check(8 + hlen + pos == len(data), "C file has bytes past its last tensor")

    want = {
        "f32": np.array([((i * 7) % 13 - 6) for i in range(6)], dtype=np.float32).reshape(2, 3)
        / np.float32(3.0),
        "f16": f16_of(FLOAT_CASES),
        "i32": np.array([-(2**31), -1, 0, 1, 2**31 - 1], dtype=np.int32),
        "i64": np.array([-(2**63), 2**40 + 3, -5, 2**63 - 1], dtype=np.int64).reshape(2, 2),
        "i8": np.array([-128, -1, 0, 127], dtype=np.int8),
        "u8": np.array([0, 1, 200, 255], dtype=np.uint8).reshape(2, 2),
        "scalar": np.array(42.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        check(meta == {"format": "np", "origin": "st-dump \u00fc\"q\""}, f"metadata {meta}")
        check(sorted(f.keys()) == sorted(names), f"keys {sorted(f.keys())}")
        for name, w in want.items():
            a = f.get_tensor(name)
            check(a.dtype == w.dtype, f"{name}: dtype {a.dtype}, expected {w.dtype}")
            check(a.shape == w.shape, f"{name}: shape {a.shape}, expected {w.shape}")
            same = a.tobytes() == w.astype(w.dtype).tobytes()
            check(same, f"{name}: values differ\n  C:      {a.reshape(-1)[:8]}\n"
                        f"  Python: {w.reshape(-1)[:8]}")

    # BF16 has no numpy dtype: compare the raw bytes from deserialize().
    raw = dict(safetensors.deserialize(data))
    bf = raw.get("bf16")
    check(bf is not None, "deserialize() found no 'bf16'")
    if bf is not None:
        check(bf["dtype"] == "BF16" and list(bf["shape"]) == [len(FLOAT_CASES)],
              f"bf16 entry {bf['dtype']} {bf['shape']}")
        have = np.frombuffer(bytes(bf["data"]), dtype="<u2")
        wbits = bf16_rne(FLOAT_CASES)
        check(np.array_equal(have, wbits),
              f"bf16 bits differ\n  C:      {[hex(x) for x in have]}\n"
              f"  Python: {[hex(x) for x in wbits]}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: interop.py ST_DUMP")
    st_dump = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dfl-interop-") as tmp:
        python_to_c(st_dump, tmp)
        c_to_python(st_dump, tmp)
    if FAILURES:
        print(f"interop.py: {len(FAILURES)} mismatch(es)", file=sys.stderr)
        return 1
    print(f"interop.py: safetensors {safetensors.__version__}: Python -> C and C -> Python agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())

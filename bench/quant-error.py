#!/usr/bin/env python3
"""How close quantized GGUF files' weights are to the float file they were
made from: for each block type, the relative squared error of the
dequantized matrices, sum((w' - w)^2) / sum(w^2), over the tensors that
every file given stores in that type (so two quantizers are compared on the
same tensors).

    quant-error.py SRC.gguf A.gguf [B.gguf …]

SRC holds the matrices as F32, F16 or BF16 (tools/hf-to-gguf.py
--outtype f32); A, B, … are quantizations of it (`dflash quantize`,
llama.cpp's llama-quantize). Dequantization is the gguf package's.
Needs numpy and the gguf package.
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("quant-error.py: the gguf package is missing (pip install gguf)")


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def as_f32(t):
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("quantized", nargs="+")
    args = ap.parse_args()
    src = tensors(args.src)
    files = [tensors(p) for p in args.quantized]
    by_type = {}
    for name, t in src.items():
        if len(t.shape) != 2:
            continue
        kinds = {f[name].tensor_type for f in files if name in f}
        if len(kinds) == 1 and all(name in f for f in files):
            kind = kinds.pop()
            if kind.name.startswith(("Q", "IQ")):
                by_type.setdefault(kind.name, []).append(name)
    if not by_type:
        sys.exit("quant-error.py: no matrix is stored in one block type by every file")
    print(f"relative squared error of the dequantized weights against {args.src}")
    print(f"{'type':6} {'tensors':>7} {'weights':>11}  " +
          "  ".join(f"{p.split('/')[-1]:>24}" for p in args.quantized))
    for kind, names in sorted(by_type.items()):
        ref = {n: as_f32(src[n]) for n in names}
        total = sum(float(np.dot(ref[n], ref[n])) for n in names)
        errs = []
        for f in files:
            e = 0.0
            for n in names:
                d = as_f32(f[n]) - ref[n]
                e += float(np.dot(d, d))
            errs.append(e / total)
        weights = sum(ref[n].size for n in names)
        cols = [f"{errs[0]:24.3e}"] + [f"{e:.3e} ({e / errs[0]:.2f}x)".rjust(24) for e in errs[1:]]
        print(f"{kind:6} {len(names):7d} {weights:11d}  " + "  ".join(cols))
    if len(files) > 1:
        print("(in brackets: a file's error over the first file's, on the same weights)")


if __name__ == "__main__":
    main()

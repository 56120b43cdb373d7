"""Small helpers shared by the training scripts (numpy and the standard library only)."""
import lzma
import os

import numpy as np


def write_xz(path, arr):
    """A uint16 array as xz-compressed little-endian bytes."""
    with open(path, "wb") as f:
        f.write(lzma.compress(np.ascontiguousarray(arr, "<u2").tobytes(), preset=6))


def read_xz(path):
    with open(path, "rb") as f:
        return np.frombuffer(lzma.decompress(f.read()), "<u2")


def load_sequences(tokens_dir, cont_dir, split):
    """The drafter's training sequences: prompts (tokens/prompts.npz, cut to the prompt length
    their continuation was made from) joined with the target's greedy continuations
    (cont_dir/<split>-p<len>-<k>.npz, gen_continuations.py).
    -> [(int64 [n, plen + new], plen)], one entry per prompt length."""
    prompts = np.load(os.path.join(tokens_dir, "prompts.npz"))[split]
    P = prompts.shape[1]
    parts = {}
    for f in sorted(os.listdir(cont_dir)):
        if f.startswith(split + "-p") and f.endswith(".npz"):
            z = np.load(os.path.join(cont_dir, f))
            parts.setdefault(int(z["prompt_len"]), []).append((int(z["first"]), z["tokens"]))
    assert parts, f"no {split}-p*.npz in {cont_dir}"
    out = []
    for plen, chunks in sorted(parts.items(), reverse=True):
        chunks.sort(key=lambda c: c[0])
        first = chunks[0][0]
        cont = np.concatenate([c[1] for c in chunks])
        for (f0, c0), (f1, _) in zip(chunks, chunks[1:]):
            assert f0 + len(c0) == f1, "continuation parts are not contiguous"
        p = prompts[first:first + len(cont), P - plen:]
        out.append((np.concatenate([p, cont], axis=1).astype(np.int64), plen))
    return out

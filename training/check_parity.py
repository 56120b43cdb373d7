#!/usr/bin/env python3
"""The C side of eval_parity.py: run `dflash draft` on the same target, sidecar and tokens
as the PyTorch block, and compare C, PyTorch and the float64 reference (numpy only).

    python3 training/check_parity.py --dir OUT [--dflash build/tools/dflash] [--target DIR] [--drafter FILE]

OUT is eval_parity.py's folder (dflash.safetensors, torch_block.safetensors). The target is
the one recorded in torch_block.safetensors (a path relative to the repository) unless given.
Checks (relative max difference ≤ 1e-4, drafts identical):
  C taps = PyTorch (transformers) taps;  C block rows and logits = PyTorch's;
  reference (from the C taps) = C;  C drafts and plain argmax = PyTorch's.
Prints TAP; exits 1 on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "drafter"))
import export  # noqa: E402


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def ints(x):
    return [int(v) for v in x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--dflash", default=os.path.join(REPO, "build", "tools", "dflash"))
    ap.add_argument("--target")
    ap.add_argument("--drafter", help="the sidecar (default: DIR/dflash.safetensors)")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    meta, t = export.read_raw(os.path.join(a.dir, "torch_block.safetensors"))
    tb = {k: export.to_f32(*v) if v[0] != "I32" else np.frombuffer(v[2], "<i4") for k, v in t.items()}
    target = a.target or os.path.join(REPO, meta["target"])
    sidecar = a.drafter or os.path.join(a.dir, "dflash.safetensors")
    ids = [int(x) for x in tb["tokens"]]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "c.safetensors")
        p = subprocess.run([a.dflash, "draft", "--target", target, "--drafter", sidecar,
                            "--tokens", ",".join(map(str, ids)), "--dump", dump],
                           capture_output=True, text=True, timeout=600)
        results.append(("dflash draft runs", p.returncode == 0, p.stderr.strip()[-500:]))
        if p.returncode != 0:
            return report(results)
        cm, ct = export.read_raw(dump)
        c = {k: export.to_f32(*v) if v[0] != "I32" else np.frombuffer(v[2], "<i4") for k, v in ct.items()}

    def close(name, x, y):
        r = rel(x, y)
        results.append((name, r <= a.tol, f"rel {r:.3g}"))

    close("taps: C = PyTorch/transformers", c["taps"], tb["taps"])
    close("block rows: C = PyTorch", c["block_hidden"], tb["block_hidden"])
    close("block logits: C = PyTorch", c["logits"], tb["logits"])
    results.append(("drafts (selector): C = PyTorch", list(c["drafts"]) == list(tb["drafts"]),
                    f"C {ints(c['drafts'])} torch {ints(tb['drafts'])}"))
    results.append(("plain argmax: C = PyTorch", list(c["plain"]) == list(tb["plain"]),
                    f"C {ints(c['plain'])} torch {ints(tb['plain'])}"))
    try:
        import reference
        d = reference.Drafter.sidecar(sidecar)
        tw = {k: export.to_f32(*v) for k, v in export.read_target_raw(target).items()}
        e = tw["model.embed_tokens.weight"].astype(np.float64)
        head = tw.get("lm_head.weight", tw["model.embed_tokens.weight"]).astype(np.float64)
        g = d.g
        n = len(ids)
        ctx = reference.context(d, c["taps"].astype(np.float64), 0)
        hr = reference.block(d, ctx, 0, n - 1, e[[ids[-1]] + [g.mask_token] * (g.block - 1)])
        lr = hr[1:] @ head.T
        rc, rp, _ = reference.select(d, hr[1:], lr, ids[-1])
        close("block rows: reference = C", c["block_hidden"], hr)
        close("block rows: reference = PyTorch", tb["block_hidden"], hr)
        close("block logits: reference = PyTorch", tb["logits"], lr)
        results.append(("drafts: reference = PyTorch", list(rc) == list(tb["drafts"]), f"ref {ints(rc)}"))
    except (ImportError, SystemExit) as err:
        results.append(("reference imports", False, repr(err)))
    return report(results)


def report(results):
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}" + (f" # {detail}" if detail else ""))
    return 0 if results and all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

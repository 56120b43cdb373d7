#!/usr/bin/env python3
"""`dflash draft` end to end: one block on the bf16-tied test checkpoint and
its random sidecar, dumped, against what transformers computed for the
target (expected.safetensors) and the drafter tests' float64 reference for
the block, its logits and the selection. Speaks TAP.

usage: draft_parity.py DFLASH_BINARY FIXTURES_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

DFLASH, FIXTURES = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "drafter"))
try:
    import numpy as np
    import reference
    import stio
except ImportError as e:
    print(f"Bail out! the parity test needs numpy and safetensors ({e})")
    sys.exit(1)

TARGET = os.path.join(FIXTURES, "qwen3", "bf16-tied")
results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok), detail))


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    _, expected = stio.read(os.path.join(TARGET, "expected.safetensors"))
    ids = [int(i) for i in expected["ids"][:12]]
    n = len(ids)
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "draft.safetensors")
        p = subprocess.run([DFLASH, "draft", "--target", TARGET, "--tokens", ",".join(map(str, ids)),
                            "--dump", dump], capture_output=True, text=True, timeout=120)
        check("dflash draft runs", p.returncode == 0, p.stderr)
        if p.returncode != 0:
            return
        _, out = stio.read(dump)

    # the target: transformers' logits and layer outputs of the same tokens
    check("target_logits match transformers",
          rel(out["target_logits"], expected["logits"][:n]) <= 1e-4,
          f"{rel(out['target_logits'], expected['logits'][:n]):.3g}")
    d = reference.Drafter.sidecar(TARGET)
    g = d.g
    want_taps = np.concatenate([expected["layer_outputs"][l][:n - 1] for l in g.taps], axis=1)
    check("taps match transformers' layer outputs", rel(out["taps"], want_taps) <= 1e-4,
          f"{rel(out['taps'], want_taps):.3g}")

    # the drafter: the float64 reference from the dumped taps
    _, target_w = stio.read(os.path.join(TARGET, "model.safetensors"))
    embed = target_w["model.embed_tokens.weight"]           # tied: the head too
    ctx = reference.context(d, out["taps"].astype(np.float64), 0)
    h = embed[[ids[-1]] + [g.mask_token] * (g.block - 1)]
    hidden = reference.block(d, ctx, 0, n - 1, h)
    logits = hidden[1:] @ embed.T
    chosen, plain, _ = reference.select(d, hidden[1:], logits, ids[-1])
    check("block rows match the float64 reference", rel(out["block_hidden"], hidden) <= 1e-4,
          f"{rel(out['block_hidden'], hidden):.3g}")
    check("block logits match", rel(out["logits"], logits) <= 1e-4, f"{rel(out['logits'], logits):.3g}")
    check("selector's drafts identical", list(out["drafts"]) == list(chosen),
          f"{[int(x) for x in out['drafts']]} vs {[int(x) for x in chosen]}")
    check("plain argmax identical", list(out["plain"]) == list(plain),
          f"{[int(x) for x in out['plain']]} vs {[int(x) for x in plain]}")


if __name__ == "__main__":
    main()
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}" + (f" # {detail}" if detail and ok else ""))
        if not ok:
            print(f"# {detail}")
    sys.exit(0 if results and all(ok for _, ok, _ in results) else 1)

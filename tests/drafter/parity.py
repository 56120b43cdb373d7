#!/usr/bin/env python3
"""The C drafter against the float64 reference (reference.py), on random
drafters (make_sidecar.py): context K/V, block rows and logits within 1e-4
(max |a − b| / max |b| a tensor), drafts and plain argmaxes identical, the
router's margins, the trunk hash; then the bad sidecars are refused with
their messages.

    parity.py DRAFTER_TOOL WORK_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402  (checks numpy and safetensors are there)
from stio import np  # noqa: E402
import make_sidecar  # noqa: E402
import reference as ref  # noqa: E402

TOL = 1e-4
failures = []


def check(ok, what):
    print(("ok     " if ok else "FAILED ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return np.inf
    scale = np.abs(b).max() if b.size else 1.0
    return float(np.abs(a - b).max() / scale) if b.size else 0.0


def run_tool(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True)


def parity(tool, work, variant, drafter, target_dir, want_overturn):
    out = f"{work}/{variant}/out.safetensors"
    r = run_tool(tool, "run", drafter, target_dir, f"{work}/{variant}/inputs.safetensors", out)
    check(r.returncode == 0, f"{variant}: drafter-tool run ({r.stderr.strip()})")
    if r.returncode != 0:
        return
    _, got = stio.read(out)
    meta, inp = stio.read(f"{work}/{variant}/inputs.safetensors")
    if variant == "v1":
        d = ref.Drafter.released(drafter)
    else:
        d = ref.Drafter.sidecar(drafter)
    g = d.g
    _, tgt = stio.read(f"{target_dir}/model.safetensors")
    embed = tgt["model.embed_tokens.weight"]
    head = tgt.get("lm_head.weight", embed)
    taps = inp["taps"]
    ctx = ref.Context()
    overturned, dropped = 0, 0
    worst = {"ctx": 0.0, "rows": 0.0, "logits": 0.0}
    for op in json.loads(meta["script"]):
        kind = op["op"]
        if kind == "queue":
            ctx.queue(op["pos"], range(op["src"], op["src"] + op["n"]))
        elif kind == "truncate":
            ctx.truncate(op["pos"])
        elif kind == "reset":
            ctx.reset()
        elif kind == "block":
            name, pos, tok, width = op["name"], op["pos"], op["token"], op["width"]
            kv = ref.context(d, taps[ctx.rows], ctx.first)
            h = np.stack([embed[tok]] + [embed[g.mask_token]] * (g.block - 1))
            rows = ref.block(d, kv, ctx.first, pos, h)
            logits = rows[1:] @ head[:width].T
            chosen, plain, gaps = ref.select(d, rows[1:], logits, tok)
            e_rows, e_logits = rel(got[f"{name}.rows"], rows), rel(got[f"{name}.logits"], logits)
            worst["rows"], worst["logits"] = max(worst["rows"], e_rows), max(worst["logits"], e_logits)
            check(e_rows <= TOL, f"{variant} {name}: block rows, relative error {e_rows:.2e}")
            check(e_logits <= TOL, f"{variant} {name}: logits, relative error {e_logits:.2e}")
            check(np.array_equal(got[f"{name}.plain"], plain),
                  f"{variant} {name}: plain argmax {got[name + '.plain'].tolist()} == {plain.tolist()}")
            check(np.array_equal(got[f"{name}.chosen"], chosen),
                  f"{variant} {name}: drafts {got[name + '.chosen'].tolist()} == {chosen.tolist()}"
                  f" (smallest score gap {gaps.min():.3g})")
            overturned += int((chosen != plain).sum())
        elif kind == "dump_ctx":
            name = op["name"]
            kv = ref.context(d, taps[ctx.rows], ctx.first)
            for l in range(g.layers):
                frm = int(got[f"{name}.l{l}.from"][0])
                k, v = got[f"{name}.l{l}.k"], got[f"{name}.l{l}.v"]
                lo = frm - ctx.first
                dropped += lo > 0
                ok_span = lo >= 0 and lo + k.shape[0] == len(ctx.rows)
                check(ok_span, f"{variant} {name} layer {l}: holds {frm} … {frm + k.shape[0] - 1}"
                      f" of {ctx.first} … {ctx.end - 1}")
                if not ok_span:
                    continue
                w = g.window_of(l)
                if w:
                    check(k.shape[0] <= 2 * (w + 256), f"{variant} {name} layer {l}: {k.shape[0]} rows held,"
                          f" window {w} (at most 2·(window + slack))")
                e = max(rel(k, kv[l][0][lo:]), rel(v, kv[l][1][lo:]))
                worst["ctx"] = max(worst["ctx"], e)
                check(e <= TOL, f"{variant} {name} layer {l}: context K/V, relative error {e:.2e}")
        elif kind == "margin":
            rt = json.loads(d.meta["dflash_route"])
            want = np.array([ref.margin(rt, row) for row in inp["tip"]])
            e = float(np.abs(got[op["name"]] - want).max() / np.abs(want).max())
            check(e <= TOL, f"{variant}: router margins {np.round(want, 3).tolist()}, relative error {e:.2e}")
            check((want > 0).any() and (want < 0).any(), f"{variant}: margins of both signs")
    if variant == "main":
        check(dropped > 0, f"{variant}: windowed layers let rows go ({dropped} layer dumps start past the context's first)")
    if want_overturn:
        check(overturned > 0, f"{variant}: the selector overturned the argmax on {overturned} rows")
    print(f"   {variant}: worst relative error: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))


def bad_inputs(tool, work):
    expect = json.load(open(f"{work}/bad/expect.json"))
    for name, msg in sorted(expect.items()):
        path = f"{work}/bad/{name}.safetensors"
        if name in ("other", "unbound"):
            r = run_tool(tool, "check", path, f"{work}/main/target")
        else:
            r = run_tool(tool, "load", path)
        err = r.stderr.strip()
        check(r.returncode == 1 and msg in err and path in err,
              f"bad/{name}: refused with \"{err}\" (wants the file and \"{msg}\")")
    r = run_tool(tool, "load", f"{work}/bad/route.safetensors")
    check(r.returncode == 0 and "dflash_route.chain has a mean of 64 and a basis of 191 values" in r.stderr,
          f"bad/route: loads without its router, warning \"{r.stderr.strip()}\"")
    r = run_tool(tool, "load", f"{work}/bad/route-rows.safetensors")
    check(r.returncode == 0 and "dflash_route.block_rows is 1.08889e+87, not a count of rows" in r.stderr,
          f"bad/route-rows: loads without its router, warning \"{r.stderr.strip()}\"")
    # sizes that disagree with the target
    r = run_tool(tool, "check", f"{work}/main/dflash.safetensors", f"{work}/v1/target")
    check(r.returncode == 1 and "drafts for a target of 8 layers, hidden 64, vocab 320" in r.stderr
          and "has 12 layers, hidden 64, vocab 300" in r.stderr, f"main against v1's target: \"{r.stderr.strip()}\"")
    for variant, drafter in (("main", "main/dflash.safetensors"), ("mixed", "mixed"), ("v1", "v1/drafter")):
        r = run_tool(tool, "check", f"{work}/{drafter}", f"{work}/{variant}/target")
        check(r.returncode == 0, f"{variant}: bound to its own target ({r.stderr.strip()})")


def hashes(tool, work):
    want = json.load(open(f"{work}/bigtarget/hash.json"))
    for tied in (False, True):
        args = ["hash", f"{work}/bigtarget/model.safetensors"] + (["--tied"] if tied else [])
        r = run_tool(tool, *args)
        w = want["tied" if tied else "untied"]
        check(r.returncode == 0 and r.stdout.strip() == w,
              f"trunk hash over tensors past 2 MiB ({'tied' if tied else 'untied'}): {r.stdout.strip()} == {w}")


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    tool, work = argv[1], argv[2]
    os.makedirs(work, exist_ok=True)
    make_sidecar.main(["make_sidecar.py", work])
    parity(tool, work, "main", f"{work}/main/dflash.safetensors", f"{work}/main/target", True)
    parity(tool, work, "mixed", f"{work}/mixed", f"{work}/mixed/target", True)
    parity(tool, work, "v1", f"{work}/v1/drafter", f"{work}/v1/target", False)
    hashes(tool, work)
    bad_inputs(tool, work)
    if failures:
        print(f"{len(failures)} checks FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all drafter parity checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

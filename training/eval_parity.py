#!/usr/bin/env python3
"""Parity of the PyTorch drafter (training/dflash_torch.py) with the C drafter and the
float64 reference: proof that training and inference compute the same function.

GPU machine (or any machine with torch + transformers; tiny):

    python3 training/eval_parity.py --out OUT [--target DIR] [--drafter SIDECAR] [--tokens 5,6,7,...]

- target: a Hugging Face Qwen3 folder (default: the repo's tests/fixtures/qwen3/bf16-tied);
- drafter: a sidecar; without one a RANDOM drafter is built for that target (windows, a
  no_rope layer, conv and selector all exercised) and written with export.write_sidecar;
- the target (transformers, float32) gives the taps of every token but the last (forward hooks
  on its layers: the raw residual stream); the PyTorch drafter, loaded from the sidecar's stored
  values, runs ONE block anchored at the last token with Drafter.blocks — the very function
  training calls — and its head and selector give the drafts.

OUT/: dflash.safetensors (when generated), torch_block.safetensors (tokens, taps,
block_hidden, logits, drafts, plain) and parity.json (where reference.py could be imported
here: its relative differences). Then, where the C build is (this repo's machine):

    python3 training/check_parity.py --dir OUT     # runs `dflash draft`, compares all three
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import export  # noqa: E402
from dflash_torch import Drafter, TapHooks, load_numpy_weights  # noqa: E402


def random_geometry(cfg):
    L, h = cfg["num_hidden_layers"], cfg["hidden_size"]
    taps = sorted({0, L // 2, L - 1})
    layers = 3
    return dict(hidden=h, intermediate=2 * h, layers=layers, heads=4, kv_heads=2, head_dim=16,
                vocab=cfg["vocab_size"], block=8, mask_token=1, conv_group=4, conv_kernel=3,
                selector_rank=8, selector_top=4, taps=taps, target_layers=L, window=0,
                windows=[6, 0, 10], no_rope=[1], rope_theta=10000.0, eps=1e-6)


def random_weights(g, seed):
    """Every weight away from its trivial value, so a misplaced term shows."""
    torch.manual_seed(seed)
    m = Drafter(g)
    rng = np.random.default_rng(seed)
    w = {}
    for n, t in m.state_dict().items():
        s = tuple(t.shape)
        if n.endswith("base_kernel"):
            b = 0.3 * rng.normal(size=s)
            b[:, 0, :] += 1.0
            w[n] = b
        elif len(s) == 1:
            w[n] = 1.0 + 0.1 * rng.normal(size=s)
        elif n.endswith("_codebook"):
            w[n] = 0.6 * rng.normal(size=s)
        elif "kernel_projection" in n:
            w[n] = rng.normal(0, 0.3 / np.sqrt(s[1]), s)
        else:
            w[n] = rng.normal(0, 1.0 / np.sqrt(s[1]), s)
    return w


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", default=os.path.join(REPO, "tests", "fixtures", "qwen3", "bf16-tied"))
    ap.add_argument("--drafter")
    ap.add_argument("--tokens", help="comma-separated ids: the context then the anchor")
    ap.add_argument("--prompts", help="prompts.npz: take the tokens from its first held-out prompt")
    ap.add_argument("--n-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    from transformers import Qwen3ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device(a.device)
    cfg = json.load(open(os.path.join(a.target, "config.json")))
    target = Qwen3ForCausalLM.from_pretrained(a.target, dtype=torch.float32).eval().to(dev)

    if a.drafter:
        sidecar = os.path.join(a.out, "dflash.safetensors")
        if os.path.abspath(a.drafter) != os.path.abspath(sidecar):
            shutil.copyfile(a.drafter, sidecar)
    else:
        g = random_geometry(cfg)
        sidecar = os.path.join(a.out, "dflash.safetensors")
        export.write_sidecar(sidecar, random_weights(g, a.seed), g,
                             export.trunk_hash64(a.target, cfg["tie_word_embeddings"]))
    meta, stored = export.read_f32(sidecar)
    g = json.loads(meta["dflash"])
    model = Drafter(g).to(dev).eval()
    load_numpy_weights(model, {k[len("dflash."):]: v for k, v in stored.items()})
    embed = target.get_input_embeddings().weight.detach().float()
    model.set_embedding(embed)

    if a.tokens:
        ids = [int(x) for x in a.tokens.split(",")]
    elif a.prompts and os.path.exists(a.prompts):
        ids = [int(x) for x in np.load(a.prompts)["heldout"][0][:a.n_tokens]]
    else:
        rng = np.random.default_rng(a.seed)
        ids = [int(x) for x in rng.integers(2, cfg["vocab_size"], a.n_tokens)]
    n, R = len(ids), g["block"]
    anchor = ids[-1]
    hooks = TapHooks(target, g["taps"])
    with torch.no_grad():
        hs = target.model(input_ids=torch.tensor([ids[:-1]], device=dev), output_hidden_states=True,
                         use_cache=False)
        taps = hooks.collect()                                   # [1, n−1, n_taps·H]
        hooks.remove()
        # the hooks are Hugging Face's hidden_states[id + 1] except after the last layer (normed there)
        hook_vs_hs = max((float((taps[0, :, j * g["hidden"]:(j + 1) * g["hidden"]]
                                 - hs.hidden_states[l + 1][0]).abs().max())
                          for j, l in enumerate(g["taps"]) if l + 1 < cfg["num_hidden_layers"]), default=0.0)
        ctx = model.context(taps)
        block_tokens = torch.tensor([[[anchor] + [g["mask_token"]] * (R - 1)]], device=dev)
        h = model.blocks(ctx, torch.tensor([[n - 1]], device=dev), block_tokens)[0, 0]   # [R, H]
        logits = model.logits(h[1:])
        chosen, plain = model.select(h[1:][None], logits[None], torch.tensor([anchor], device=dev))
    out = {"tokens": ("I32", np.array(ids, np.int32)),
           "taps": ("F32", taps[0].cpu().numpy()),
           "block_hidden": ("F32", h.cpu().numpy()),
           "logits": ("F32", logits.cpu().numpy()),
           "drafts": ("I32", chosen[0].cpu().numpy().astype(np.int32)),
           "plain": ("I32", plain[0].cpu().numpy().astype(np.int32))}
    export.write_safetensors(os.path.join(a.out, "torch_block.safetensors"), out,
                             {"target": os.path.relpath(os.path.abspath(a.target), REPO),
                              "drafter": os.path.basename(sidecar) if not a.drafter else a.drafter})
    report = {"target": os.path.relpath(os.path.abspath(a.target), REPO), "sidecar": sidecar,
              "tokens": ids, "geometry": g, "hooks_vs_hidden_states_max_abs": hook_vs_hs,
              "torch_drafts": [int(x) for x in chosen[0]], "torch_plain": [int(x) for x in plain[0]]}

    # the float64 reference, where it imports here (it needs numpy and safetensors)
    try:
        sys.path.insert(0, os.path.join(REPO, "tests", "drafter"))
        import reference
        d = reference.Drafter.sidecar(sidecar)
        t64 = taps[0].cpu().numpy().astype(np.float64)
        e64 = embed.cpu().numpy().astype(np.float64)
        rctx = reference.context(d, t64, 0)
        hr = reference.block(d, rctx, 0, n - 1, e64[[anchor] + [g["mask_token"]] * (R - 1)])
        lr = hr[1:] @ e64.T
        rc, rp, _ = reference.select(d, hr[1:], lr, anchor)
        report["reference"] = {
            "block_hidden_rel": rel(h.cpu().numpy(), hr), "logits_rel": rel(logits.cpu().numpy(), lr),
            "drafts_equal": [int(x) for x in rc] == report["torch_drafts"],
            "plain_equal": [int(x) for x in rp] == report["torch_plain"]}
        r = report["reference"]
        report["ok"] = r["block_hidden_rel"] <= 1e-4 and r["logits_rel"] <= 1e-4 and r["drafts_equal"] \
            and r["plain_equal"] and hook_vs_hs <= 1e-5
    except (ImportError, SystemExit) as e:
        report["reference"] = f"not run here: {e!r}"
    report["c_check"] = (f"python3 training/check_parity.py --dir {a.out}   "
                         f"# runs: build/tools/dflash draft --target {report['target']} --drafter "
                         f"{a.out}/dflash.safetensors --tokens {','.join(map(str, ids))} --dump C.safetensors")
    with open(os.path.join(a.out, "parity.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k not in ("geometry",)}, indent=1))
    return 0 if report.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Train the DFlash 2 drafter (and its selector) on the target's greedy continuations.

GPU machine (one H200); ≤ 10 minutes a call, resumable:

    python3 training/train_drafter.py [--target training/out/target/hf-q]
        [--tokens training/data/tokens] [--cont training/out/continuations] [--out training/out/drafter]

Each step (DFlash's recipe, DESIGN.md's math through dflash_torch.Drafter.blocks):
- B sequences = prompt (32 tokens, or 4 for a quarter of them: short contexts; drawn from all
  five corpus packages) + the target's greedy continuation (160); a step draws its B from one
  prompt length (chosen in proportion to their counts);
- the frozen target — the shipped quantized weights, dequantized (hf-q) — runs over them in
  float32 (TF32); forward hooks on its layers `taps` give the context rows (raw residual
  stream, no final norm), concatenated: [B, 192, 4·512];
- A random distinct anchors per sequence (32: a block of 8 gives half the rows of the old 16, so
  twice the anchors keep a step's rows), a ∈ [P−1, 192−block] (the continuation's tokens are
  the labels); block = [token at a, <|mask|> × (block − 1)], embedded with the target's table;
- block-sparse attention: block rows see the context rows before their anchor (inside each
  layer's window) and every row of their own block, not the other blocks;
- loss: cross-entropy of row k (k = 1 … block − 1, predicting the token at a + k) through the target's
  head, weighted w_k = exp(−(k−1)/γ) / Σ w (γ = 7);
- the selector (S, P, C) learns on the same rows, teacher-forced (prev = the true token before),
  as re-scoring the top selector_top candidates by logit: cross-entropy over those candidates of
  logit + (P[prev] ⊙ S·h)·C[cand] where the label is among them (same weights w_k); the
  drafter's h and logits are detached for it, so it never bends the drafter.
AdamW (β 0.9/0.95, wd 0.01 on drafter matrices), warm-up then cosine (progress = max(step /
max_steps, train time / time budget)), bf16 autocast, grad clip 1.

Held-out (continuations of held-out-package prompts, fixed anchors every 8 positions; reported
per prompt length and together):
teacher-forced accuracy per row, and the acceptance of a whole block as the verifier would
count it — plain argmax and the selector's sequential choice (prev = the token it chose) —
with τ = mean accepted + 1 (the bonus). The last evaluation uses the weights as stored in the
sidecar (BF16/F16-rounded, float32 arithmetic); if the selector does not beat plain argmax there,
S is zeroed (re-scoring then equals argmax) and the log says so.

OUT/: ckpt.pt (resume), dflash.safetensors (export.write_sidecar, bound to the target's
trunk hash), log.json (curves and the final figures).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import config as C  # noqa: E402
import export  # noqa: E402
from common import load_sequences  # noqa: E402
from dflash_torch import Drafter, TapHooks, load_numpy_weights, numpy_weights  # noqa: E402


def lr_at(progress, a):
    if progress < a.warmup:
        return a.lr * progress / a.warmup
    t = min(1.0, (progress - a.warmup) / max(1e-9, 1.0 - a.warmup))
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


class Batcher:
    """Blocks of a batch of sequences: anchors, block tokens, labels, predecessors."""

    def __init__(self, g, plen, seqlen, dev):
        self.R, self.mask, self.dev = g["block"], g["mask_token"], dev
        self.lo, self.hi = plen - 1, seqlen - g["block"]     # anchors a: a + R − 1 ≤ seqlen − 1
        assert self.hi >= self.lo

    def random_anchors(self, B, A, gen):
        n = self.hi - self.lo + 1
        return torch.rand(B, n, generator=gen, device=self.dev).argsort(1)[:, :A] + self.lo

    def fixed_anchors(self, B, stride):
        a = torch.arange(self.lo, self.hi + 1, stride, device=self.dev)
        return a.expand(B, -1).contiguous()

    def blocks(self, seqs, anchors):
        B, A = anchors.shape
        R = self.R
        k = torch.arange(R, device=self.dev)
        pos = anchors[:, :, None] + k                        # [B, A, R]
        toks = seqs.gather(1, pos.view(B, -1)).view(B, A, R)
        block = torch.full_like(toks, self.mask)
        block[:, :, 0] = toks[:, :, 0]
        return block, toks[:, :, 1:], toks[:, :, :-1]        # block, labels, predecessors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=os.path.join(HERE, "out", "target", "hf-q"))
    ap.add_argument("--tokens", default=os.path.join(HERE, "data", "tokens"))
    ap.add_argument("--cont", default=os.path.join(HERE, "out", "continuations"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "drafter"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.04)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--sel-weight", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--time-budget", type=float, default=240.0, help="seconds of training in all")
    ap.add_argument("--call-budget", type=float, default=480.0, help="seconds this call may train")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--eval-seqs", type=int, default=256)
    ap.add_argument("--eval-stride", type=int, default=8)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--fresh", action="store_true")
    a = ap.parse_args()
    t_start = time.time()
    from transformers import Qwen3ForCausalLM

    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    g = dict(C.DRAFTER)

    target = Qwen3ForCausalLM.from_pretrained(a.target, dtype=torch.float32).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tc = target.config
    assert (tc.hidden_size, tc.vocab_size, tc.num_hidden_layers) == (g["hidden"], g["vocab"], g["target_layers"])
    assert tc.tie_word_embeddings, "the drafter's head is the tied embedding"
    hooks = TapHooks(target, g["taps"])

    # one bucket per prompt length (32, and 4 for short contexts): equal lengths in a batch
    train = [(torch.from_numpy(x).to(dev), Batcher(g, plen, x.shape[1], dev))
             for x, plen in load_sequences(a.tokens, a.cont, "train")]
    held = [(torch.from_numpy(x[:a.eval_seqs]).to(dev), Batcher(g, plen, x.shape[1], dev))
            for x, plen in load_sequences(a.tokens, a.cont, "heldout")]
    share = torch.tensor([float(x.shape[0]) for x, _ in train], device=dev)
    for x, b in train + held:
        print(f"sequences {tuple(x.shape)}, anchors {b.lo}…{b.hi}", flush=True)

    drafter = Drafter(g).to(dev)
    drafter.set_embedding(target.get_input_embeddings().weight)
    sel_params = [p for n, p in drafter.named_parameters() if n.startswith("candidate_selector.")]
    mats = [p for n, p in drafter.named_parameters() if not n.startswith("candidate_selector.") and p.dim() >= 2]
    vecs = [p for n, p in drafter.named_parameters() if not n.startswith("candidate_selector.") and p.dim() < 2]
    opt = torch.optim.AdamW([{"params": mats, "weight_decay": a.wd}, {"params": vecs, "weight_decay": 0.0},
                             {"params": sel_params, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    R = g["block"]
    w = torch.exp(-torch.arange(R - 1, device=dev, dtype=torch.float32) / a.gamma)
    w = w / w.sum()

    ckpt_path = os.path.join(a.out, "ckpt.pt")
    state = {"step": 0, "train_s": 0.0, "log": []}
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    if os.path.exists(ckpt_path) and not a.fresh:
        ck = torch.load(ckpt_path, map_location=dev, weights_only=False)
        drafter.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        gen.set_state(ck["gen"].cpu())
        print(f"resumed at step {state['step']} ({state['train_s']:.0f} s trained)", flush=True)

    def taps_of(seqs):
        with torch.no_grad():
            target.model(input_ids=seqs, use_cache=False)
            return hooks.collect()

    def losses(bt, seqs, anchors, autocast=True):
        block, labels, prevs = bt.blocks(seqs, anchors)
        taps = taps_of(seqs)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            h = drafter.blocks(drafter.context(taps), anchors, block)
            logits = drafter.logits(h[:, :, 1:])
        logits = logits.float()
        ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
        loss_d = (ce * w).sum(-1).mean()
        out = {"loss": loss_d, "h": h, "logits": logits, "labels": labels, "prevs": prevs, "block": block}
        if g["selector_rank"]:
            sel = drafter.candidate_selector
            hp = sel.hidden_projection(h[:, :, 1:].detach().float())
            val, cand = torch.topk(logits.detach(), g["selector_top"], dim=-1)
            score = val + sel.bias(hp, prevs, cand)
            match = cand == labels[..., None]
            has = match.any(-1)
            tgt = match.float().argmax(-1)
            ce_s = F.cross_entropy(score.flatten(0, 2), tgt.flatten(), reduction="none").view(labels.shape)
            ws = w.expand_as(ce_s) * has
            out["loss_sel"] = (ce_s * ws).sum() / ws.sum().clamp_min(1e-9)
        return out

    @torch.no_grad()
    def evaluate(autocast=True):
        drafter.eval()
        res = {}
        for hx, bt in held:
            res[f"p{bt.lo + 1}"] = evaluate_bucket(hx, bt, autocast)
        drafter.train()
        n = sum(r["blocks"] for r in res.values())
        out = {k: sum(r[k] * r["blocks"] for r in res.values()) / n
               for k in ("heldout_loss", "tau_plain", "tau_selector")}
        out["heldout_row_acc"] = [round(sum(r["heldout_row_acc"][j] * r["blocks"] for r in res.values()) / n, 4)
                                  for j in range(R - 1)]
        out["buckets"] = res
        out["blocks"] = n
        return out

    def evaluate_bucket(held, bt, autocast):
        tot = {"loss": 0.0, "acc": torch.zeros(R - 1, device=dev), "n": 0,
               "acc_plain": torch.zeros(R, device=dev), "acc_sel": torch.zeros(R, device=dev)}
        for i in range(0, held.shape[0], 16):
            seqs = held[i:i + 16]
            anchors = bt.fixed_anchors(seqs.shape[0], a.eval_stride)
            o = losses(bt, seqs, anchors, autocast)
            B, A = anchors.shape
            n = B * A
            labels = o["labels"].reshape(n, R - 1)
            plain = o["logits"].argmax(-1).reshape(n, R - 1)
            chosen, _ = drafter.select(o["h"][:, :, 1:].float().reshape(n, R - 1, -1),
                                       o["logits"].reshape(n, R - 1, -1), o["block"][:, :, 0].reshape(n))
            acc_p = (plain == labels).long().cumprod(1).sum(1)      # accepted drafts per block
            acc_s = (chosen == labels).long().cumprod(1).sum(1)
            tot["loss"] += float(o["loss"]) * n
            tot["acc"] += (plain == labels).float().sum(0)
            tot["acc_plain"] += torch.bincount(acc_p, minlength=R)[:R].float()
            tot["acc_sel"] += torch.bincount(acc_s, minlength=R)[:R].float()
            tot["n"] += n
        n = tot["n"]
        k = torch.arange(R, device=dev, dtype=torch.float32)
        return {"heldout_loss": tot["loss"] / n,
                "heldout_row_acc": [round(float(x), 4) for x in tot["acc"] / n],
                "tau_plain": float((tot["acc_plain"] * k).sum() / n + 1),
                "tau_selector": float((tot["acc_sel"] * k).sum() / n + 1),
                "accepted_hist_plain": [int(x) for x in tot["acc_plain"]],
                "accepted_hist_selector": [int(x) for x in tot["acc_sel"]], "blocks": n}

    def save():
        torch.save({"model": drafter.state_dict(), "opt": opt.state_dict(), "state": state,
                    "gen": gen.get_state()}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    drafter.train()
    t_mark = time.time()
    stop = None
    run = {"loss": 0.0, "loss_sel": 0.0, "n": 0}
    while True:
        progress = max(state["step"] / a.max_steps, (state["train_s"] + time.time() - t_mark) / a.time_budget)
        if progress >= 1.0:
            stop = "schedule end"
            break
        if time.time() - t_start > a.call_budget:
            stop = "call budget"
            break
        lr = lr_at(progress, a)
        for gr in opt.param_groups:
            gr["lr"] = lr
        tx, bt = train[int(torch.multinomial(share, 1, generator=gen))]
        idx = torch.randint(0, tx.shape[0], (a.batch,), generator=gen, device=dev)
        seqs = tx[idx]
        anchors = bt.random_anchors(a.batch, a.anchors, gen)
        o = losses(bt, seqs, anchors)
        loss = o["loss"] + a.sel_weight * o.get("loss_sel", 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        if state["step"] % 20 == 0:
            run["loss"] += float(o["loss"])
            run["loss_sel"] += float(o.get("loss_sel", 0.0))
            run["n"] += 1
        if state["step"] % a.eval_every == 0:
            torch.cuda.synchronize()
            state["train_s"] += time.time() - t_mark
            ev = evaluate()
            rec = {"step": state["step"], "lr": lr, "train_s": round(state["train_s"], 1),
                   "train_loss": run["loss"] / max(1, run["n"]), "train_loss_sel": run["loss_sel"] / max(1, run["n"]),
                   **{k: v for k, v in ev.items() if k != "buckets"},
                   "tau_by_prompt_len": {k: [round(v["tau_plain"], 3), round(v["tau_selector"], 3)]
                                         for k, v in ev["buckets"].items()}}
            run = {"loss": 0.0, "loss_sel": 0.0, "n": 0}
            state["log"].append(rec)
            print(json.dumps(rec), flush=True)
            save()
            t_mark = time.time()
    state["train_s"] += time.time() - t_mark
    save()
    if stop == "call budget":
        print(f"stopped: {stop} at step {state['step']}; run the same command again to resume", flush=True)
        return 3

    # the weights as the sidecar stores them, in float32 arithmetic (the C drafter's)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stored = export.stored_weights(numpy_weights(drafter), g)
    load_numpy_weights(drafter, stored)
    final = evaluate(autocast=False)
    note = "selector kept"
    if g["selector_rank"] and final["tau_selector"] < final["tau_plain"]:
        with torch.no_grad():
            drafter.candidate_selector.hidden_projection.weight.zero_()
        note = (f"selector zeroed: τ {final['tau_selector']:.3f} with it < {final['tau_plain']:.3f} "
                f"plain (re-scoring now equals argmax)")
        final = evaluate(autocast=False)
        stored = export.stored_weights(numpy_weights(drafter), g)
    trunk = export.trunk_hash64(a.target, True)
    side = os.path.join(a.out, "dflash.safetensors")
    export.write_sidecar(side, stored, g, trunk)
    summary = {"steps": state["step"], "train_s": round(state["train_s"], 1), "stop": stop,
               "selector": note, "final_stored_weights": final, "trunk_hash64": trunk,
               "sidecar_bytes": os.path.getsize(side), "args": vars(a), "geometry": g}
    with open(os.path.join(a.out, "log.json"), "w") as f:
        json.dump({"summary": summary, "curve": state["log"]}, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("args", "geometry")}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

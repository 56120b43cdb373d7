#!/usr/bin/env python3
"""Train the target: a small Qwen3ForCausalLM (transformers 5) on the Go corpus.

GPU machine (one H200); ≤ 10 minutes a call, resumable:

    python3 training/train_target.py [--data training/data/tokens] [--out training/out/target]

- data: tokens/train.u16.xz and tokens/heldout.u16.xz (training/tokenizer.py);
- model: config.TARGET (75.0 M parameters, tied embeddings); AdamW (β 0.9/0.95, weight decay
  0.1 on matrices), linear warm-up then cosine to 10 % of the peak, bf16 autocast, grad clip 1;
  regularised against the over-fitting this small corpus invites: dropout 0.1 on every
  sub-layer's residual branch (forward hooks) and on attention weights, weight decay, and
  early stopping on the held-out split (its loss every --eval-every steps; the best weights
  are kept; patience --patience evaluations);
- schedule progress = max(step / max_steps, train time / time budget), so the cosine ends when
  either runs out and a slow machine still gets a decayed learning rate;
- every --save-every evaluations, and when the call's own budget runs out, OUT/ckpt.pt is
  written (weights, optimizer, step, best weights, RNG, log): a second call with the same OUT
  resumes from it (--fresh starts over);
- at the end the best weights, in BF16, go to OUT/hf/ with model.save_pretrained (config.json
  as transformers writes it, attention_dropout reset to 0, shards ≤ 14 MB) and
  generation_config.json (eos 0); OUT/log.json holds the curves (train loss, held-out loss,
  learning rate, tokens, seconds) and the summary. --sample prints a greedy continuation of
  "func main() {" (needs --tokenizer).
- `--eval-dir DIR --eval-out FILE` only evaluates a saved folder (the quantized target
  dequantized, export.py dequant) on the same held-out windows, with the same sample, and
  writes FILE: what quantization costs.
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
from common import read_xz  # noqa: E402


def lr_at(progress, a):
    if progress < a.warmup:
        return a.lr * progress / a.warmup
    t = min(1.0, (progress - a.warmup) / max(1e-9, 1.0 - a.warmup))
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def add_residual_dropout(model, p):
    """out = x + dropout(layer(x) − x) on every decoder layer: dropout on the sum of its two
    residual branches (Qwen3 has no hidden dropout of its own). Off in eval mode."""
    def hook(mod, args, kwargs, output):
        x = args[0] if args else kwargs["hidden_states"]
        y = output[0] if isinstance(output, tuple) else output
        y = x + F.dropout(y - x, p, mod.training)
        return (y,) + tuple(output[1:]) if isinstance(output, tuple) else y
    return [layer.register_forward_hook(hook, with_kwargs=True) for layer in model.model.layers]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "tokens"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "target"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "data", "tokenizer.json"))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.05, help="share of the schedule")
    ap.add_argument("--max-steps", type=int, default=1700)
    ap.add_argument("--time-budget", type=float, default=360.0, help="seconds of training (this call and earlier ones)")
    ap.add_argument("--call-budget", type=float, default=540.0, help="seconds this call may run before it saves and exits")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=256)
    ap.add_argument("--patience", type=int, default=6)
    ap.add_argument("--save-every", type=int, default=5, help="evaluations between checkpoints")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--sample", action="store_true")
    ap.add_argument("--eval-dir", help="only evaluate this saved folder (F32 or BF16)")
    ap.add_argument("--eval-out", help="with --eval-dir: the JSON file to write")
    a = ap.parse_args()
    t_start = time.time()
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)

    train = torch.from_numpy(read_xz(os.path.join(a.data, "train.u16.xz")).astype(np.int64)).to(dev)
    held = torch.from_numpy(read_xz(os.path.join(a.data, "heldout.u16.xz")).astype(np.int64)).to(dev)
    # held-out windows: non-overlapping, fixed
    nwin = min(a.eval_windows, (held.numel() - 1) // a.seq)
    held_idx = (torch.arange(nwin, device=dev)[:, None] * a.seq + torch.arange(a.seq + 1, device=dev))
    print(f"train {train.numel()} tokens, held-out {held.numel()} ({nwin} windows of {a.seq})", flush=True)

    def held_loss(m):
        m.eval()
        tot, cnt = 0.0, 0
        with torch.no_grad():
            for i in range(0, nwin, a.batch):
                w = held[held_idx[i:i + a.batch]]
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = m(input_ids=w[:, :-1], use_cache=False).logits
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                       reduction="sum")
                tot += float(loss)
                cnt += w[:, 1:].numel()
        return tot / cnt

    def sample(m):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
        ids = torch.tensor([tok.encode("func main() {").ids], device=dev)
        with torch.no_grad():
            for _ in range(96):
                nxt = m(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], 1)
        return tok.decode(ids[0].tolist())

    if a.eval_dir:
        m = Qwen3ForCausalLM.from_pretrained(a.eval_dir, dtype=torch.float32).to(dev).eval()
        rec = {"folder": a.eval_dir, "heldout_loss": held_loss(m), "windows": nwin, "seq": a.seq}
        if os.path.exists(a.tokenizer):
            rec["sample"] = sample(m)
        print(json.dumps(rec, indent=1), flush=True)
        if a.eval_out:
            with open(a.eval_out, "w") as f:
                json.dump(rec, f, indent=1)
        return 0

    cfg = Qwen3Config(**C.TARGET, attention_dropout=a.dropout)
    model = Qwen3ForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == C.target_params(), (n_params, C.target_params())
    hooks = add_residual_dropout(model, a.dropout) if a.dropout > 0 else []
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if a.compile else model

    ckpt_path = os.path.join(a.out, "ckpt.pt")
    state = {"step": 0, "train_s": 0.0, "best": float("inf"), "best_step": -1, "log": [],
             "done": False}
    best_sd = None
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    if os.path.exists(ckpt_path) and not a.fresh:
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)   # RNG states must stay on the CPU
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        best_sd = ck["best_sd"]
        state = ck["state"]
        gen.set_state(ck["gen"])
        torch.set_rng_state(ck["torch_rng"])
        torch.cuda.set_rng_state(ck["cuda_rng"])
        print(f"resumed at step {state['step']} ({state['train_s']:.0f} s trained, best "
              f"{state['best']:.4f} at {state['best_step']})", flush=True)

    def batch():
        off = torch.randint(0, train.numel() - a.seq - 1, (a.batch,), generator=gen).to(dev)
        x = train[off[:, None] + torch.arange(a.seq + 1, device=dev)]
        return x[:, :-1], x[:, 1:]

    @torch.no_grad()
    def evaluate():
        model.eval()
        tot, cnt = 0.0, 0
        for i in range(0, nwin, a.batch):
            w = held[held_idx[i:i + a.batch]]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = fwd(input_ids=w[:, :-1], use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                   reduction="sum")
            tot += float(loss)
            cnt += w[:, 1:].numel()
        model.train()
        return tot / cnt

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "best_sd": best_sd,
                    "state": state, "gen": gen.get_state(), "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state()}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    model.train()
    run_loss, run_n, t_mark = 0.0, 0, time.time()
    stop_reason = "finished in an earlier call" if state["done"] else None
    while not state["done"]:
        progress = max(state["step"] / a.max_steps, state["train_s"] / a.time_budget)
        if progress >= 1.0:
            stop_reason = "schedule end"
            break
        if time.time() - t_start > a.call_budget:
            stop_reason = "call budget (resume with the same command)"
            break
        lr = lr_at(progress, a)
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        run_loss += float(loss.detach()) if state["step"] % 10 == 0 else 0.0
        run_n += 1 if state["step"] % 10 == 0 else 0
        if state["step"] % a.eval_every == 0:
            torch.cuda.synchronize()
            now = time.time()
            state["train_s"] += now - t_mark
            hl = evaluate()
            rec = {"step": state["step"], "tokens": state["step"] * a.batch * a.seq,
                   "train_loss": run_loss / max(1, run_n), "heldout_loss": hl, "lr": lr,
                   "train_s": round(state["train_s"], 1)}
            state["log"].append(rec)
            run_loss, run_n = 0.0, 0
            if hl < state["best"]:
                state["best"], state["best_step"] = hl, state["step"]
                best_sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
            print(json.dumps(rec), flush=True)
            if state["step"] - state["best_step"] >= a.patience * a.eval_every:
                state["done"] = True
                stop_reason = f"early stop: no held-out gain for {a.patience} evaluations"
            if state["done"] or len(state["log"]) % a.save_every == 0:
                save()
            t_mark = time.time()
    if stop_reason and "call budget" in stop_reason:
        save()
        print(f"stopped: {stop_reason}", flush=True)
        return 3
    state["done"] = True
    save()
    print(f"stopped: {stop_reason}; best held-out loss {state['best']:.4f} at step {state['best_step']}",
          flush=True)

    for h in hooks:
        h.remove()
    if best_sd is not None:
        model.load_state_dict(best_sd)
    model.eval()
    model.config.attention_dropout = 0.0
    model = model.to(torch.bfloat16)
    hf = os.path.join(a.out, "hf")
    model.save_pretrained(hf, max_shard_size="1GB")
    gc = GenerationConfig(bos_token_id=C.EOT, eos_token_id=C.EOT)
    gc.save_pretrained(hf)
    summary = {"params": n_params, "best_heldout_loss": state["best"], "best_step": state["best_step"],
               "steps": state["step"], "train_s": round(state["train_s"], 1), "stop": stop_reason,
               "args": vars(a), "files": {f: os.path.getsize(os.path.join(hf, f)) for f in sorted(os.listdir(hf))}}
    # the saved BF16 weights, evaluated as shipped (upcast to float32)
    shipped = Qwen3ForCausalLM.from_pretrained(hf, dtype=torch.float32).to(dev).eval()
    model, fwd = shipped, shipped
    summary["heldout_loss_bf16_weights"] = evaluate()
    if a.sample and os.path.exists(a.tokenizer):
        summary["sample"] = sample(shipped)
        print(summary["sample"], flush=True)
    with open(os.path.join(a.out, "log.json"), "w") as f:
        json.dump({"summary": summary, "curve": state["log"]}, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "args"}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

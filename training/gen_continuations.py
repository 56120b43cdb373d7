#!/usr/bin/env python3
"""The target's own GREEDY continuations of corpus prompts: what the drafter learns to draft.

GPU machine; about 1–2 minutes:

    python3 training/gen_continuations.py [--target training/out/target/hf-q]
        [--tokens training/data/tokens] [--out training/out/continuations] [--new 160]

- prompts: tokens/prompts.npz (training/tokenizer.py: 32768 train windows of 32 tokens drawn
  from all five packages, and 1024 held-out ones, each inside one document, a quarter at a
  document's start);
- the target as shipped — the quantized GGUF's weights, dequantized to F32 (hf-q, export.py
  dequant) — computes in float32 with TF32 off, the C target's arithmetic, greedily, `--new`
  tokens each (no stop at <|endoftext|>: the target's behaviour after it is still its
  behaviour), batched with a KV cache;
- check: a sample of sequences is re-run without the cache, teacher-forced; its argmax must
  agree with the continuation (reported as `verify_agreement`, near-ties aside ≈ 1.0).

Taps are NOT stored (32768 × 192 × 4 taps × 512 floats would be 52 GB): train_drafter.py
recomputes them with the frozen target inside each step, which costs a few milliseconds.

Short contexts: the last --short-share of the prompts (25 %) keep only their last --short-len
(4) tokens, so the drafter also learns blocks with a few context rows (a user's prompt such as
"func main() {" is 4 tokens).

OUT/: <split>-p<len>-<k>.npz (≤ --part rows each: `tokens` [n, new] uint16, `first` the index
of its first prompt in prompts.npz, `prompt_len`): train-p32-00000,
train-p04-00000, heldout-p32-00000, heldout-p04-00000; gen.json (timings and statistics).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import config as C  # noqa: E402


@torch.inference_mode()
def greedy(model, prompts, new):
    out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1)
    toks = [nxt]
    for _ in range(new - 1):
        out = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        toks.append(nxt)
    return torch.stack(toks, 1)


@torch.inference_mode()
def verify(model, seqs, plen, batch=64):
    """Teacher-forced argmax over prompt + continuation vs the continuation itself."""
    agree, total = 0, 0
    for i in range(0, seqs.shape[0], batch):
        s = seqs[i:i + batch]
        pred = model(input_ids=s[:, :-1], use_cache=False).logits.argmax(-1)[:, plen - 1:]
        agree += int((pred == s[:, plen:]).sum())
        total += pred.numel()
    return agree / max(1, total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=os.path.join(HERE, "out", "target", "hf-q"))
    ap.add_argument("--tokens", default=os.path.join(HERE, "data", "tokens"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "continuations"))
    ap.add_argument("--new", type=int, default=160)
    # 8192 sequences a batch ran out of memory on an 80 GB H100 (its KV cache and attention's
    # scores at 192 positions); 4096 took the same time there as 8192 on the H200
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--part", type=int, default=36864,
                    help="rows per output file (36864 × 160 uint16 = 11.8 MB even uncompressed: < 16 MiB)")
    ap.add_argument("--n-train", type=int, default=0, help="0: every train prompt")
    ap.add_argument("--n-heldout", type=int, default=0, help="0: every held-out prompt")
    ap.add_argument("--verify", type=int, default=256)
    ap.add_argument("--short-share", type=float, default=0.25,
                    help="share of prompts cut to their last --short-len tokens (short contexts)")
    ap.add_argument("--short-len", type=int, default=4)
    a = ap.parse_args()
    from transformers import Qwen3ForCausalLM

    t0 = time.time()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    model = Qwen3ForCausalLM.from_pretrained(a.target, dtype=torch.float32).to(dev).eval()
    z = np.load(os.path.join(a.tokens, "prompts.npz"))
    stats = {"target": a.target, "new": a.new, "splits": {}}
    for split, n_want in (("train", a.n_train), ("heldout", a.n_heldout)):
        allp = z[split]
        if n_want:
            allp = allp[:n_want]
        n_all, P = allp.shape
        n_short = int(round(n_all * a.short_share))
        # (first prompt, last prompt + 1, prompt length): the last n_short prompts keep only
        # their last short_len tokens, so the drafter also sees contexts of a few rows
        groups = [(0, n_all - n_short, P)] + ([(n_all - n_short, n_all, a.short_len)] if n_short else [])
        for lo, hi, plen in groups:
            prompts = allp[lo:hi, P - plen:]
            n = hi - lo
            t1 = time.time()
            outs = []
            for i in range(0, n, a.batch):
                p = torch.from_numpy(prompts[i:i + a.batch].astype(np.int64)).to(dev)
                outs.append(greedy(model, p, a.new).cpu())
                print(f"{split} p{plen}: {min(i + a.batch, n)}/{n} ({time.time() - t1:.0f} s)", flush=True)
            cont = torch.cat(outs).numpy()
            assert cont.max() < C.VOCAB
            cont = cont.astype(np.uint16)
            files = []
            for k, i in enumerate(range(0, n, a.part)):
                f = f"{split}-p{plen:02d}-{k:05d}.npz"
                np.savez_compressed(os.path.join(a.out, f), tokens=cont[i:i + a.part], first=np.int64(lo + i),
                                    prompt_len=np.int64(plen))
                files.append((f, os.path.getsize(os.path.join(a.out, f))))
            nv = min(a.verify, n)
            seqs = torch.from_numpy(np.concatenate([prompts[:nv], cont[:nv]], 1).astype(np.int64)).to(dev)
            # repetition: share of continuation tokens equal to the token 1…8 places before (loops)
            rep = float(np.mean([(cont[:, 8:] == cont[:, 8 - d:cont.shape[1] - d]).mean() for d in range(1, 9)]))
            stats["splits"][f"{split}-p{plen}"] = {
                "prompts": n, "prompt_len": plen, "seconds": round(time.time() - t1, 1),
                "tokens_per_s": round(n * a.new / (time.time() - t1)),
                "verify_agreement": verify(model, seqs, plen),
                "eot_share": float((cont == C.EOT).mean()), "distinct_tokens": int(len(np.unique(cont))),
                "repeat_within_8": rep, "files": files}
            if split == "train" and "train_package" in z.files:
                # the same figures per corpus package: loops show where the target has seen least
                pk = z["train_package"][lo:hi]
                names = json.load(open(os.path.join(a.tokens, "meta.json")))["packages"]
                stats["splits"][f"{split}-p{plen}"]["by_package"] = {
                    names[k]: {"prompts": int((pk == k).sum()),
                               "eot_share": float((cont[pk == k] == C.EOT).mean()),
                               "repeat_within_8": float(np.mean([(c[:, 8:] == c[:, 8 - d:c.shape[1] - d]).mean()
                                                                 for c in [cont[pk == k]] for d in range(1, 9)]))}
                    for k in range(len(names)) if (pk == k).any()}
            print(json.dumps(stats["splits"][f"{split}-p{plen}"]), flush=True)
    stats["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "gen.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(f"done in {stats['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

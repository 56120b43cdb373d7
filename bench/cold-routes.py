#!/usr/bin/env python3
"""Cold `dflash generate` per prompt, as a user meets it: each run a new
process that loads the pair, on the held-out prompts, by route:

  default        route cost with its kept figures: a cache folder of this
                 run's own, first taught on --teach prompts of
                 bench/tuning-prompts.txt (as the runs before it would)
  default-fresh  route cost with no figures kept (--route-figures none)
  chain          prompt lookup alone (--route chain)
  block          the DFlash block alone (--route block)
  no-draft       the target alone

The modes alternate prompt by prompt, --rounds times, and every output must
equal no-draft's. Prints tokens/s (new tokens over the runs' wall time,
load and prefill included) and each against no-draft and chain, all from
this one run.

  python3 bench/cold-routes.py [BUILD_DIR] [--prompts N] [--rounds R] [--teach N]
                               [--target DIR|FILE.gguf] [--modes default,chain,...]
                               [--backend cpu|cuda|vulkan]

(--modes: default-fresh, default, chain and no-draft unless named; no-draft
is always run, as the outputs' reference.)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--teach", type=int, default=12)
ap.add_argument("--max-new", type=int, default=128)
ap.add_argument("--target", help="a target other than the default pair's (its drafter beside it)")
ap.add_argument("--modes", default="default,default-fresh,chain,no-draft")
ap.add_argument("--backend", default="cpu", help="where every run's pipeline runs (dflash generate --backend)")
a = ap.parse_args()
dflash = os.path.join(a.build, "tools", "dflash")
held = [l.rstrip("\n") for l in open(os.path.join(here, "heldout-prompts.txt")) if l.strip()]
tune = [l.rstrip("\n") for l in open(os.path.join(here, "tuning-prompts.txt")) if l.strip()]
cache = tempfile.mkdtemp(prefix="dflash-cold-")
env = dict(os.environ, XDG_CACHE_HOME=cache)
known = {
    "default": [],
    "default-fresh": ["--route-figures", "none"],
    "chain": ["--route", "chain"],
    "block": ["--route", "block"],
    "match": ["--route", "match"],
    "no-draft": ["--no-draft"],
}
wanted = [m for m in a.modes.split(",") if m]
for m in wanted:
    if m not in known:
        sys.exit(f"--modes: {m!r} is not one of {', '.join(known)}")
modes = {m: known[m] for m in known if m in wanted or m == "no-draft"}
target = ["--target", a.target] if a.target else []
# named only off the CPU, so builds from before --backend can be compared
backend = ["--backend", a.backend] if a.backend != "cpu" else []


def generate(prompt, extra):
    t0 = time.monotonic()
    p = subprocess.run([dflash, "generate", *target, "--prompt", prompt, "--max-new",
                        str(a.max_new), "--json", *backend, *extra], capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"dflash generate {' '.join(extra)} on {prompt!r}: {p.stderr.strip()}")
    return json.loads(p.stdout), wall


for i, prompt in enumerate(tune[:a.teach] if "default" in modes else []):
    print(f"\rteaching the figures: {i + 1}/{a.teach}", end="", file=sys.stderr, flush=True)
    generate(prompt, [])
print(file=sys.stderr) if "default" in modes else None
tokens = {m: 0 for m in modes}
wall = {m: 0.0 for m in modes}
blocks = {m: 0 for m in modes}
alone = 0
total = a.rounds * a.prompts
for r in range(a.rounds):
    for i, prompt in enumerate(held[:a.prompts]):
        print(f"\rround {r + 1}/{a.rounds}, prompt {i + 1}/{a.prompts}", end="", file=sys.stderr,
              flush=True)
        got = {}
        for m, extra in modes.items():
            o, w = generate(prompt, extra)
            got[m] = o["new_tokens"]
            tokens[m] += len(o["new_tokens"])
            wall[m] += w
            blocks[m] += o.get("block_rounds", 0)
            if m == "default" and o.get("route_pipeline") == "chain":
                alone += 1
        for m in modes:
            if got[m] != got["no-draft"]:
                sys.exit(f"\n{m} differs from no-draft on {prompt!r}")
print(file=sys.stderr)
print(f"{total} cold runs a mode ({a.prompts} held-out prompts x {a.rounds}, {a.max_new} new "
      f"tokens, --backend {a.backend}), outputs identical; tokens/s with load and prefill")
for m in modes:
    rate = tokens[m] / wall[m]
    vs_chain = (f"   x chain {rate / (tokens['chain'] / wall['chain']):.2f}" if "chain" in modes
                else "")
    print(f"  {m:14s} {rate:7.1f}   x no-draft {rate / (tokens['no-draft'] / wall['no-draft']):.2f}"
          f"{vs_chain}   block rounds {blocks[m]}")
if "default" in modes:
    print(f"  default ran prompt lookup alone in {alone} of {total} runs")

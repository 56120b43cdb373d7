#!/usr/bin/env python3
"""`dflash serve` as its clients meet it, against `dflash generate` on the
same prompts: what the server costs a request, and what concurrent
requests gain.

  python3 bench/serve-load.py [BUILD_DIR] [--target DIR|FILE.gguf] [--prompts N]
                              [--max-new N] [--route ROUTE] [--concurrency 1,8] [--rounds R]

First `dflash generate --json` per prompt (a new process each, greedy, the
same route): its text and its time from the prompt's pass to the last
token (`wall_s`: load left out). Then one server (`--max-sequences` the
largest concurrency) and, after a request to warm it, for each concurrency
C: C clients, each sending its share of the prompts (all of them, --rounds
times) one after the other as streaming `/v1/completions` requests
(temperature 0, `stream_options.include_usage`), Server-Sent Events read as
they come. Every streamed text must equal generate's for its prompt.

Prints per concurrency the aggregate tokens/s (completion tokens over the
phase's wall time) and a request's mean time; for one client the ratio of
its tokens/s to generate's over the same prompts (the server's own cost: the
HTTP request, the events, the pipeline's hand-over), and for each C its
aggregate over one client's. Figures of one run, on one machine: no
pass/fail on time.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--target", help="a target other than the default pair's (its drafter beside it)")
ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--max-new", type=int, default=128)
ap.add_argument("--route", default="chain",
                help="the route of both sides (default chain: the same pipeline each run)")
ap.add_argument("--concurrency", default="1,8")
ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args()
dflash = os.path.join(a.build, "tools", "dflash")
prompts = [l.rstrip("\n") for l in open(os.path.join(here, "heldout-prompts.txt")) if l.strip()]
prompts = prompts[:a.prompts]
levels = [int(c) for c in a.concurrency.split(",") if c]
if not prompts or not levels or min(levels) < 1:
    sys.exit("--prompts and --concurrency must be at least 1")
target = ["--target", a.target] if a.target else []
route = ["--route", a.route, "--route-figures", "none"] if a.route != "none" else ["--no-draft"]
env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="dflash-serve-load-"))

# --- dflash generate, a process a prompt ---------------------------------
want = {}
gen_tokens, gen_wall = 0, 0.0
for i, p in enumerate(prompts):
    print(f"\rdflash generate: {i + 1}/{len(prompts)}", end="", file=sys.stderr, flush=True)
    r = subprocess.run([dflash, "generate", *target, *route, "--prompt", p, "--max-new",
                        str(a.max_new), "--json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"dflash generate on {p!r}: {r.stderr.strip()}")
    o = json.loads(r.stdout)
    want[p] = o["text"]
    gen_tokens += len(o["new_tokens"])
    gen_wall += o["wall_s"]
print(file=sys.stderr)

# --- the server ------------------------------------------------------------
srv = subprocess.Popen([dflash, "serve", *target, *route, "--port", "0", "--max-sequences",
                        str(max(levels)), "--max-tokens", str(a.max_new), "--model-name", "bench"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
line = srv.stdout.readline()
m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
if not m:
    srv.kill()
    sys.exit("dflash serve did not start: " + line + srv.stderr.read())
port = int(m.group(1))
threading.Thread(target=lambda: srv.stderr.read(), daemon=True).start()


def complete(prompt):
    """One streaming request: (text, completion tokens, seconds)."""
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": a.max_new,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = c.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read().decode()}")
    text, tokens = [], 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        ev = json.loads(data)
        for ch in ev.get("choices") or []:
            text.append(ch.get("text") or "")
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
    c.close()
    return "".join(text), tokens, time.monotonic() - t0


try:
    complete(prompts[0])   # the first request's one-time costs (the drafter's binding)
    rate = {}
    for cc in levels:
        work = [p for _ in range(a.rounds) for p in prompts]
        shares = [work[i::cc] for i in range(cc)]

        def client(share):
            out = []
            for p in share:
                out.append((p, *complete(p)))
            return out

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(cc) as ex:
            done = [r for f in [ex.submit(client, s) for s in shares] for r in f.result()]
        wall = time.monotonic() - t0
        for p, text, _, _ in done:
            if text != want[p]:
                sys.exit(f"concurrency {cc}: the server's text for {p!r} differs from "
                         "dflash generate's")
        tokens = sum(t for _, _, t, _ in done)
        rate[cc] = tokens / wall
        print(f"concurrency {cc:2d}: {len(done)} requests, {tokens} tokens in {wall:.2f} s: "
              f"{rate[cc]:.1f} tokens/s aggregate, {sum(s for *_, s in done) / len(done):.3f} s "
              "a request")
        if cc == 1:
            # one client's requests, one at a time: its tokens/s against generate's
            print(f"  one client x dflash generate (prompt pass to last token, load left out; "
                  f"{gen_tokens / gen_wall:.1f} tokens/s): {rate[cc] / (gen_tokens / gen_wall):.2f}")
    if 1 in rate:
        for cc in levels:
            if cc != 1:
                print(f"  {cc} clients x 1: {rate[cc] / rate[1]:.2f}")
    print(f"texts identical to dflash generate's; route {a.route}, {a.max_new} new tokens, "
          f"{len(prompts)} held-out prompts x {a.rounds}")
finally:
    srv.terminate()
    srv.wait(timeout=60)

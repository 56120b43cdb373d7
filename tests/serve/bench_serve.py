#!/usr/bin/env python3
"""The server's overhead: `dflash serve` with one streaming client against
`dflash generate` on the same prompt, greedy, alternating, in one run.

generate's figure is its own wall time over the prompt's pass and the
rounds (its JSON `wall_s`: the model's loading and the pipeline's start
left out); the server's is the client's, from sending the request to the
stream's [DONE] (HTTP, JSON and SSE included). Both generate the same
tokens (the test checks that); the ratio is tokens/s served over tokens/s
generated.

    bench_serve.py DFLASH [--target DIR] [--max-tokens N] [--runs N] [--prompt TEXT]
"""
import argparse
import json
import re
import statistics
import subprocess
import time

import openai


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dflash")
    ap.add_argument("--target", default=None)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt", default="func ContainsRune(s string, r rune) bool {")
    a = ap.parse_args()
    target = ["--target", a.target] if a.target else []
    srv = subprocess.Popen([a.dflash, "serve", "--port", "0", "--model-name", "m", *target],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = re.search(r"127\.0\.0\.1:(\d+)/", srv.stdout.readline()).group(1)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
    gen_rates, srv_rates = [], []
    try:
        for _ in range(a.runs):
            p = subprocess.run([a.dflash, "generate", "--json", "--prompt", a.prompt,
                                "--max-new", str(a.max_tokens), *target],
                               capture_output=True, text=True, check=True)
            g = json.loads(p.stdout)
            gen_rates.append(len(g["new_tokens"]) / g["wall_s"])
            t0 = time.perf_counter()
            s = client.completions.create(model="m", prompt=a.prompt, max_tokens=a.max_tokens,
                                          temperature=0, stream=True,
                                          stream_options={"include_usage": True})
            text, n = "", 0
            for ch in s:
                if ch.choices:
                    text += ch.choices[0].text
                if ch.usage:
                    n = ch.usage.completion_tokens
            srv_rates.append(n / (time.perf_counter() - t0))
            if text != g["text"]:
                raise SystemExit("the server's text differs from dflash generate's")
    finally:
        srv.terminate()
        srv.wait()
    g, s = statistics.median(gen_rates), statistics.median(srv_rates)
    print(f"dflash generate: {g:.1f} tokens/s, dflash serve + 1 streaming client: {s:.1f} "
          f"tokens/s (medians of {a.runs}, {a.max_tokens} tokens); serve / generate = "
          f"{s / g:.3f}")


if __name__ == "__main__":
    main()

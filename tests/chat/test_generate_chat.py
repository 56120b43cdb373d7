#!/usr/bin/env python3
"""`dflash generate --chat` against the same conversation rendered by jinja2
from the Qwen3 template and encoded by Hugging Face's `tokenizers`: the
prompt the command builds must be those tokens, so its output must be what
`dflash generate --tokens` gives for them. Bad option combinations fail
with a usage error. TAP on stdout.

    test_generate_chat.py DFLASH TEMPLATES_DIR   (the model: $DFLASH_MODEL)
"""
import json
import os
import subprocess
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

DFLASH, TEMPLATES = sys.argv[1], sys.argv[2]
MODEL = os.environ["DFLASH_MODEL"]
results = []


def check(name, cond, detail=""):
    results.append((name, cond, detail))


def run(*args):
    return subprocess.run([DFLASH, *args], capture_output=True, text=True, timeout=120)


def render(messages, enable_thinking):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    with open(os.path.join(TEMPLATES, "qwen3.jinja"), encoding="utf-8") as f:
        source = f.read()
    variables = {"messages": messages, "add_generation_prompt": True}
    if not enable_thinking:
        variables["enable_thinking"] = False
    return env.from_string(source).render(**variables)


def main():
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    cases = [
        ("user only", None, "func Max(a, b int) int {", True),
        ("system, thinking off", "Answer in Go.", "Reverse a slice", False),
        ("unicode", "Réponds brièvement.", "Grüße — 日本語 🚀", True),
    ]
    for name, system, prompt, thinking in cases:
        messages = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": prompt}]
        ids = tok.encode(render(messages, thinking), add_special_tokens=False).ids
        args = ["generate", "--json", "--max-new", "12"]
        chat = run(*args, "--chat", "--prompt", prompt,
                   *(["--system", system] if system else []),
                   *([] if thinking else ["--no-thinking"]))
        plain = run(*args, "--tokens", ",".join(map(str, ids)))
        ok = chat.returncode == 0 and plain.returncode == 0
        check(f"{name}: both run", ok, chat.stderr + plain.stderr)
        if ok:
            a, b = json.loads(chat.stdout), json.loads(plain.stdout)
            check(f"{name}: prompt tokens are the template's ({len(ids)})",
                  a["prompt_tokens"] == len(ids), f"{a['prompt_tokens']} != {len(ids)}")
            check(f"{name}: the same new tokens", a["new_tokens"] == b["new_tokens"],
                  f"{a['new_tokens']} != {b['new_tokens']}")
    for name, args, needle in [
        ("--chat with --tokens", ["--chat", "--tokens", "1,2"], "not --tokens"),
        ("--system without --chat", ["--system", "x"], "--system needs --chat"),
        ("--no-thinking without --chat", ["--no-thinking"], "--no-thinking needs --chat"),
    ]:
        p = run("generate", *args)
        check(f"usage: {name}", p.returncode == 2 and needle in p.stderr, p.stderr)
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} {name}")
        if not ok and detail:
            for line in str(detail).splitlines()[:10]:
                print(f"# {line}")


if __name__ == "__main__":
    main()

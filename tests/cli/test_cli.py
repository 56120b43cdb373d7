#!/usr/bin/env python3
"""The `dflash` command as a user meets it: exit statuses, one-line messages
naming the file and the problem, and the JSON it prints. Bad checkpoints are
made by corrupting a copy of a test checkpoint. Speaks TAP.

usage: test_cli.py DFLASH_BINARY FIXTURES_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

DFLASH, FIXTURES = sys.argv[1], sys.argv[2]
GOOD = os.path.join(FIXTURES, "qwen3", "bf16-tied")
results = []
# route cost's figures are kept under the user's cache folder: this run's own
CACHE = tempfile.mkdtemp(prefix="dflash-cache-")
os.environ["XDG_CACHE_HOME"] = CACHE


def run(*args, leaks=True):
    env = dict(os.environ)
    # a sanitizer's own exit status must not pass for ours
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":exitcode=99" + ("" if leaks else ":detect_leaks=0")
    env["UBSAN_OPTIONS"] = env.get("UBSAN_OPTIONS", "") + ":halt_on_error=1:exitcode=98"
    p = subprocess.run([DFLASH, *args], capture_output=True, text=True, env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def copy_checkpoint(tmp, name):
    d = os.path.join(tmp, name)
    shutil.copytree(GOOD, d)
    return d


def read_st(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, body, header_len=None):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if header_len is None else header_len))
        f.write(h)
        f.write(body)


def expect_error(name, args, *needles, status=1):
    rc, out, err = run(*args)
    lines = [l for l in err.splitlines() if not l.startswith("dflash: no default model")]
    ok = rc == status and len(lines) == 1 and lines[0].startswith("dflash: ") \
        and all(n in lines[0] for n in needles) \
        and "Sanitizer" not in err and "runtime error" not in err
    check(name, ok, f"rc={rc} stderr={err.strip()!r}")


def corrupt_tests(tmp):
    st = "model.safetensors"

    d = copy_checkpoint(tmp, "truncated")
    p = os.path.join(d, st)
    os.truncate(p, os.path.getsize(p) // 2)
    expect_error("truncated file", ["generate", "--target", d, "--max-new", "2"], st)

    d = copy_checkpoint(tmp, "header-past-end")
    p = os.path.join(d, st)
    h, body = read_st(p)
    write_st(p, h, body, header_len=os.path.getsize(p) + 100)
    expect_error("header length past the end", ["generate", "--target", d], st, "header")

    d = copy_checkpoint(tmp, "header-absurd")
    p = os.path.join(d, st)
    h, body = read_st(p)
    write_st(p, h, body, header_len=1 << 62)
    expect_error("absurd header length", ["generate", "--target", d], st, "header")

    d = copy_checkpoint(tmp, "offset-out")
    p = os.path.join(d, st)
    h, body = read_st(p)
    h["model.norm.weight"]["data_offsets"] = [len(body) - 64, len(body) + 64]
    write_st(p, h, body)
    expect_error("offsets out of range", ["generate", "--target", d], st, "model.norm.weight")

    d = copy_checkpoint(tmp, "overlap")
    p = os.path.join(d, st)
    h, body = read_st(p)
    names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
    a, b = names[0], names[1]
    size = h[b]["data_offsets"][1] - h[b]["data_offsets"][0]
    h[b]["data_offsets"] = [h[a]["data_offsets"][0], h[a]["data_offsets"][0] + size]
    write_st(p, h, body)
    expect_error("overlapping offsets", ["generate", "--target", d], st, "overlap")

    d = copy_checkpoint(tmp, "dtype")
    p = os.path.join(d, st)
    h, body = read_st(p)
    h["model.norm.weight"]["dtype"] = "Q4_K"
    write_st(p, h, body)
    expect_error("unknown dtype", ["generate", "--target", d], st, "Q4_K")

    d = copy_checkpoint(tmp, "shape-bytes")
    p = os.path.join(d, st)
    h, body = read_st(p)
    h["model.norm.weight"]["shape"] = [65]
    write_st(p, h, body)
    expect_error("shape/byte mismatch", ["generate", "--target", d], st, "model.norm.weight")

    d = copy_checkpoint(tmp, "missing")
    p = os.path.join(d, st)
    h, body = read_st(p)
    # renamed, so the data area stays whole and only the name is missing
    h["model.layers.1.mlp.spare.weight"] = h.pop("model.layers.1.mlp.up_proj.weight")
    write_st(p, h, body)
    expect_error("missing tensor", ["generate", "--target", d], "model.layers.1.mlp.up_proj.weight")

    d = copy_checkpoint(tmp, "wrong-shape")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["intermediate_size"] = 256
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    expect_error("wrong shape", ["generate", "--target", d], "mlp", "256")

    d = copy_checkpoint(tmp, "config-missing")
    cfg = json.load(open(os.path.join(d, "config.json")))
    del cfg["hidden_size"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    expect_error("config missing a key", ["generate", "--target", d], "config.json", "hidden_size")

    d = copy_checkpoint(tmp, "arch")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["model_type"] = "llama"
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    expect_error("unsupported architecture", ["generate", "--target", d], "config.json", "LlamaForCausalLM")

    d = copy_checkpoint(tmp, "bad-json")
    open(os.path.join(d, "config.json"), "w").write("{\"hidden_size\": 64,")
    expect_error("config not JSON", ["generate", "--target", d], "config.json")

    # absurd sizes: refused with the file, the value and what is accepted
    d = copy_checkpoint(tmp, "vocab-absurd")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["vocab_size"] = 5000000
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    expect_error("absurd vocab_size", ["generate", "--target", d], "config.json",
                 "'vocab_size' is 5000000; accepted: 1 to 4194304")

    d = copy_checkpoint(tmp, "geometry-absurd")
    p = os.path.join(d, "dflash.safetensors")
    h, body = read_st(p)
    g = json.loads(h["__metadata__"]["dflash"])
    g["block"] = 300
    h["__metadata__"]["dflash"] = json.dumps(g)
    write_st(p, h, body)
    expect_error("absurd drafter block", ["generate", "--target", d], "dflash.safetensors",
                 "\"block\" is 300; accepted: 0 to 256")

    d = copy_checkpoint(tmp, "tokenizer-absurd")
    p = os.path.join(d, "tokenizer.json")
    t = json.load(open(p))
    t["model"]["vocab"]["absurd"] = 5000000
    json.dump(t, open(p, "w"))
    expect_error("absurd tokenizer id", ["generate", "--target", d], "tokenizer.json", "id 5000000",
                 "ids 0 to 4194303")

    expect_error("no such target folder", ["generate", "--target", os.path.join(tmp, "nowhere")], "nowhere")
    expect_error("inspect of a truncated file", ["inspect", os.path.join(tmp, "truncated", st)], st)


def main():
    expect_error("unknown token id in --tokens", ["generate", "--target", GOOD, "--tokens", "1,2,4096"], "4096")
    expect_error("negative token id in --tokens", ["generate", "--target", GOOD, "--tokens", "-3"], "-3")
    expect_error("malformed --tokens", ["generate", "--target", GOOD, "--tokens", "1,two"], "two", status=2)
    expect_error("unknown option", ["generate", "--frobnicate"], "frobnicate", status=2)
    expect_error("unknown command", ["frobnicate"], "frobnicate", status=2)
    expect_error("--max-new 0", ["generate", "--target", GOOD, "--max-new", "0"], "--max-new", status=2)
    expect_error("prompt and --max-new past the context", ["generate", "--target", GOOD, "--max-new", "600"],
                 "max_position_embeddings 512", "--max-new 600", "--max-new may be at most")
    expect_error("prompt longer than the context",
                 ["generate", "--target", GOOD, "--tokens", ",".join(["5"] * 600)],
                 "the prompt has 600 tokens", "max_position_embeddings 512", "at most 503 prompt tokens")
    expect_error("empty --prompt", ["generate", "--target", GOOD, "--prompt", ""],
                 "the prompt is empty", "--prompt", status=2)
    expect_error("empty --tokens", ["generate", "--target", GOOD, "--tokens", ""],
                 "--tokens: the list is empty", status=2)
    expect_error("empty entry in --tokens", ["generate", "--target", GOOD, "--tokens", "1,,2"],
                 "--tokens: entry 2 is empty", status=2)
    expect_error("--tokens past an int", ["generate", "--target", GOOD, "--tokens", "1,99999999999"],
                 "entry 2, '99999999999', is not a token id", status=2)

    rc, out, err = run("generate", "--target", GOOD, "--prompt", "func main() {", "--max-new", "12", "--json")
    try:
        o = json.loads(out)
        keys = {"new_tokens", "text", "prompt_tokens", "rounds", "decode_tokens_per_s",
                "prefill_tokens_per_s", "wall_s"}
        check("--json has the fixed keys", rc == 0 and keys <= set(o) and len(o["new_tokens"]) <= 12,
              f"rc={rc} keys={sorted(o)}")
    except ValueError:
        check("--json has the fixed keys", False, f"rc={rc} stdout={out!r} stderr={err!r}")
        o = None

    rc2, out2, err2 = run("generate", "--target", GOOD, "--prompt", "func main() {", "--max-new", "12")
    check("streamed text equals the JSON text", o is not None and rc2 == 0 and out2 == o["text"],
          f"stream={out2!r}")
    check("figures line on stderr", "new; prefill" in err2, err2)

    rc, out, err = run("generate", "--target", GOOD, "--tokens", ",".join(map(str, o["new_tokens"][:3])) if o else "1",
                       "--max-new", "4", "--json", "--no-draft")
    check("--tokens and --no-draft accepted", rc == 0 and json.loads(out)["prompt_tokens"] == 3, err)

    # drafting (the random sidecar beside the checkpoint) changes nothing of the text
    plain = None
    for route in ("none", "block", "chain", "match", "auto", "cost"):
        args = ["generate", "--target", GOOD, "--prompt", "the the cat the cat", "--max-new", "40", "--json",
                "--route-figures", "none"]
        args += ["--no-draft"] if route == "none" else ["--route", route]
        rc, out, err = run(*args)
        try:
            o = json.loads(out)
        except ValueError:
            o = {}
        if route == "none":
            plain = o.get("new_tokens")
            check("no-draft run", rc == 0 and plain, err)
        else:
            check(f"--route {route}: the no-draft tokens, figures present",
                  rc == 0 and o.get("new_tokens") == plain and o.get("route") == route
                  and len(o.get("accept_rate_per_position", [])) == 7
                  and {"mean_accepted", "draft_s", "verify_s"} <= set(o), f"rc={rc} {err} {o}")
    rc, out, err = run("generate", "--target", GOOD, "--prompt", "the the cat the cat", "--max-new", "40", "--json")
    check("the default route with a drafter is cost, and keeps the no-draft tokens",
          rc == 0 and json.loads(out).get("route") == "cost" and json.loads(out).get("new_tokens") == plain,
          f"rc={rc} {err}")
    # route cost keeps its figures between runs: under the user's cache folder
    # by default, in the file --route-figures names, nowhere with none
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        figures = os.path.join(tmp, "figures", "pair.json")
        base = ["generate", "--target", GOOD, "--prompt", "the the cat the cat", "--max-new", "40", "--json"]
        rc, out, err = run(*base)
        route_dir = os.path.join(tmp, "cache", "gst-dflash", "route")
        made = os.listdir(route_dir) if os.path.isdir(route_dir) else []
        try:
            kept = json.load(open(os.path.join(route_dir, made[0]))) if len(made) == 1 else {}
        except ValueError:
            kept = {}
        check("route cost keeps its figures in the user's cache folder",
              rc == 0 and kept.get("format") == "gst-dflash route figures" and "cpu" in kept,
              f"rc={rc} {err} {made} {kept}")
        rc, out, err = run(*base, "--route-figures", figures)
        rc2, out2, err2 = run(*base, "--route-figures", figures)
        try:
            kept = json.load(open(figures))
        except (OSError, ValueError):
            kept = {}
        check("--route-figures FILE: written, read back, the no-draft tokens",
              rc == 0 and rc2 == 0 and kept.get("version") == 1
              and json.loads(out2).get("new_tokens") == plain, err + err2)
        shutil.rmtree(route_dir, ignore_errors=True)
        rc, out, err = run(*base, "--route-figures", "none")
        check("--route-figures none: no file", rc == 0 and not os.path.exists(route_dir), err)
        with open(figures, "w") as f:
            f.write("[1, 2")
        rc, out, err = run(*base, "--route-figures", figures)
        check("--route-figures on a file that is not figures: a warning naming it, the same tokens",
              rc == 0 and figures in err and json.loads(out).get("new_tokens") == plain, err)
        # figures where the block trails a plain step by far: route cost runs
        # prompt lookup's pipeline alone, the same tokens, and counts the
        # run's decisions towards the block's next try; once that is due, the
        # router's pipeline again
        def trailing(since):
            arm = lambda s: {"tokens": 3, "rounds": 3, "seconds": [s] * 3}
            return {"format": "gst-dflash route figures", "version": 1,
                    "cpu": {"favoured": "chain", "probe_doublings": 4, "since_try": since,
                            "block": arm(0.010), "chain": arm(0.001)}}
        json.dump(trailing(0), open(figures, "w"))
        rc, out, err = run(*base, "--route-figures", figures)
        o = json.loads(out) if rc == 0 else {}
        kept = json.load(open(figures))
        check("route cost where the block trails: prompt lookup alone, the same tokens, the "
              "decisions counted", o.get("route_pipeline") == "chain" and o.get("block_rounds") == 0
              and o.get("new_tokens") == plain and kept["cpu"]["since_try"] == o.get("rounds"),
              f"rc={rc} {err} {o} {kept}")
        json.dump(trailing(255), open(figures, "w"))
        rc, out, err = run(*base, "--route-figures", figures)
        o = json.loads(out) if rc == 0 else {}
        check("route cost with the block's try due: the router's pipeline",
              o.get("route_pipeline") == "routed" and o.get("new_tokens") == plain, f"rc={rc} {err} {o}")
        os.environ["XDG_CACHE_HOME"] = CACHE
    rc, out, err = run("generate", "--target", GOOD, "--max-new", "8", "--json", "--temperature", "0.8",
                       "--seed", "4", "--top-p", "0.9")
    rc2, out2, err2 = run("generate", "--target", GOOD, "--max-new", "8", "--json", "--temperature", "0.8",
                          "--seed", "4", "--top-p", "0.9", "--no-draft")
    check("sampled: the no-draft tokens for a seed", rc == 0 and rc2 == 0
          and json.loads(out)["new_tokens"] == json.loads(out2)["new_tokens"], err + err2)
    # --backend: where the pipeline runs; each back end this build and machine
    # have gives the CPU's tokens, and one they lack is refused in one line
    # naming it
    expect_error("bad --backend", ["generate", "--target", GOOD, "--backend", "sideways"],
                 "--backend 'sideways' is not cpu, cuda or vulkan", status=2)
    expect_error("--backend auto is the elements' own, not the command's",
                 ["generate", "--target", GOOD, "--backend", "auto"], "--backend 'auto'", status=2)
    expect_error("serve: bad --backend", ["serve", "--target", GOOD, "--port", "0", "--backend", "gpu"],
                 "serve: --backend 'gpu' is not cpu, cuda or vulkan", status=2)
    for backend in ("cpu", "vulkan", "cuda"):
        args = ["generate", "--target", GOOD, "--prompt", "the the cat the cat", "--max-new", "40",
                "--json", "--route-figures", "none", "--route", "block", "--backend", backend]
        # Mesa's lavapipe keeps a buffer that its unloading at vkDestroyInstance
        # leaves unreachable (with the driver held loaded the leak checker
        # reports nothing); the elements' Vulkan tests check ours for leaks
        rc, out, err = run(*args, leaks=backend != "vulkan")
        if rc == 0 or backend == "cpu":
            try:
                o = json.loads(out)
            except ValueError:
                o = {}
            check(f"--backend {backend}: the block's rounds, the no-draft tokens",
                  rc == 0 and o.get("backend") == backend and o.get("block_rounds", 0) > 0
                  and o.get("new_tokens") == plain, f"rc={rc} {err} {o}")
        else:
            lines = err.strip().splitlines()
            check(f"--backend {backend} where this build or machine lacks it: one line naming it",
                  rc == 1 and len(lines) == 1 and lines[0].startswith("dflash: ")
                  and backend in lines[0].lower() and "Sanitizer" not in err, f"rc={rc} {err!r}")
    expect_error("sidecar for another target",
                 ["generate", "--target", os.path.join(FIXTURES, "qwen3", "f32-untied"),
                  "--drafter", os.path.join(GOOD, "dflash.safetensors")], "dflash.safetensors")
    expect_error("bad --route", ["generate", "--target", GOOD, "--route", "sideways"], "sideways", status=2)
    expect_error("--temperature below 0", ["generate", "--target", GOOD, "--temperature", "-1"],
                 "--temperature must be 0 (greedy) to 100, not -1", status=2)
    # what tapsource would not take must not reach it (GLib would warn and
    # the run would go on at the default)
    expect_error("--temperature above tapsource's bound", ["generate", "--target", GOOD, "--temperature", "200"],
                 "--temperature must be 0 (greedy) to 100, not 200", status=2)
    expect_error("--temperature nan", ["generate", "--target", GOOD, "--temperature", "nan"],
                 "--temperature", "not nan", status=2)
    expect_error("--top-p 0", ["generate", "--target", GOOD, "--top-p", "0"],
                 "--top-p must be 1e-06 to 1, not 0", status=2)
    expect_error("--top-p above 1", ["generate", "--target", GOOD, "--top-p", "1.5"],
                 "--top-p must be 1e-06 to 1, not 1.5", status=2)
    expect_error("draft without an anchor", ["draft", "--target", GOOD, "--tokens", "5", "--dump", "/dev/null"],
                 "--tokens has 1 id", "2 ids at least", status=2)
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "prompts.txt")
        open(prompts, "w").write("func main() {\\n\\tx := 1\n")
        expect_error("route-fit without its prompts file",
                     ["route-fit", "--target", GOOD, "--prompts", os.path.join(tmp, "none.txt"),
                      "--out", os.path.join(tmp, "out.safetensors")], "none.txt", "cannot open")
        expect_error("route-fit on a device, not a file",
                     ["route-fit", "--target", GOOD, "--prompts", "/dev/zero",
                      "--out", os.path.join(tmp, "out.safetensors")], "/dev/zero: not a regular file")
        expect_error("route-fit where the block never wins",
                     ["route-fit", "--target", GOOD, "--prompts", prompts, "--max-new", "24",
                      "--out", os.path.join(tmp, "out.safetensors")], "prompts.txt", "won")

    # serve and ab are programs that dflash runs in its place
    for cmd, usage in (("serve", "serve the OpenAI API"), ("ab", "compare two pipelines")):
        rc, out, err = run(cmd, "--help")
        check(f"dflash {cmd} --help runs dflash-{cmd}", rc == 0 and usage in out, f"rc={rc} {out!r} {err!r}")
    if os.path.exists(os.path.join(os.environ.get("DFLASH_COMMAND_DIR", "/nonexistent"), "dflash-serve")):
        check("a dflash without its programs # SKIP installed ones would be found", True)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            alone = os.path.join(tmp, "dflash")
            shutil.copy(DFLASH, alone)
            p = subprocess.run([alone, "serve", "--port", "0"], capture_output=True, text=True, timeout=60)
            check("a dflash without its programs names the one missing",
                  p.returncode == 1 and p.stderr.count("\n") == 1
                  and p.stderr.startswith("dflash: serve: its program is not installed")
                  and os.path.join(tmp, "dflash-serve") in p.stderr, f"rc={p.returncode} {p.stderr!r}")

    rc, out, err = run("inspect", GOOD)
    check("inspect a checkpoint", rc == 0 and "hidden 64" in out and "BF16" in out, out + err)

    with tempfile.TemporaryDirectory() as tmp:
        corrupt_tests(tmp)

    shutil.rmtree(CACHE, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            print(f"# {detail}")
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)


if __name__ == "__main__":
    main()

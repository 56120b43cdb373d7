#!/usr/bin/env python3
"""`dflash ab`: two pipeline files on the same prompts. Lossless pipelines
agree (exit 0, `identical: yes`), each side runs the model its description
asks for (a model each where they differ in one of its properties, one
shared where they agree), the PNG it draws is a valid one (checked
here byte by byte: signature, IHDR, every chunk's CRC, the IDAT stream's
size once inflated) and shows both sides' decode speed (its pixels read
back: the bars over all prompts, top right, in the ratio --json gives), and
bad input gives one `dflash: ` line and the right status. Speaks TAP.

usage: test_ab.py DFLASH_BINARY SOURCE_ROOT [PLUGIN_DIR]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

DFLASH, ROOT = sys.argv[1], sys.argv[2]
PLUGIN_DIR = sys.argv[3] if len(sys.argv) > 3 else None
PIPELINES = os.path.join(ROOT, "pipelines")
SPECULATIVE = os.path.join(PIPELINES, "speculative.pipeline")
PLAIN = os.path.join(PIPELINES, "selector-plain.pipeline")
NO_DRAFT = os.path.join(PIPELINES, "no-draft.pipeline")
results = []


def run(*args, extra_env=None, timeout=150):
    env = dict(os.environ, **(extra_env or {}))
    # a sanitizer's own exit status must not pass for ours
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":exitcode=99"
    env["UBSAN_OPTIONS"] = env.get("UBSAN_OPTIONS", "") + ":halt_on_error=1:exitcode=98"
    p = subprocess.run([DFLASH, "ab", *args], capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def clean(err):
    return "Sanitizer" not in err and "runtime error" not in err and "CRITICAL" not in err


def error_lines(err):
    return [l for l in err.splitlines() if not l.startswith("dflash: no default model")]


def expect_error(name, args, *needles, status=1):
    rc, out, err = run(*args)
    lines = error_lines(err)
    ok = rc == status and len(lines) == 1 and lines[0].startswith("dflash: ") \
        and all(n in lines[0] for n in needles) and clean(err)
    check(name, ok, f"rc={rc} stderr={err.strip()!r}")


def png_problems(path):
    """What is wrong with the PNG at path, as a list (empty: nothing)."""
    data = open(path, "rb").read()
    problems = []
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return ["bad signature"]
    pos, chunks = 8, []
    while pos + 12 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if crc != zlib.crc32(kind + body) & 0xFFFFFFFF:
            problems.append(f"bad CRC on {kind!r}")
        chunks.append((kind, body))
        pos += 12 + n
    kinds = [k for k, _ in chunks]
    if pos != len(data) or not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND":
        return problems + [f"chunks {kinds}, {len(data) - pos} bytes left over"]
    w, h, depth, colour, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (depth, colour, comp, filt, lace) != (8, 2, 0, 0, 0) or not (100 <= w <= 4000 and 100 <= h <= 4000):
        problems.append(f"IHDR {w}x{h} depth {depth} colour {colour}")
    try:
        raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    except zlib.error as e:
        return problems + [f"IDAT: {e}"]
    if len(raw) != h * (1 + 3 * w):
        problems.append(f"IDAT inflates to {len(raw)} bytes, not {h * (1 + 3 * w)}")
    else:
        rows = [raw[r * (1 + 3 * w):(r + 1) * (1 + 3 * w)] for r in range(h)]
        if any(r[0] > 4 for r in rows):
            problems.append("a row with an unknown filter type")
        if len(set(raw)) < 4:
            problems.append("the picture is blank")
    return problems


# the sides' colours in the picture (tools/dflash-ab-plot.h)
COLOR_A, COLOR_B = bytes.fromhex("3B6FB6"), bytes.fromhex("E08A2E")


def png_rgb(path):
    """(width, height, rows): the RGB bytes of each row of an 8-bit RGB PNG,
    its filters undone."""
    data = open(path, "rb").read()
    w, h = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), 3 * w, [], bytes(3 * w)
    for r in range(h):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = rows[-1]
    return w, h, rows


def tallest_run(rows, x0, x1, y0, y1, color):
    """The tallest run of pixels of `color` in a column of the region."""
    best = 0
    for x in range(x0, x1):
        run = 0
        for y in range(y0, y1):
            run = run + 1 if rows[y][3 * x:3 * x + 3] == color else 0
            best = max(best, run)
    return best


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "prompts.txt")
        with open(prompts, "w") as f:
            f.write('func main() {\nimport (\\n\\t"fmt"\npackage main\\n\\nfunc add(a, b int) int {\n')
        png = os.path.join(tmp, "ab.png")

        rc, out, err = run(SPECULATIVE, PLAIN, "--prompts", prompts, "--max-new", "24", "--plot", png)
        total = out.split("\ntotal")[-1]
        check("two lossless pipelines agree", rc == 0 and out.count("identical: yes") == 4
              and "identical: yes" in total and "tau" in total and clean(err), f"rc={rc}\n{out}\n{err}")
        check("every prompt has its figures", all(f"prompt {i} " in out for i in (1, 2, 3))
              and out.count("accepted by position:") == 8 and "tokens/s" in out, out)
        problems = png_problems(png) if os.path.exists(png) else ["no file"]
        check("the plot is a valid PNG", not problems, "; ".join(problems))

        os.unlink(png)
        rc, out, err = run(SPECULATIVE, NO_DRAFT, "--prompts", prompts, "--max-new", "8", "--json", "--plot", png)
        try:
            o = json.loads(out)
        except ValueError:
            o = {}
        check("--json", rc == 0 and o.get("identical") is True and len(o.get("prompts", [])) == 3
              and all(p["identical"] and p["a"]["text"] == p["b"]["text"] for p in o["prompts"])
              and o["a"]["tau"] >= 1 and o["b"]["tau"] == 1 and o["a"]["new_tokens"] == o["b"]["new_tokens"]
              and len(o["a"]["accept_rate_per_position"]) >= 1 and clean(err), f"rc={rc} {out} {err}")
        problems = png_problems(png) if os.path.exists(png) else ["no file"]
        if not problems:
            w, h, rows = png_rgb(png)
            # the speed over all prompts: the top right panel, A's bar and B's
            a = tallest_run(rows, w * 2 // 3, w, 0, h // 2, COLOR_A)
            b = tallest_run(rows, w * 2 // 3, w, 0, h // 2, COLOR_B)
            speed_a, speed_b = o["a"]["decode_tokens_per_s"], o["b"]["decode_tokens_per_s"]
            ratio = speed_b / speed_a if speed_a > 0 else 0.0
            if max(a, b) <= 20:
                problems.append(f"no speed bar taller than 20 pixels ({a} and {b})")
            # the bars' heights in the ratio of the speeds, where both stand
            # clear of the legend's swatches (a run of two tiny sides, timed
            # on a busy machine, can leave one bar a few pixels tall)
            elif 0.25 <= ratio <= 4 and abs(b - a * ratio) > 3:
                problems.append(f"speed bars of {a} and {b} pixels for {speed_a:.1f} and {speed_b:.1f} tokens/s")
        check("the plot shows both sides' decode speed", not problems, "; ".join(problems))

        # sampling at a temperature is not what plain decoding gives: ab must say so
        sampled = os.path.join(tmp, "sampled.pipeline")
        with open(sampled, "w") as f:
            f.write("# not lossless\ntapsource temperature=0.8 seed=3 ! verifier ! fdsink\n")
        rc, out, err = run(NO_DRAFT, sampled, "--prompts", prompts, "--max-new", "8")
        lines = error_lines(err)
        check("different outputs: exit 1 naming the prompt", rc == 1 and "identical: no" in out.split("\ntotal")[-1]
              and len(lines) == 1 and "prompt 1" in lines[0] and clean(err), f"rc={rc}\n{out}\n{err}")

        # Each side runs the model its description asks for: tapsources that
        # differ in a property that chooses the model (here gpu-weights, which
        # the CPU ignores, and another drafter file) get a model each; the
        # same description twice shares one.
        f32 = os.path.join(tmp, "f32.pipeline")
        with open(f32, "w") as f:
            f.write("tapsource gpu-weights=f32 ! verifier ! fdsink\n")
        rc, out, err = run(NO_DRAFT, f32, "--prompts", prompts, "--max-new", "4", "--json")
        o = json.loads(out) if rc == 0 else {}
        ma, mb = o.get("a", {}).get("model", {}), o.get("b", {}).get("model", {})
        check("sides differing in gpu-weights get a model each", rc == 0
              and "gpu-weights=stored" in ma.get("key", "") and "gpu-weights=f32" in mb.get("key", "")
              and ma.get("shared") is False and mb.get("shared") is False and clean(err),
              f"rc={rc} a={ma} b={mb} {err}")
        sidecar = os.path.join(os.environ["DFLASH_MODEL"], "dflash.safetensors")
        other = os.path.join(tmp, "other-drafter.safetensors")
        with open(sidecar, "rb") as src, open(other, "wb") as dst:
            dst.write(src.read())
        named = os.path.join(tmp, "named-drafter.pipeline")
        with open(named, "w") as f:
            f.write(f"tapsource drafter={other} ! queue ! ctxsettle ! queue ! dflashblock ! selector"
                    " min-confidence=0.05 ! verifier ! fdsink\n")
        rc, out, err = run(SPECULATIVE, named, "--prompts", prompts, "--max-new", "4", "--json")
        o = json.loads(out) if rc == 0 else {}
        ma, mb = o.get("a", {}).get("model", {}), o.get("b", {}).get("model", {})
        check("a side naming another drafter runs it", rc == 0
              and ma.get("drafter") == sidecar and mb.get("drafter") == other
              and mb.get("shared") is False and clean(err), f"rc={rc} a={ma} b={mb} {err}")
        # the plugin's library on the plugin path, scanned without a fork:
        # the program's own copy of the elements is the one that runs (the
        # scan used to load the library beside it, and the program hung)
        if PLUGIN_DIR:
            try:
                rc, out, err = run(NO_DRAFT, PLAIN, "--prompts", prompts, "--max-new", "4",
                                   extra_env={"GST_PLUGIN_PATH_1_0": PLUGIN_DIR,
                                              "GST_REGISTRY_FORK": "no",
                                              "GST_REGISTRY_1_0": os.path.join(tmp, "reg.bin")},
                                   timeout=60)
            except subprocess.TimeoutExpired:
                rc, out, err = -1, "", "timed out"
            check("the plugin on the plugin path, the registry's scan in-process", rc == 0
                  and "identical: yes" in out.split("\ntotal")[-1] and clean(err),
                  f"rc={rc}\n{out}\n{err}")
        rc, out, err = run(NO_DRAFT, NO_DRAFT, "--prompts", prompts, "--max-new", "4")
        check("the same description twice shares one model", rc == 0
              and out.count("model: A's (both tapsources ask for the same one)") == 1
              and out.count("gpu-weights=stored") == 2 and clean(err), f"rc={rc}\n{out}\n{err}")

        missing = os.path.join(tmp, "missing.pipeline")
        expect_error("a missing pipeline file", [SPECULATIVE, missing, "--prompts", prompts], "missing.pipeline")
        bad = os.path.join(tmp, "bad.pipeline")
        with open(bad, "w") as f:
            f.write("# no such element\ntapsource ! nosuchelement ! fdsink\n")
        expect_error("an unparsable pipeline file", [bad, PLAIN, "--prompts", prompts], "bad.pipeline",
                     "nosuchelement")
        no_verifier = os.path.join(tmp, "no-verifier.pipeline")
        with open(no_verifier, "w") as f:
            f.write("tapsource ! fdsink\n")
        expect_error("a pipeline without a verifier", [SPECULATIVE, no_verifier, "--prompts", prompts],
                     "no-verifier.pipeline", "verifier")
        too_long = os.path.join(tmp, "too-long.pipeline")
        with open(too_long, "w") as f:
            f.write("tapsource max-new-tokens=100000 ! verifier ! fdsink\n")
        expect_error("an error on the bus", [SPECULATIVE, too_long, "--prompts", prompts],
                     "too-long.pipeline", "prompt 1")
        expect_error("--plot into a missing folder", [SPECULATIVE, PLAIN, "--prompts", prompts, "--max-new", "2",
                                                     "--plot", os.path.join(tmp, "no-such-folder", "ab.png")],
                     "--plot", "no-such-folder")
        empty = os.path.join(tmp, "empty.txt")
        open(empty, "w").write("\n\n")
        expect_error("a prompts file without prompts", [SPECULATIVE, PLAIN, "--prompts", empty], "empty.txt")
        expect_error("no --prompts", [SPECULATIVE, PLAIN], "--prompts", status=2)
        expect_error("one pipeline only", [SPECULATIVE, "--prompts", prompts], "two", status=2)
        expect_error("--max-new 0", [SPECULATIVE, PLAIN, "--prompts", prompts, "--max-new", "0"],
                     "--max-new", status=2)
        expect_error("--max-new past the largest accepted",
                     [SPECULATIVE, PLAIN, "--prompts", prompts, "--max-new", "2000000000"],
                     "--max-new must be 1 to 1073741823, not 2000000000", status=2)

    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).splitlines():
                print(f"# {line}")
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)


if __name__ == "__main__":
    main()

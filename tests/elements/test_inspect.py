#!/usr/bin/env python3
"""gst-inspect-1.0 on the dflash plugin and on each of its elements, in the
tests' GStreamer environment: each exits 0, prints nothing on stderr that
warns (a GLib WARNING or CRITICAL while the class or the plugin loads), and
every property it lists has a description. Speaks TAP.

usage: test_inspect.py GST_INSPECT
Under a sanitizer build, $DFL_PRELOAD names the runtimes gst-inspect-1.0
(not instrumented itself) needs preloaded to load the instrumented plugin.
"""
import os
import re
import subprocess
import sys

GST_INSPECT = sys.argv[1]
ELEMENTS = ["tapsource", "ctxsettle", "dflashblock", "selector", "ngramdraft", "router", "verifier"]
results = []


def inspect(*args):
    env = dict(os.environ)
    env["GST_INSPECT_NO_COLORS"] = "1"
    env["PAGER"] = "cat"
    if env.get("DFL_PRELOAD"):
        env["LD_PRELOAD"] = env["DFL_PRELOAD"]
        # gst-inspect-1.0's own allocations are not this project's to judge;
        # the elements' leaks are checked in test-elements under LSan
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    p = subprocess.run([GST_INSPECT, *args], capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def warnings(err):
    return [l for l in err.splitlines() if "WARNING" in l or "CRITICAL" in l or "ERROR" in l]


def properties(out):
    """(name, description) of each property gst-inspect lists."""
    props, inside = [], False
    for line in out.splitlines():
        if line.startswith("Element Properties:"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        m = re.match(r"^  ([a-z][a-z0-9-]*)\s*: ?(.*)$", line) if inside else None
        if m:
            props.append((m.group(1), m.group(2).strip()))
    return props


rc, out, err = inspect("dflash")
check("gst-inspect-1.0 dflash exits 0", rc == 0, err)
check("gst-inspect-1.0 dflash warns of nothing", not warnings(err), "\n".join(warnings(err)))
listed = re.findall(r"^\s+([a-z]+): ", out, re.M)
check("the plugin lists its 7 elements", sorted(listed) == sorted(ELEMENTS), f"listed: {listed}")

for element in ELEMENTS:
    rc, out, err = inspect(element)
    check(f"gst-inspect-1.0 {element} exits 0", rc == 0, err)
    check(f"gst-inspect-1.0 {element} warns of nothing", not warnings(err), "\n".join(warnings(err)))
    props = properties(out)
    check(f"{element} lists its properties", len(props) >= 2, out[-2000:])
    bare = [n for n, d in props if not d or d.lower().replace(" ", "-") == n]
    check(f"{element}: every property is described", not bare, f"undescribed: {bare}")

# every element that computes has `backend`; the tensor pads list system
# memory and each GPU memory this build has
COMPUTING = ["tapsource", "ctxsettle", "dflashblock", "selector", "verifier"]
TENSOR_PADS = {"ctxsettle": ["SINK", "SRC"], "dflashblock": ["SINK", "SRC"], "selector": ["SINK"]}
gpu = os.environ.get("DFL_GPU_FEATURES", "").split()
for element in ELEMENTS:
    rc, out, err = inspect(element)
    if element in COMPUTING:
        names = [n for n, _ in properties(out)]
        check(f"{element} has the backend property", "backend" in names, f"properties: {names}")
        check(f"{element}: backend lists auto, cpu, cuda, vulkan",
              all(re.search(r"\(\d+\): %s\s" % v, out) for v in ("auto", "cpu", "cuda", "vulkan")),
              out[-3000:])
    for direction in TENSOR_PADS.get(element, []):
        m = re.search(r"^  %s template: .*?(?=^  [A-Z]+ template: |^Element |\Z)" % direction, out,
                      re.M | re.S)
        block = m.group(0) if m else ""
        # gst-inspect prints system memory as the bare media type
        check(f"{element} {direction.lower()} template lists system memory",
              re.search(r"^\s+application/x-dflash-[a-z]+$", block, re.M), block)
        for feature in gpu:
            check(f"{element} {direction.lower()} template lists {feature}",
                  f"({feature})" in block, block)

print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines():
            print(f"# {line}")
sys.exit(0 if all(ok for _, ok, _ in results) else 1)

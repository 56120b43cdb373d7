#!/usr/bin/env python3
"""Prompts for tuning the drafting pipelines' settings, from packages the pair
trained on (so tuning never looks at the held-out packages that
bench/heldout-prompts.txt comes from): function headers, one a line, as the
held-out prompts are. Deterministic: the packages in a fixed order, their
non-test files sorted, every header that opens a body on its line, then an
even spread of them.

    python3 bench/make-tuning-prompts.py [GO_SRC] > bench/tuning-prompts.txt

GO_SRC defaults to Debian's golang-1.19-src (/usr/share/go-1.19/src).
"""
import os
import sys

PACKAGES = ["bufio", "bytes", "strings", "strconv", "sort", "fmt", "regexp", "net/url",
            "encoding/xml", "archive/tar", "compress/flate", "image/png", "go/printer",
            "go/parser", "time", "os/exec"]
HELD_OUT = ("net/http", "encoding/json", "text/template")
PER_PACKAGE = 3


def headers(src, pkg):
    d = os.path.join(src, pkg)
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".go") or name.endswith("_test.go"):
            continue
        with open(os.path.join(d, name), encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("func ") and line.endswith("{") and len(line) < 120:
                    out.append(line)
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/go-1.19/src"
    for pkg in PACKAGES:
        assert not any(pkg == h or pkg.startswith(h + "/") for h in HELD_OUT), pkg
        hs = headers(src, pkg)
        if len(hs) < PER_PACKAGE:
            sys.exit(f"{src}/{pkg}: {len(hs)} function headers, {PER_PACKAGE} wanted")
        step = len(hs) / PER_PACKAGE
        for i in range(PER_PACKAGE):
            print(hs[int(step * (i + 0.5))])


if __name__ == "__main__":
    main()

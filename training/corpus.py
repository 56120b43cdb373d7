#!/usr/bin/env python3
"""The training corpus: Go sources from Debian's golang-1.19-src package.

Runs on the CPU (no torch). Downloads the package with apt-get (run
`apt-get update` once first) unless a .deb is already in data/deb/, unpacks
it with dpkg -x, and packs the `*.go` files of its `src/` tree into two
compressed texts:

    training/data/corpus/train.txt.xz     documents separated by "\\0"
    training/data/corpus/heldout.txt.xz   the held-out packages, same format
    training/data/corpus/manifest.json    package, version, sha256, licence,
                                          rules, counts and every file's path

What is kept (and why):
- `src/**/*.go`, `_test.go` files included: tests are ordinary, idiomatic Go
  (table-driven tests, t.Errorf, examples) and add about a fifth more text;
  the target over-fits this corpus, so more text is worth more than a
  "library only" purity.
- Only files whose licence in the package's DEP-5 copyright file is "Go"
  (BSD-3-Clause); the few files under X11 / FreeBSD / MPEG / Apache-2.0
  are left out so the whole corpus has one licence.
- Generated files (a line `// Code generated ... DO NOT EDIT.`) are left out:
  syscall/unicode tables and rewrite rules are megabytes of repetitive
  constants that would teach the model tables, not Go.
- `testdata/` directories are left out (much of it is deliberately broken Go
  for the compiler's and vet's error tests), and so is `misc/`.
- The Go test suite `test/` (programs the compiler and runtime are tested
  with, about 6 MB) is kept, less its `// errorcheck` programs (deliberate
  compile errors); `--no-test-suite` leaves it all out.
- Held out, never trained on (neither tokenizer nor models): the packages
  net/http, encoding/json and text/template and all their subpackages.

    python3 training/corpus.py [--data training/data] [--no-tests]
"""
import argparse
import fnmatch
import glob
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys

PACKAGE = "golang-1.19-src"
GOROOT = "usr/share/go-1.19"
COPYRIGHT = "usr/share/doc/golang-1.19-src/copyright"
HELDOUT = ["net/http", "encoding/json", "text/template"]
ERRORCHECK = re.compile(r"^// errorcheck", re.M)
KEEP_LICENSE = "Go"          # the Go licence: BSD-3-Clause
SPDX = "BSD-3-Clause"
GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.M)
SEP = "\0"


def sh(cmd, cwd=None):
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=cwd)


def fetch_deb(data):
    debdir = os.path.join(data, "deb")
    os.makedirs(debdir, exist_ok=True)
    debs = sorted(glob.glob(os.path.join(debdir, f"{PACKAGE}_*.deb")))
    if not debs:
        sh(["apt-get", "download", PACKAGE], cwd=debdir)
        debs = sorted(glob.glob(os.path.join(debdir, f"{PACKAGE}_*.deb")))
    if len(debs) != 1:
        sys.exit(f"corpus.py: expected one {PACKAGE} .deb in {debdir}, found {debs}")
    return debs[0]


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", deb, field], check=True, capture_output=True,
                          text=True).stdout.strip()


def parse_dep5(text):
    """-> [(patterns, licence short name)] in file order (the last match wins)."""
    stanzas = []
    for block in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, val = line.partition(":")
                key = key.strip()
                fields[key] = val.strip()
        if "Files" in fields and "License" in fields:
            pats = fields["Files"].split()
            lic = fields["License"].split("\n")[0].strip()
            stanzas.append((pats, lic))
    return stanzas


def licence_of(stanzas, path):
    lic = None
    for pats, l in stanzas:
        # DEP-5: '*' matches any run of characters, '/' included; fnmatch's does too
        if any(fnmatch.fnmatchcase(path, p) for p in pats):
            lic = l
    return lic


def package_of(rel):
    """'src/net/http/httptest/server.go' -> 'net/http/httptest'."""
    return os.path.dirname(rel)[len("src/"):]


def held_out(pkg):
    return any(pkg == h or pkg.startswith(h + "/") for h in HELDOUT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    ap.add_argument("--no-tests", action="store_true", help="leave out *_test.go files")
    ap.add_argument("--no-test-suite", action="store_true", help="leave out the test/ tree")
    ap.add_argument("--xz-preset", type=int, default=6)
    a = ap.parse_args()

    deb = fetch_deb(a.data)
    version = deb_field(deb, "Version")
    sha = hashlib.sha256(open(deb, "rb").read()).hexdigest()
    root = os.path.join(a.data, "src")
    stamp = os.path.join(root, ".unpacked-" + sha[:16])
    if not os.path.exists(stamp):
        sh(["rm", "-rf", root])
        sh(["dpkg", "-x", deb, root])
        open(stamp, "w").close()
    goroot = os.path.join(root, GOROOT)
    copyright_text = open(os.path.join(root, COPYRIGHT), encoding="utf-8").read()
    stanzas = parse_dep5(copyright_text)

    splits = {"train": [], "heldout": []}
    skipped = {"testdata": 0, "generated": 0, "licence": 0, "tests": 0, "not_utf8_or_nul": 0,
               "errorcheck": 0}
    skipped_licences = {}
    walk = [os.walk(os.path.join(goroot, "src"))]
    if not a.no_test_suite:
        walk.append(os.walk(os.path.join(goroot, "test")))
    for dirpath, dirnames, filenames in (e for w in walk for e in w):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(".go"):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, goroot)
            if "/testdata/" in "/" + rel:
                skipped["testdata"] += 1
                continue
            if a.no_tests and name.endswith("_test.go"):
                skipped["tests"] += 1
                continue
            lic = licence_of(stanzas, rel)
            if lic != KEEP_LICENSE:
                skipped["licence"] += 1
                skipped_licences[rel] = lic
                continue
            raw = open(full, "rb").read()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped["not_utf8_or_nul"] += 1
                continue
            if SEP in text:
                skipped["not_utf8_or_nul"] += 1
                continue
            if GENERATED.search(text):
                skipped["generated"] += 1
                continue
            if rel.startswith("test/") and ERRORCHECK.search(text[:1000]):
                skipped["errorcheck"] += 1
                continue
            split = "heldout" if rel.startswith("src/") and held_out(package_of(rel)) else "train"
            splits[split].append((rel, text))

    out = os.path.join(a.data, "corpus")
    os.makedirs(out, exist_ok=True)
    manifest = {
        "source": {"package": PACKAGE, "version": version, "deb": os.path.basename(deb),
                   "sha256": sha, "origin": "Debian bookworm (apt-get download golang-1.19-src)",
                   "upstream": "The Go Authors, Go " + version.split("-")[0]},
        "licence": {"spdx": SPDX, "dep5_name": KEEP_LICENSE,
                    "text": "usr/share/doc/golang-1.19-src/copyright (stanza 'License: Go')",
                    "files_under_other_licences_left_out": skipped_licences},
        "rules": {"kept": "src/**/*.go" + ("" if not a.no_tests else " minus *_test.go")
                  + ("" if a.no_test_suite else ", test/**/*.go minus // errorcheck programs"),
                  "tests_included": not a.no_tests,
                  "left_out": ["*/testdata/*", "generated files (// Code generated ... DO NOT EDIT.)",
                               "files not under the Go licence", "non-UTF-8 files or files with NUL"],
                  "heldout_packages": [h + " (and subpackages)" for h in HELDOUT],
                  "format": "xz-compressed UTF-8, one document per file, documents separated by NUL"},
        "skipped": skipped,
        "splits": {},
    }
    for split, docs in splits.items():
        blob = SEP.join(t for _, t in docs).encode("utf-8")
        path = os.path.join(out, f"{split}.txt.xz")
        with open(path, "wb") as f:
            f.write(lzma.compress(blob, preset=a.xz_preset))
        pkgs = sorted({package_of(r) for r, _ in docs if r.startswith("src/")})
        manifest["splits"][split] = {
            "file": os.path.basename(path), "documents": len(docs), "bytes": len(blob),
            "compressed_bytes": os.path.getsize(path),
            "test_files": sum(r.endswith("_test.go") for r, _ in docs),
            "packages": len(pkgs), "sha256": hashlib.sha256(blob).hexdigest(),
            "paths": [r for r, _ in docs]}
        if split == "heldout":
            manifest["splits"][split]["package_list"] = pkgs
        print(f"{split}: {len(docs)} files, {len(blob) / 1e6:.1f} MB text, "
              f"{os.path.getsize(path) / 1e6:.1f} MB xz, {len(pkgs)} packages")
    # nothing held out may leak into train
    assert not any(r.startswith("src/") and held_out(package_of(r))
                   for r in manifest["splits"]["train"]["paths"])
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"skipped: {skipped}")
    print(f"wrote {out}/manifest.json")
    return 0


def read_split(path):
    """The documents of a packed split (train.txt.xz / heldout.txt.xz)."""
    with open(path, "rb") as f:
        return lzma.decompress(f.read()).decode("utf-8").split(SEP)


if __name__ == "__main__":
    sys.exit(main())
